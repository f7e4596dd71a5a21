package verify_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/bulkd/bulkd/internal/verify"
)

// poolWorld is one host serving one domain with users u1..u20.
func poolWorld(h mailworld.Host) mailworld.Spec {
	d := mailworld.Domain{Name: "pool.test", MX: []string{h.Name}}
	for i := 1; i <= 20; i++ {
		d.Users = append(d.Users, fmt.Sprintf("u%d", i))
	}
	return mailworld.Spec{Hosts: []mailworld.Host{h}, Domains: []mailworld.Domain{d}}
}

func mustVerify(t *testing.T, v *verify.Verifier, emails ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, r := range v.Verify(ctx, emails) {
		want := verify.StatusDeliverable
		if r.Email[0] == 'x' {
			want = verify.StatusUndeliverable
		}
		if r.Status != want {
			t.Errorf("%s: %s/%s, want %s", r.Email, r.Status, r.Reason, want)
		}
	}
}

// TestSessionReusedAcrossCalls: calls that follow each other within
// SessionIdle go on with the session the first one opened (one connection
// for all, as the job engine's batches and the finder's rounds need); with
// SessionIdle negative every call opens its own. Before connPool, 3 calls
// were 3 sessions.
func TestSessionReusedAcrossCalls(t *testing.T) {
	w := startWorld(t, poolWorld(mailworld.Host{Name: "mx.pool.test", MaxConns: 1}))
	v, err := verify.New(worldConfig(w), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustVerify(t, v, "u1@pool.test", "x1@pool.test")
	mustVerify(t, v, "u2@pool.test")
	mustVerify(t, v, "u3@pool.test", "x3@pool.test")
	if s := w.Stats(); s.Sessions != 1 || s.Rejected421 != 0 {
		t.Fatalf("sessions %d, 421s %d; want 1 session for 3 calls, no 421", s.Sessions, s.Rejected421)
	}

	w2 := startWorld(t, poolWorld(mailworld.Host{Name: "mx.pool.test", MaxConns: 1}))
	cfg := worldConfig(w2)
	cfg.SessionIdle = -1
	v2, err := verify.New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustVerify(t, v2, "u1@pool.test")
	mustVerify(t, v2, "u2@pool.test")
	if s := w2.Stats(); s.Sessions != 2 {
		t.Fatalf("SessionIdle -1: %d sessions for 2 calls, want 2", s.Sessions)
	}
}

// TestReusedSessionBudget: a session's RCPT budget counts across the calls
// that share it, so a host that takes K RCPTs per connection never sees
// more on a reused one once K is known; and a reused session the server
// drops before answering anything (it counted the earlier call's RCPTs)
// costs a new session, never an answer: every address still gets its
// verdict.
func TestReusedSessionBudget(t *testing.T) {
	// Drops at the 4th RCPT of a session: K = 3.
	w := startWorld(t, poolWorld(mailworld.Host{Name: "mx.pool.test", DropAfterRcpts: 4}))
	v, err := verify.New(worldConfig(w), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustVerify(t, v, "u1@pool.test", "u2@pool.test") // probe + 2 = 3 RCPTs: parked, budget 100 (K unknown)
	mustVerify(t, v, "u3@pool.test")                 // 4th RCPT on the parked session: dropped, then a new session
	mustVerify(t, v, "u4@pool.test", "u5@pool.test", "u6@pool.test", "u7@pool.test")
	mustVerify(t, v, "u8@pool.test")
	s := w.Stats()
	if s.PerHost["mx.pool.test"].Drops > 2 {
		t.Fatalf("%d drops; the limit (3) should have been learned after at most 2", s.PerHost["mx.pool.test"].Drops)
	}
	t.Logf("sessions %d, RCPTs %d, drops %d", s.Sessions, s.Rcpts, s.PerHost["mx.pool.test"].Drops)
}

// TestPooledSessionsKeepTheCap: many concurrent calls to a host that
// allows one session at a time, through the Redis limiter: parked sessions
// hold their slot, a call waiting for the slot takes the parked session
// when it is parked, nobody is refused, and every address is answered.
func TestPooledSessionsKeepTheCap(t *testing.T) {
	srv := testredis.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	spec := poolWorld(mailworld.Host{Name: "mx.pool.test", MaxConns: 1})
	spec.RTT = 5 * time.Millisecond
	w := startWorld(t, spec)
	lim := verify.NewRedisLimiter(rdb, verify.LimiterOptions{SessionsPerHost: 1, SessionsPerSecond: 2})
	v, err := verify.New(worldConfig(w), nil, lim)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i := 1; i <= 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mustVerify(t, v, fmt.Sprintf("u%d@pool.test", i), fmt.Sprintf("u%d@pool.test", i+10))
		}()
	}
	wg.Wait()
	took := time.Since(start)
	s := w.Stats()
	if s.Rejected421 != 0 || s.MaxConcurrent["mx.pool.test"] > 1 {
		t.Fatalf("421s %d, most sessions at once %d; want 0 and 1", s.Rejected421, s.MaxConcurrent["mx.pool.test"])
	}
	// At 2 new sessions per second, ten sessions would take 4.5 s; the
	// parked one is handed on.
	if s.Sessions > 3 || took > 4*time.Second {
		t.Fatalf("%d sessions in %v for 10 calls; want the parked session handed on", s.Sessions, took)
	}
	t.Logf("10 concurrent calls: %d sessions, %v", s.Sessions, took.Round(time.Millisecond))
}

// TestCloseGivesSlotsBack: a processor pod exits as soon as its shard is
// done; the sessions it parked must give their slots in the shared limiter
// back then (Verifier.Close), or every other pod waits out their leases
// (2 minutes) before it may talk to those servers. Before Close, the slot
// stayed held after the process was done with it.
func TestCloseGivesSlotsBack(t *testing.T) {
	srv := testredis.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	w := startWorld(t, poolWorld(mailworld.Host{Name: "mx.pool.test", MaxConns: 1}))
	lim := verify.NewRedisLimiter(rdb, verify.LimiterOptions{SessionsPerHost: 1})
	cfg := worldConfig(w)
	cfg.SessionIdle = 5 * time.Second // would hold the slot 5 s (the call's 20 s deadline leaves room to park)
	v, err := verify.New(cfg, nil, lim)
	if err != nil {
		t.Fatal(err)
	}
	mustVerify(t, v, "u1@pool.test")
	ctx := context.Background()
	key := verify.ServerKey("", w.Stats().PerHost["mx.pool.test"].IP)
	if n, err := lim.Holders(ctx, key); err != nil || n != 1 {
		t.Fatalf("parked: %d holders (%v), want 1", n, err)
	}
	v.Close()
	if n, err := lim.Holders(ctx, key); err != nil || n != 0 {
		t.Fatalf("after Close: %d holders (%v), want 0", n, err)
	}
	// Still verifies after Close, without parking.
	mustVerify(t, v, "u2@pool.test")
	if n, _ := lim.Holders(ctx, key); n != 0 {
		t.Fatalf("after a call past Close: %d holders, want 0 (nothing parked)", n)
	}
	v.Close()
}
