package finder_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/finder"
	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/internal/testredis"
)

// BenchmarkFind10k finds the 10,000 people of a people world of 500
// domains (50 ms per round trip, 3 sessions per host, shared politeness in
// Redis) in one Find, as the job engine sends a 10,000-row job, with cold
// caches and an empty pattern store. It reports:
//
//	s/10k             the first pass, wall clock (goal <= 30 s)
//	rows/s            its throughput
//	rcpts/row         RCPTs the mail servers saw per row, catch-all probes included
//	found%            findable people (ordinary domains) found with the true address
//	wrong             verified addresses that are not the person's (must be 0)
//	catchall_right%   catch-all guesses that are the true address
//	grey_temp%        people of greylisting domains answered Temporary
//	2nd_s/10k         the same rows again from another process (new verifier
//	                  and Finder, patterns from Redis), wall clock
//	2nd_rcpts/row_learned  its RCPTs per row on domains with a learned pattern (target <= 2)
func BenchmarkFind10k(b *testing.B) {
	srv := testredis.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 256})
	b.Cleanup(func() { _ = rdb.Close() })
	spec, cases := mailworld.People(mailworld.PeopleOptions{Domains: 500, PerDomain: 20, RTT: 50 * time.Millisecond, Seed: 1})
	people := peopleOf(cases)
	var first, second time.Duration
	var rcpts, rcpts2Learned, rows2Learned, probes, n int64
	var findable, found, wrong, catchAll, catchRight, grey, greyTemp int
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		_ = srv.FlushAll(context.Background())
		w, err := mailworld.Start(context.Background(), spec)
		if err != nil {
			b.Fatal(err)
		}
		f := finder.New(newVerifier(b, w, rdb), finder.NewRedisPatterns(rdb))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		b.StartTimer()
		start := time.Now()
		res := f.Find(ctx, people)
		first += time.Since(start)
		b.StopTimer()
		rcpts += w.Stats().Rcpts
		n += int64(len(people))
		for j, c := range cases {
			r := res[j]
			probes += int64(r.ProbesUsed)
			if r.Substatus == finder.SubVerified && !strings.EqualFold(str(r.Email), c.Email) {
				wrong++
				if wrong < 10 {
					b.Logf("wrong: %s %s @ %s: %s (truth %q)", c.FirstName, c.LastName, c.Domain, describe(r), c.Email)
				}
			}
			switch {
			case c.Greylisted:
				grey++
				if r.Temporary {
					greyTemp++
				}
			case c.CatchAll:
				if c.Email != "" {
					catchAll++
					if strings.EqualFold(str(r.Email), c.Email) {
						catchRight++
					}
				}
			case c.Findable:
				findable++
				if r.Substatus == finder.SubVerified && strings.EqualFold(str(r.Email), c.Email) {
					found++
				} else if i == 0 && findable-found < 10 {
					b.Logf("not found: %s %s @ %s (%s): %s", c.FirstName, c.LastName, c.Domain, c.Email, describe(r))
				}
			}
		}

		// Another process: the same rows, patterns from Redis.
		store := finder.NewRedisPatterns(rdb)
		learned := map[string]bool{}
		domains := map[string]bool{}
		for _, c := range cases {
			domains[c.Domain] = true
		}
		for d := range domains {
			if _, ok, _ := store.Get(context.Background(), d); ok {
				learned[d] = true
			}
		}
		w.ResetStats()
		f2 := finder.New(newVerifier(b, w, rdb), finder.NewRedisPatterns(rdb))
		b.StartTimer()
		start = time.Now()
		res2 := f2.Find(ctx, people)
		second += time.Since(start)
		b.StopTimer()
		for j, c := range cases {
			if learned[c.Domain] {
				rows2Learned++
				rcpts2Learned += int64(res2[j].ProbesUsed)
			}
		}
		// Probes on learned domains: one per domain.
		rcpts2Learned += int64(len(learned))
		cancel()
		if i == 0 {
			b.Logf("first pass %v, second pass %v; %d of %d domains learned", first.Round(time.Millisecond),
				second.Round(time.Millisecond), len(learned), len(domains))
		}
		_ = w.Close()
	}
	b.ReportMetric(first.Seconds()/float64(b.N), "s/10k")
	b.ReportMetric(float64(n)/first.Seconds(), "rows/s")
	b.ReportMetric(float64(rcpts)/float64(n), "rcpts/row")
	b.ReportMetric(float64(probes)/float64(n), "cand_rcpts/row")
	b.ReportMetric(100*float64(found)/float64(max(findable, 1)), "found%")
	b.ReportMetric(float64(wrong), "wrong")
	b.ReportMetric(100*float64(catchRight)/float64(max(catchAll, 1)), "catchall_right%")
	b.ReportMetric(100*float64(greyTemp)/float64(max(grey, 1)), "grey_temp%")
	b.ReportMetric(second.Seconds()/float64(b.N), "2nd_s/10k")
	b.ReportMetric(float64(rcpts2Learned)/float64(max(rows2Learned, 1)), "2nd_rcpts/row_learned")
	if wrong > 0 {
		b.Errorf("%d wrong addresses", wrong)
	}
}
