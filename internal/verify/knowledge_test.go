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

// TestMain stops the shared Redis Cluster of BULKD_TEST_REDIS=cluster runs.
func TestMain(m *testing.M) { testredis.Main(m) }

// knowledgeWorld: a catch-all domain, a domain that refuses unknown
// addresses, a server that blocks the client, and a domain whose probe is
// greylisted for longer than the test.
func knowledgeWorld(t *testing.T) *mailworld.World {
	return startWorld(t, mailworld.Spec{
		Hosts: []mailworld.Host{{Name: "mx.ca.test"}, {Name: "mx.strict.test"}, {Name: "mx.block.test", BlockClient: true},
			{Name: "mx.grey.test"}},
		Domains: []mailworld.Domain{
			{Name: "ca.test", MX: []string{"mx.ca.test"}, CatchAll: true, Users: []string{"alice"}},
			{Name: "strict.test", MX: []string{"mx.strict.test"}, Users: []string{"alice"}},
			{Name: "block.test", MX: []string{"mx.block.test"}, Users: []string{"alice"}},
			{Name: "grey.test", MX: []string{"mx.grey.test"}, Users: []string{"alice"}, Greylist: time.Hour},
		},
	})
}

// waitKey waits for a key the verifier writes in the background.
func waitKey(t *testing.T, rdb redis.UniversalClient, key string) string {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		v, err := rdb.Get(context.Background(), key).Result()
		if err == nil {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not written: %v", key, err)
		}
	}
}

// TestCatchAllVerdictSharedAcrossProcesses: a domain one process judged
// (probe accepted: catch-all; probe refused: addresses can be told apart)
// is not probed again by another process sharing the Redis, until the
// verdict's TTL ends. A probe answered 4xx, or blocked, leaves no verdict,
// so the next process probes again. Before the verdicts were shared, the
// second process sent one probe RCPT per domain.
func TestCatchAllVerdictSharedAcrossProcesses(t *testing.T) {
	w := knowledgeWorld(t)
	rdb := testredis.Universal(t)
	const ttl = 3 * time.Second
	newProcess := func() *verify.Verifier {
		cfg := worldConfig(w)
		cfg.Probes = verify.NewRedisProbes(rdb) // also the CatchAllStore
		cfg.CatchAllTTL = ttl
		v, err := verify.New(cfg, nil, nil) // a limiter per process: only the knowledge is shared
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	ctx := context.Background()
	want := func(res []verify.Result, status ...string) {
		t.Helper()
		for i, r := range res {
			if r.Status+"/"+r.Reason != status[i] {
				t.Errorf("%s: %s/%s, want %s", r.Email, r.Status, r.Reason, status[i])
			}
		}
	}
	rcpts := func(host string) int64 { return w.Stats().PerHost[host].Rcpts }

	first := newProcess()
	want(first.Verify(ctx, []string{"alice@ca.test", "alice@strict.test", "alice@block.test", "alice@grey.test"}),
		"risky/catch_all", "deliverable/accepted", "unknown/blocked", "unknown/greylisted")
	judged := time.Now()
	if v := waitKey(t, rdb, "bulkd:smtp:catchall:ca.test"); v != "1" {
		t.Errorf("ca.test verdict %q, want 1 (accepts all)", v)
	}
	if v := waitKey(t, rdb, "bulkd:smtp:catchall:strict.test"); v != "0" {
		t.Errorf("strict.test verdict %q, want 0 (refuses the probe)", v)
	}
	if d, err := rdb.PTTL(ctx, "bulkd:smtp:catchall:ca.test").Result(); err != nil || d <= 0 || d > ttl {
		t.Errorf("verdict TTL %v (%v), want within (0, %v]", d, err, ttl)
	}
	for _, d := range []string{"block.test", "grey.test"} {
		if n, _ := rdb.Exists(ctx, "bulkd:smtp:catchall:"+d).Result(); n != 0 {
			t.Errorf("%s has a verdict; a blocked or 4xx probe must leave none", d)
		}
	}

	// Another process: no probe where a verdict is shared, a probe again
	// where there was none.
	w.ResetStats()
	second := newProcess()
	want(second.Verify(ctx, []string{"bob@ca.test", "alice@strict.test", "nobody@strict.test", "alice@block.test", "alice@grey.test"}),
		"risky/catch_all", "deliverable/accepted", "undeliverable/mailbox_not_found", "unknown/blocked", "unknown/greylisted")
	if n := rcpts("mx.ca.test"); n != 1 {
		t.Errorf("mx.ca.test saw %d RCPTs from the second process, want 1 (no probe)", n)
	}
	if n := rcpts("mx.strict.test"); n != 2 {
		t.Errorf("mx.strict.test saw %d RCPTs from the second process, want 2 (no probe)", n)
	}
	if n := rcpts("mx.block.test"); n != 2 {
		t.Errorf("mx.block.test saw %d RCPTs, want 2 (probe and address: a blocked probe is no verdict)", n)
	}
	if n := rcpts("mx.grey.test"); n != 2 {
		t.Errorf("mx.grey.test saw %d RCPTs, want 2 (probe and address: a 4xx probe is no verdict)", n)
	}

	// Once the TTL has passed, a third process probes again.
	time.Sleep(time.Until(judged.Add(ttl + 100*time.Millisecond)))
	w.ResetStats()
	want(newProcess().Verify(ctx, []string{"carol@ca.test"}), "risky/catch_all")
	if n := rcpts("mx.ca.test"); n != 2 {
		t.Errorf("after the TTL mx.ca.test saw %d RCPTs, want 2 (probe and address)", n)
	}
	waitKey(t, rdb, "bulkd:smtp:catchall:ca.test") // the new verdict, written in the background
}

// TestCatchAllStoreDownStillProbes: with the shared store unreachable the
// verifier answers as it would without one (and does not wait on it call
// after call).
func TestCatchAllStoreDownStillProbes(t *testing.T) {
	w := knowledgeWorld(t)
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	cfg := worldConfig(w)
	cfg.Probes = verify.NewRedisProbes(rdb)
	v, err := verify.New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		start := time.Now()
		res := v.Verify(context.Background(), []string{"x@ca.test", "nobody@strict.test"})
		if res[0].Reason != verify.ReasonCatchAll || res[1].Reason != verify.ReasonMailboxNotFound {
			t.Fatalf("call %d: %s/%s %s/%s", i, res[0].Status, res[0].Reason, res[1].Status, res[1].Reason)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("call %d took %v with the store down", i, d)
		}
	}
}
