package verify_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/internal/verify"
)

func startWorld(t testing.TB, spec mailworld.Spec) *mailworld.World {
	t.Helper()
	w, err := mailworld.Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("mailworld: %v", err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func worldConfig(w *mailworld.World) verify.Config {
	return verify.Config{
		DNSServer:      w.DNSAddr(),
		SMTPPort:       w.SMTPPort(),
		DNSTimeout:     300 * time.Millisecond,
		DialTimeout:    time.Second,
		CommandTimeout: time.Second,
		SessionTimeout: 20 * time.Second,
	}
}

func emailsOf(cases []mailworld.Case) []string {
	out := make([]string, len(cases))
	for i, c := range cases {
		out[i] = c.Email
	}
	return out
}

// TestClasses checks every class of mailbox and failure of the test world:
// every knowable case gets exactly the expected status and reason, nothing
// is deliverable that the world does not say is, and the limiter keeps us
// under every host's connection limit.
func TestClasses(t *testing.T) {
	w := startWorld(t, mailworld.Classes(mailworld.ClassOptions{Greylist: time.Second, Tarpit: 3 * time.Second}))
	cfg := worldConfig(w)
	cfg.GreylistRetry = 1500 * time.Millisecond
	v, err := verify.New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cases := w.Cases()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	res := v.Verify(ctx, emailsOf(cases))
	t.Logf("%d addresses in %v", len(cases), time.Since(start).Round(time.Millisecond))
	if len(res) != len(cases) {
		t.Fatalf("%d results for %d inputs", len(res), len(cases))
	}
	for i, c := range cases {
		r := res[i]
		if r.Status == verify.StatusDeliverable && c.Status != mailworld.Deliverable {
			t.Errorf("FALSE DELIVERABLE %s: %+v", c.Email, r)
		}
		if r.Status != c.Status || r.Reason != c.Reason {
			b, _ := json.Marshal(r)
			t.Errorf("%s: got %s/%s, want %s/%s (knowable %v) %s", c.Email, r.Status, r.Reason, c.Status, c.Reason, c.Knowable, b)
		}
		if verify.StatusOf(r.Reason) != r.Status {
			t.Errorf("%s: reason %s does not belong to status %s", c.Email, r.Reason, r.Status)
		}
	}
	st := w.Stats()
	if st.Rejected421 != 0 {
		t.Errorf("%d sessions refused with 421", st.Rejected421)
	}
	t.Logf("stats: sessions %d, rcpts %d, 452s %d, 450s %d", st.Sessions, st.Rcpts, st.Replies452, st.Greylisted)
}
