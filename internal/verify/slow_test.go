package verify_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/bulkd/bulkd/internal/verify"
)

// slowSpec is one domain on a Postfix-like host that takes per over each
// RCPT and answers a pipelined group only once it has processed all of it.
func slowSpec(per time.Duration) (mailworld.Spec, map[string]string) {
	spec := mailworld.Spec{
		Hosts:   []mailworld.Host{{Name: "mx.slow.test"}},
		Domains: []mailworld.Domain{{Name: "slow.test", MX: []string{"mx.slow.test"}, Users: []string{"ann", "bob", "cy", "di"}}},
	}
	spec, _ = mailworld.Apply(spec, "mx.slow.test", mailworld.SlowRcpts(per))
	want := map[string]string{"ann@slow.test": verify.StatusDeliverable, "bob@slow.test": verify.StatusDeliverable,
		"cy@slow.test": verify.StatusDeliverable, "eve@slow.test": verify.StatusUndeliverable}
	return spec, want
}

// A server that needs longer for a pipelined group than one reply's
// timeout (its first group, the probe and 2 addresses at 1.5 s each,
// against a 1 s command timeout) is slow, not a tarpit: every address gets
// its real verdict on the first try, answered as they come (VerifyEach),
// the rest in groups of its learned depth over more sessions, and the depth
// is shared through Redis for the next process.
func TestSlowServerAnsweredAtItsPace(t *testing.T) {
	spec, want := slowSpec(1500 * time.Millisecond)
	w := startWorld(t, spec)
	srv := testredis.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	lim := verify.NewRedisLimiter(rdb, verify.LimiterOptions{})
	v := mustNew(t, worldConfig(w), lim)
	var emails []string
	for e := range want {
		emails = append(emails, e)
	}
	var emitted []time.Duration
	start := time.Now()
	res := v.VerifyEach(context.Background(), emails, func(idxs []int, r verify.Result) {
		emitted = append(emitted, time.Since(start))
	})
	took := time.Since(start)
	for _, r := range res {
		if r.Status != want[r.Email] || r.Reason == verify.ReasonTimeout {
			t.Errorf("%s: %s/%s, want %s", r.Email, r.Status, r.Reason, want[r.Email])
		}
	}
	if len(emitted) != len(emails) {
		t.Fatalf("%d answers handed over, want %d", len(emitted), len(emails))
	}
	// Small groups: the first answers come well before the last.
	if emitted[0] >= took-500*time.Millisecond {
		t.Errorf("first answer handed over at %v of %v: answers did not arrive as they came", emitted[0], took)
	}
	n, err := lim.SharedDepth(context.Background(), verify.ServerKey(verify.AnyEgress, w.HostIP("mx.slow.test")))
	if err != nil || n != 1 {
		t.Errorf("shared depth of the slow server = %d (%v), want 1 (a 2 s group at 1.5 s per RCPT)", n, err)
	}
	if s := w.Stats().PerHost["mx.slow.test"]; s.MaxConcurrent < 2 {
		t.Errorf("the slow server saw at most %d session at once: its queue was not spread once it was found slow", s.MaxConcurrent)
	}
}

// A server that answers nothing within the wait is a tarpit, and its
// timeout is provisional (Temporary: the retry pass asks again), not a
// final unknown.
func TestTimeoutIsProvisional(t *testing.T) {
	spec, _ := slowSpec(0)
	spec.Hosts[0].Tarpit = 3 * time.Second
	w := startWorld(t, spec)
	v := mustNew(t, worldConfig(w), nil)
	r := v.VerifyOne(context.Background(), "ann@slow.test")
	if r.Status != verify.StatusUnknown || r.Reason != verify.ReasonTimeout || !r.Temporary {
		t.Errorf("tarpit: %s/%s temporary=%v, want unknown/timeout, temporary", r.Status, r.Reason, r.Temporary)
	}
}
