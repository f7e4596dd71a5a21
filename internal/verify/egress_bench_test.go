package verify_test

import (
	"context"
	"net/netip"
	"net/url"
	"sort"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/egress"
	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/internal/outbound"
	"github.com/bulkd/bulkd/internal/testsocks"
	"github.com/bulkd/bulkd/internal/verify"
)

// BenchmarkVerifyEgresses verifies the 2,000 addresses of the benchmark
// world (200 domains, 50 ms per round trip, 3 sessions per host) with cold
// caches, through each egress setup: the host's route, a SOCKS5 proxy with
// user/password, and two source addresses. It reports the first pass's
// addresses per second and the share of knowable, non-greylisted cases
// answered right.
func BenchmarkVerifyEgresses(b *testing.B) {
	spec := mailworld.Bench(mailworld.BenchOptions{Domains: 200, PerDomain: 10, RTT: 50 * time.Millisecond, MaxConnsPerHost: 3, Seed: 1})
	grey := map[string]bool{}
	for _, d := range spec.Domains {
		if d.Greylist > 0 {
			grey[d.Name] = true
		}
	}
	setups := map[string]func(b *testing.B) []egress.Egress{
		"direct": func(*testing.B) []egress.Egress { return nil },
		"socks5": func(b *testing.B) []egress.Egress {
			px := testsocks.Start(b, testsocks.Options{User: "u", Password: "p"})
			return []egress.Egress{{Name: "px", Helo: "px.egress.test", Proxy: &url.URL{Scheme: "socks5", Host: px.Addr, User: url.UserPassword("u", "p")}}}
		},
		"two-sources": func(*testing.B) []egress.Egress {
			return []egress.Egress{
				{Name: "a", Helo: "a.egress.test", Source: netip.MustParseAddr("127.0.0.2")},
				{Name: "b", Helo: "b.egress.test", Source: netip.MustParseAddr("127.0.0.3")},
			}
		},
	}
	for _, name := range []string{"direct", "socks5", "two-sources"} {
		b.Run(name, func(b *testing.B) {
			var elapsed time.Duration
			var n, knowable, right int
			for range b.N {
				b.StopTimer()
				w, err := mailworld.Start(context.Background(), spec)
				if err != nil {
					b.Fatal(err)
				}
				v, err := verify.New(verify.Config{DNSServer: w.DNSAddr(), SMTPPort: w.SMTPPort(), CommandTimeout: 5 * time.Second,
					Policy: &outbound.Policy{Allow: outbound.LoopbackPrefixes}, Egresses: setups[name](b)}, nil,
					verify.NewLocalLimiter(verify.LimiterOptions{SessionsPerHost: 3}))
				if err != nil {
					b.Fatal(err)
				}
				cases := w.Cases()
				sort.SliceStable(cases, func(i, j int) bool { return domainOf(cases[i].Email) < domainOf(cases[j].Email) })
				emails := emailsOf(cases)
				b.StartTimer()
				start := time.Now()
				var res []verify.Result
				for off := 0; off < len(emails); off += 1000 {
					res = append(res, v.Verify(context.Background(), emails[off:min(off+1000, len(emails))])...)
				}
				elapsed += time.Since(start)
				b.StopTimer()
				n += len(emails)
				for i, c := range cases {
					if c.Knowable && !grey[domainOf(c.Email)] {
						knowable++
						if res[i].Status == c.Status && res[i].Reason == c.Reason {
							right++
						}
					}
				}
				_ = w.Close()
			}
			b.ReportMetric(float64(n)/elapsed.Seconds(), "addr/s")
			b.ReportMetric(100*float64(right)/float64(max(knowable, 1)), "accuracy%")
			if right != knowable {
				b.Errorf("%d of %d knowable cases right", right, knowable)
			}
		})
	}
}
