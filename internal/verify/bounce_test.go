package verify_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/internal/verify"
)

// TestAcceptThenBounce: a server that accepts every RCPT and bounces later
// accepts the catch-all probe too, so its addresses are risky/catch_all,
// real mailboxes and unknown ones alike: never deliverable (its unknown
// mailboxes' truth is undeliverable, Spec.Truth).
func TestAcceptThenBounce(t *testing.T) {
	spec := mailworld.DropsBlocks(mailworld.DropsBlocksOptions{Drops: 10, Blocked: 1, Bounce: 30})
	w := startWorld(t, spec)
	v, err := verify.New(worldConfig(w), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cases := w.Cases()
	res := v.Verify(ctx, emailsOf(cases))
	n := 0
	for i, c := range cases {
		r := res[i]
		if r.Status == verify.StatusDeliverable && spec.Truth(c.Email) != mailworld.Deliverable {
			t.Errorf("FALSE DELIVERABLE %s (truth %s): %+v", c.Email, spec.Truth(c.Email), r)
		}
		if !strings.HasSuffix(c.Email, "@bounce.test") {
			continue
		}
		n++
		if r.Status != verify.StatusRisky || r.Reason != verify.ReasonCatchAll || !r.IsCatchAll {
			t.Errorf("%s (truth %s): %s/%s catch-all %v, want risky/catch_all", c.Email, spec.Truth(c.Email), r.Status, r.Reason, r.IsCatchAll)
		}
	}
	if n != 30 {
		t.Fatalf("%d bounce.test addresses", n)
	}
	if b := w.Stats().PerHost["mx.bounce.test"].Bounces; b == 0 {
		t.Error("the server counted no bounce: the probe at least is one")
	}
}

// TestRecipientPolicyIsNotABlock: a recipient whose own policy refuses our
// sender ("550 5.7.1 <addr>: Sender blocked by the recipient's block
// list") is undeliverable/rejected, and the host is not backed off: its
// other addresses, in this call and the next, get their verdicts. Before
// the RCPT-stage rule, "block list" made it a client block and every
// address of the host unknown/blocked for 30 minutes.
func TestRecipientPolicyIsNotABlock(t *testing.T) {
	spec := mailworld.Spec{
		Hosts: []mailworld.Host{{Name: "mx.policy.test"}},
		Domains: []mailworld.Domain{{Name: "policy.test", MX: []string{"mx.policy.test"},
			Users: []string{"alice", "bob", "carol"}, SenderBlocked: []string{"picky"}}},
	}
	w := startWorld(t, spec)
	v, err := verify.New(worldConfig(w), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	emails := []string{"picky@policy.test", "alice@policy.test", "bob@policy.test", "nobody@policy.test", "carol@policy.test"}
	want := []string{verify.ReasonRejected, verify.ReasonAccepted, verify.ReasonAccepted, verify.ReasonMailboxNotFound, verify.ReasonAccepted}
	for call := 1; call <= 2; call++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		res := v.Verify(ctx, emails)
		cancel()
		for i, r := range res {
			if r.Reason != want[i] {
				t.Errorf("call %d: %s: %s/%s, want %s", call, r.Email, r.Status, r.Reason, want[i])
			}
		}
	}
}
