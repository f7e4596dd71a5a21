package verify_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/internal/outbound"
	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/bulkd/bulkd/internal/verify"
)

// BenchmarkVerify20k is issue 20's speed target on the library path:
// 20,000 addresses of 1,000 domains at 50 ms per reply, 40 of the domains
// on servers that drop the session after K RCPTs and 10 on a server that
// blocks us, every server capped at 3 sessions (421 beyond), through a
// Redis limiter at bulkd serve's defaults (3 sessions, 5 new per second
// per host). The addresses go as the job engine sends them: grouped by
// domain, 1,000 per shard, batches of 500, 16 shards at a time (--workers).
// It reports the first pass (addr/s, goal >= 1,500), sessions per address,
// the most sessions one server saw at once (must be <= 3), 421s (0) and
// the accuracy on knowable addresses (blocked ones right only as
// unknown/blocked; greylisted ones are retried by the engine later and
// are left out).
func BenchmarkVerify20k(b *testing.B) {
	const workers, shard, batch = 16, 1000, 500
	srv := testredis.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 256})
	b.Cleanup(func() { _ = rdb.Close() })
	spec := mailworld.Bench(mailworld.BenchOptions{Domains: 1000, PerDomain: 20, RTT: 50 * time.Millisecond, MaxConnsPerHost: 3, Seed: 1})
	spec, _ = mailworld.Harden(spec, mailworld.HardenOptions{DropDomains: 40, BlockDomains: 10, Seed: 1})
	for i := range spec.Hosts {
		spec.Hosts[i].MaxConns = 3
	}
	grey := map[string]bool{}
	for _, d := range spec.Domains {
		if d.Greylist > 0 {
			grey[d.Name] = true
		}
	}
	var elapsed time.Duration
	var sessions, r421, n int64
	var knowable, correct, falseDeliverable, most int
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		_ = srv.FlushAll(context.Background())
		w, err := mailworld.Start(context.Background(), spec)
		if err != nil {
			b.Fatal(err)
		}
		lim := verify.NewRedisLimiter(rdb, verify.LimiterOptions{SessionsPerHost: 3, SessionsPerSecond: 5})
		v, err := verify.New(verify.Config{DNSServer: w.DNSAddr(), SMTPPort: w.SMTPPort(), CommandTimeout: 5 * time.Second,
			Policy: &outbound.Policy{Allow: outbound.LoopbackPrefixes}}, nil, lim)
		if err != nil {
			b.Fatal(err)
		}
		cases := w.Cases()
		sort.SliceStable(cases, func(a, b int) bool { return domainOf(cases[a].Email) < domainOf(cases[b].Email) })
		emails := emailsOf(cases)
		var batches [][2]int // shards of `shard` addresses, each in batches run in turn
		for off := 0; off < len(emails); off += shard {
			batches = append(batches, [2]int{off, min(off+shard, len(emails))})
		}
		res := make([]verify.Result, len(emails))
		next := make(chan [2]int, len(batches))
		for _, s := range batches {
			next <- s
		}
		close(next)
		b.StartTimer()
		start := time.Now()
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for s := range next {
					for off := s[0]; off < s[1]; off += batch {
						end := min(off+batch, s[1])
						copy(res[off:end], v.Verify(context.Background(), emails[off:end]))
					}
				}
			}()
		}
		wg.Wait()
		elapsed += time.Since(start)
		b.StopTimer()
		st := w.Stats()
		sessions += st.Sessions
		r421 += st.Rejected421
		n += int64(len(emails))
		for _, m := range st.MaxConcurrent {
			most = max(most, m)
		}
		for j, c := range cases {
			r := res[j]
			if r.Status == verify.StatusDeliverable && c.Status != mailworld.Deliverable {
				falseDeliverable++
				b.Errorf("false deliverable: %s %+v", c.Email, r)
			}
			if !c.Knowable || grey[domainOf(c.Email)] {
				continue
			}
			knowable++
			if r.Status == c.Status && r.Reason == c.Reason {
				correct++
			} else if i == 0 && knowable-correct < 10 {
				b.Logf("wrong: %s got %s/%s want %s/%s", c.Email, r.Status, r.Reason, c.Status, c.Reason)
			}
		}
		_ = w.Close()
	}
	b.ReportMetric(float64(n)/elapsed.Seconds(), "addr/s")
	b.ReportMetric(float64(sessions)/float64(n), "sessions/addr")
	b.ReportMetric(float64(most), "max_sessions_per_server")
	b.ReportMetric(float64(r421)/float64(b.N), "421s")
	b.ReportMetric(100*float64(correct)/float64(max(knowable, 1)), "accuracy%")
	b.ReportMetric(float64(falseDeliverable), "false_deliverable")
	if most > 3 || r421 != 0 {
		b.Errorf("politeness: %d sessions at once on one server, %d refused with 421", most, r421)
	}
}
