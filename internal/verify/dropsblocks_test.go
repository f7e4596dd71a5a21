package verify_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/bulkd/bulkd/internal/verify"
)

// scoreDropsBlocks verifies the world's cases and returns how many drop
// cases and blocked cases got exactly their truth.
func scoreDropsBlocks(t *testing.T, v *verify.Verifier, cases []mailworld.Case) (dropsRight, drops, blockedRight, blocked int, res []verify.Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res = v.Verify(ctx, emailsOf(cases))
	for i, c := range cases {
		r := res[i]
		if r.Status == verify.StatusDeliverable && c.Status != mailworld.Deliverable {
			t.Errorf("FALSE DELIVERABLE %s: %+v", c.Email, r)
		}
		right := r.Status == c.Status && r.Reason == c.Reason
		if strings.HasSuffix(c.Email, "@blocked.test") {
			blocked++
			if right {
				blockedRight++
			}
			continue
		}
		drops++
		if right {
			dropsRight++
		} else {
			t.Logf("%s: got %s/%s, want %s/%s", c.Email, r.Status, r.Reason, c.Status, c.Reason)
		}
	}
	return
}

// TestDropAfterKRcpts: servers that close the session without a reply
// after K (1..3) RCPTs. Every address gets its real verdict: the dropped
// ones go to a new session of at most K RCPTs. The host's limit is learned
// for later calls once two sessions dropped after the same K: the first
// call sees one drop per host, the second at most one more (the
// confirmation), the third none.
func TestDropAfterKRcpts(t *testing.T) {
	w := startWorld(t, mailworld.DropsBlocks(mailworld.DropsBlocksOptions{Drops: 80, Blocked: 1}))
	v, err := verify.New(worldConfig(w), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	right, n, _, _, _ := scoreDropsBlocks(t, v, w.Cases())
	st := w.Stats()
	t.Logf("drop-after-K: %d of %d right in %v; %d sessions, %d RCPTs, %d drops",
		right, n, time.Since(start).Round(time.Millisecond), st.Sessions, st.Rcpts, sumDrops(st))
	if right != n {
		t.Errorf("%d of %d drop-after-K addresses right, want all", right, n)
	}
	hosts := int64(0)
	for _, h := range st.PerHost {
		if h.Drops > 0 {
			hosts++
		}
	}
	// The second call drops once more per host at most: that drop, after
	// the same K, confirms the limit.
	w.ResetStats()
	right, n, _, _, _ = scoreDropsBlocks(t, v, w.Cases())
	if right != n {
		t.Errorf("second call: %d of %d right", right, n)
	}
	if d := sumDrops(w.Stats()); d > hosts {
		t.Errorf("second call: %d sessions dropped, want at most %d (one per host)", d, hosts)
	}
	// A third call starts within the learned limits: no drop at all.
	w.ResetStats()
	right, n, _, _, _ = scoreDropsBlocks(t, v, w.Cases())
	if right != n {
		t.Errorf("third call: %d of %d right", right, n)
	}
	if d := sumDrops(w.Stats()); d != 0 {
		t.Errorf("third call: %d sessions dropped, want 0 (limits learned)", d)
	}
}

// TestSingleDropNotShared: one drop after K is not a limit: the call
// retries its dropped addresses in smaller sessions, but nothing is shared,
// so another process sharing the Redis limiter still sends the host full
// sessions (and sees the host drop in its turn). Before the rule, the first
// drop lowered the shared limit for an hour.
func TestSingleDropNotShared(t *testing.T) {
	srv := testredis.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	w := startWorld(t, mailworld.DropsBlocks(mailworld.DropsBlocksOptions{Drops: 30, Blocked: 1}))
	a, err := verify.New(worldConfig(w), nil, verify.NewRedisLimiter(rdb, verify.LimiterOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	right, n, _, _, _ := scoreDropsBlocks(t, a, w.Cases())
	if right != n {
		t.Errorf("%d of %d right", right, n)
	}
	var once []string
	for name, h := range w.Stats().PerHost {
		if h.Drops == 1 {
			once = append(once, name)
		}
	}
	if len(once) == 0 {
		t.Fatal("no host dropped exactly once: the world no longer tests a single drop")
	}
	w.ResetStats()
	b, err := verify.New(worldConfig(w), nil, verify.NewRedisLimiter(rdb, verify.LimiterOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	right, n, _, _, _ = scoreDropsBlocks(t, b, w.Cases())
	if right != n {
		t.Errorf("second process: %d of %d right", right, n)
	}
	st := w.Stats()
	for _, name := range once {
		if st.PerHost[name].Drops == 0 {
			t.Errorf("%s dropped once for the first process and never for the second: the single drop was shared as a limit", name)
		}
	}
}

// TestDropLimitSharedThroughRedis: the RCPT limit one process learned from
// drops is used by another process sharing the Redis limiter.
func TestDropLimitSharedThroughRedis(t *testing.T) {
	srv := testredis.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	w := startWorld(t, mailworld.DropsBlocks(mailworld.DropsBlocksOptions{Drops: 30, Blocked: 1}))
	a, err := verify.New(worldConfig(w), nil, verify.NewRedisLimiter(rdb, verify.LimiterOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	// Two calls: the second confirms each host's K (a second drop after
	// the same K), which is then shared.
	scoreDropsBlocks(t, a, w.Cases())
	scoreDropsBlocks(t, a, w.Cases())
	w.ResetStats()
	b, err := verify.New(worldConfig(w), nil, verify.NewRedisLimiter(rdb, verify.LimiterOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	right, n, _, _, _ := scoreDropsBlocks(t, b, w.Cases())
	if right != n {
		t.Errorf("%d of %d right", right, n)
	}
	// b probes each domain first (a's catch-all cache is its own): with
	// K = 1 a probe and one address are 2 RCPTs, so that host drops once.
	if d := sumDrops(w.Stats()); d > 1 {
		t.Errorf("the second process saw %d drops, want at most 1 (the limits shared through Redis)", d)
	}
}

// TestDropEverySession: a server that drops at the first RCPT of every
// session costs a bounded number of sessions and ends unknown/smtp_error.
func TestDropEverySession(t *testing.T) {
	spec := mailworld.Spec{Hosts: []mailworld.Host{{Name: "mx.dropall.test", DropAfterRcpts: 1}},
		Domains: []mailworld.Domain{{Name: "dropall.test", MX: []string{"mx.dropall.test"}, Users: []string{"a", "b", "c"}}}}
	w := startWorld(t, spec)
	v, err := verify.New(worldConfig(w), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := v.Verify(context.Background(), []string{"a@dropall.test", "b@dropall.test", "c@dropall.test"})
	for _, r := range res {
		if r.Status != verify.StatusUnknown || r.Reason != verify.ReasonSMTPError {
			t.Errorf("%s: %s/%s, want unknown/smtp_error", r.Email, r.Status, r.Reason)
		}
	}
	if s := w.Stats().Sessions; s > 4 {
		t.Errorf("%d sessions to a server that drops every one", s)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func sumDrops(st mailworld.Stats) int64 {
	var n int64
	for _, h := range st.PerHost {
		n += h.Drops
	}
	return n
}

// TestClientBlocked: a server that answers every RCPT with a DNSBL block of
// the client. Its addresses are unknown/blocked (Temporary, refunded as
// unknown), never undeliverable; the server is backed off, so it sees no
// more sessions after the block, in this call or the next.
func TestClientBlocked(t *testing.T) {
	for _, catchAll := range []bool{false, true} {
		name := "plain"
		if catchAll {
			name = "catch-all" // the probe is blocked: no verdict, not catch_all
		}
		t.Run(name, func(t *testing.T) {
			w := startWorld(t, mailworld.DropsBlocks(mailworld.DropsBlocksOptions{Drops: 1, Blocked: 40, CatchAll: catchAll}))
			cfg := worldConfig(w)
			cfg.MaxRcptsPerSession = 5 // 40 addresses would need 9+ sessions
			var logs syncBuffer
			cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
			v, err := verify.New(cfg, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			cases := w.Cases()
			_, _, right, n, res := scoreDropsBlocks(t, v, cases)
			if right != n {
				for i, c := range cases {
					if strings.HasSuffix(c.Email, "@blocked.test") {
						t.Logf("%s: %s/%s", c.Email, res[i].Status, res[i].Reason)
						break
					}
				}
				t.Errorf("%d of %d blocked addresses unknown/blocked", right, n)
			}
			for i, c := range cases {
				if strings.HasSuffix(c.Email, "@blocked.test") {
					if r := res[i]; !r.Temporary || r.SMTPCode != 554 || r.RetryAfter <= 0 {
						t.Errorf("%s: temporary %v code %d retry %v", r.Email, r.Temporary, r.SMTPCode, r.RetryAfter)
					}
				}
			}
			// The operator's log line: structured, naming the host and the reply.
			if l := logs.String(); !strings.Contains(l, `"level":"WARN"`) || !strings.Contains(l, `"host":"mx.blocked.test"`) ||
				!strings.Contains(l, `"code":554`) || !strings.Contains(l, "blocked using zen.spamhaus.org") {
				t.Errorf("no block warning in the log: %s", l)
			}
			first := w.Stats().PerHost["mx.blocked.test"].Sessions
			// At most the sessions opened before the first block came back.
			if first > 3 {
				t.Errorf("the blocking server saw %d sessions, want at most 3 (backed off after the block)", first)
			}
			// The next call asks the server nothing (smtp_code 0: no SMTP
			// conversation reached the address) and still answers blocked.
			_, _, right, n, res = scoreDropsBlocks(t, v, cases)
			if right != n {
				t.Errorf("second call: %d of %d unknown/blocked", right, n)
			}
			for i, c := range cases {
				if r := res[i]; strings.HasSuffix(c.Email, "@blocked.test") && (!r.Temporary || r.RetryAfter <= 0) {
					t.Errorf("second call: %s: temporary %v retry %v", r.Email, r.Temporary, r.RetryAfter)
				}
			}
			if again := w.Stats().PerHost["mx.blocked.test"].Sessions - first; again != 0 {
				t.Errorf("the blocking server saw %d sessions in the next call, want 0 (backed off)", again)
			}
		})
	}
}
