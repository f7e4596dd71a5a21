package verification

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/bulkd/bulkd/internal/verify"
)

var discardLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// slowWorld is issue 25's measurement world: Bench's mix (shared provider
// hosts, catch-all, greylisting, null MX, NXDOMAIN, unknown, full and
// disabled mailboxes) over domains×perDomain addresses, and the same world
// with the biggest domain on a host of its own made a slow Postfix (2 s per
// RCPT, the group's replies held until the group is processed).
type slowWorld struct {
	base, slow mailworld.Spec
	domain     string // the slow host's domain
	host       string
	per        time.Duration
}

func newSlowWorld(tb testing.TB, domains, perDomain int, rtt, per time.Duration) slowWorld {
	tb.Helper()
	base := mailworld.Bench(mailworld.BenchOptions{Domains: domains, PerDomain: perDomain, RTT: rtt, Seed: 25})
	dom, host, ok := mailworld.OwnHost(base)
	if !ok {
		tb.Fatal("the world has no domain on a host of its own")
	}
	slow, err := mailworld.Apply(base, host, mailworld.SlowRcpts(per))
	if err != nil {
		tb.Fatal(err)
	}
	return slowWorld{base: base, slow: slow, domain: dom, host: host, per: per}
}

// slowWorldFromEnv is the measurement world: 50 domains of 10 addresses,
// 20 ms RTT, or BULKD_SLOW_WORLD="domains,per-domain,rtt".
func slowWorldFromEnv(tb testing.TB) slowWorld {
	tb.Helper()
	domains, per, rtt := 50, 10, 20*time.Millisecond
	if env := os.Getenv("BULKD_SLOW_WORLD"); env != "" {
		var rs string
		if _, err := fmt.Sscanf(strings.ReplaceAll(env, ",", " "), "%d %d %s", &domains, &per, &rs); err != nil {
			tb.Fatalf("BULKD_SLOW_WORLD=%q: %v", env, err)
		}
		d, err := time.ParseDuration(rs)
		if err != nil {
			tb.Fatal(err)
		}
		rtt = d
	}
	return newSlowWorld(tb, domains, per, rtt, 2*time.Second)
}

// firstPass is one world's first pass through the family's AnswerEach (the
// path the processor records from): when each address's answer came, and
// the answers.
type firstPass struct {
	at      map[string]time.Duration
	results map[string]stored
	took    time.Duration
	stats   mailworld.Stats
}

// runFirstPass starts spec, answers every address once with a new verifier
// at its production settings (reply wait 10 s + 2 s per pipelined RCPT,
// Redis limiter of 3 sessions per server, shared probes) on a flushed Redis,
// and records when each answer was emitted.
func runFirstPass(tb testing.TB, spec mailworld.Spec, rdb redis.UniversalClient) firstPass {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		tb.Fatal(err)
	}
	w, err := mailworld.Start(ctx, spec)
	if err != nil {
		tb.Fatal(err)
	}
	defer w.Close()
	v := worldVerifier(tb, verify.Config{DNSServer: w.DNSAddr(), SMTPPort: w.SMTPPort(), Logger: discardLog},
		nil, rdb, verify.LimiterOptions{SessionsPerHost: 3})
	defer v.Close()
	fam := New(v, []time.Duration{time.Minute})
	var emails []string
	for _, c := range w.Cases() {
		emails = append(emails, c.Email)
	}
	// The engine hands a shard's addresses sorted by domain.
	sort.SliceStable(emails, func(a, b int) bool { return domainOf(emails[a]) < domainOf(emails[b]) })
	fp := firstPass{at: map[string]time.Duration{}, results: map[string]stored{}}
	var mu sync.Mutex
	start := time.Now()
	err = fam.AnswerEach(ctx, emails, nil, func(i int, a jobs.Answer) {
		var s stored
		if err := json.Unmarshal(a.Data, &s); err != nil {
			tb.Error(err)
		}
		mu.Lock()
		fp.at[emails[i]], fp.results[emails[i]] = time.Since(start), s
		mu.Unlock()
	})
	fp.took = time.Since(start)
	if err != nil {
		tb.Fatal(err)
	}
	if len(fp.at) != len(emails) {
		tb.Fatalf("%d of %d addresses emitted", len(fp.at), len(emails))
	}
	fp.stats = w.Stats()
	return fp
}

// slowReport compares the two first passes: the slowest answer among the
// addresses not on the slow host in each world, the first pass of each,
// and the slow domain's answers.
type slowReport struct {
	baseOthersMax, slowOthersMax time.Duration
	basePass, slowPass           time.Duration
	slowDomainMax                time.Duration
	wrongSlow, timeouts          []string
	others                       int
}

func compare(sw slowWorld, base, slow firstPass, cases []mailworld.Case) slowReport {
	var r slowReport
	r.basePass, r.slowPass = base.took, slow.took
	for _, c := range cases {
		if domainOf(c.Email) == sw.domain {
			r.slowDomainMax = max(r.slowDomainMax, slow.at[c.Email])
			got := slow.results[c.Email]
			if got.Reason == verify.ReasonTimeout {
				r.timeouts = append(r.timeouts, c.Email)
			}
			if got.Status != c.Status || got.Reason != c.Reason {
				r.wrongSlow = append(r.wrongSlow, fmt.Sprintf("%s: %s/%s, want %s/%s", c.Email, got.Status, got.Reason, c.Status, c.Reason))
			}
			continue
		}
		r.others++
		r.baseOthersMax = max(r.baseOthersMax, base.at[c.Email])
		r.slowOthersMax = max(r.slowOthersMax, slow.at[c.Email])
	}
	return r
}

func (r slowReport) String() string {
	return fmt.Sprintf("first pass %v without the slow server, %v with it (%.2fx); the %d other addresses' last answer %v vs %v; "+
		"the slow domain's last answer %v, %d wrong, %d timeouts",
		r.basePass.Round(time.Millisecond), r.slowPass.Round(time.Millisecond), float64(r.slowPass)/float64(r.basePass),
		r.others, r.baseOthersMax.Round(time.Millisecond), r.slowOthersMax.Round(time.Millisecond),
		r.slowDomainMax.Round(time.Millisecond), len(r.wrongSlow), len(r.timeouts))
}

// TestSlowServerHoldsBackOnlyItsOwn is issue 25's slow-server measurement
// (items 3 and 4): 500 addresses over 50 domains, once as they are and once
// with one domain's host answering like Postfix with a 2 s `sleep` per RCPT.
// Every other address is answered as soon as without the slow server (its
// answers are handed over as they come: a slow server holds back only its
// own), the slow domain's addresses get their real verdict on the first
// try (no timeout: the group's reply wait grows with its RCPTs), and the
// first pass is bounded by the slow server's own work at its pace over its
// 3 sessions. (Issue 25's "first pass within 1.5x" is not asserted: the
// world without the slow server answers all 500 in well under a second,
// less than one of the slow server's RCPTs; docs/benchmarks.md.) Numbers:
// docs/benchmarks.md ("Slow servers"); BULKD_SLOW_WORLD="domains,per,rtt"
// sizes the world.
func TestSlowServerHoldsBackOnlyItsOwn(t *testing.T) {
	sw := slowWorldFromEnv(t)
	rdb, _ := testredis.Client(t)
	base := runFirstPass(t, sw.base, rdb)
	slow := runFirstPass(t, sw.slow, rdb)
	cases := slices.Clone(sw.base.Cases)
	r := compare(sw, base, slow, cases)
	t.Logf("%d addresses, slow host %s (%s): %s; slow host sessions %d, at most %d at once",
		len(cases), sw.host, sw.domain, r, slow.stats.PerHost[sw.host].Sessions, slow.stats.PerHost[sw.host].MaxConcurrent)
	for _, w := range r.wrongSlow {
		t.Errorf("slow domain: %s", w)
	}
	// Every other address within the time it takes without the slow
	// server (a quarter and 300 ms of slack for a loaded machine).
	if lim := base.took*5/4 + 300*time.Millisecond; r.slowOthersMax > lim {
		t.Errorf("the other addresses' last answer came at %v, want within %v (the world without the slow server: %v)",
			r.slowOthersMax, lim, base.took)
	}
	// The slow domain at the slow server's own pace: a first group of 3
	// RCPTs (its probe and 2 addresses) shows it slow, then the rest one
	// RCPT a group over its 3 sessions (and 3 s of slack).
	n := 0
	for _, c := range cases {
		if domainOf(c.Email) == sw.domain {
			n++
		}
	}
	if lim := time.Duration(3+(n-2+2)/3)*sw.per + 3*time.Second; r.slowDomainMax > lim {
		t.Errorf("the slow domain's %d addresses took %v, want within %v (its server's pace over 3 sessions)", n, r.slowDomainMax, lim)
	}
	if h := slow.stats.PerHost[sw.host]; h.MaxConcurrent > 3 {
		t.Errorf("the slow server saw %d sessions at once, cap 3", h.MaxConcurrent)
	}
}

// BenchmarkSlowServerFirstPass is TestSlowServerHoldsBackOnlyItsOwn as a
// benchmark (docs/benchmarks.md, "Slow servers"): run with -benchtime=1x;
// BULKD_SLOW_WORLD sizes the world as for the test.
//
//	go test ./internal/verification/ -run '^$' -bench SlowServerFirstPass -benchtime=1x
func BenchmarkSlowServerFirstPass(b *testing.B) {
	sw := slowWorldFromEnv(b)
	rdb, _ := testredis.Client(b)
	for range b.N {
		base := runFirstPass(b, sw.base, rdb)
		slow := runFirstPass(b, sw.slow, rdb)
		r := compare(sw, base, slow, sw.base.Cases)
		b.Logf("%d addresses, slow host %s: %s", len(sw.base.Cases), sw.host, r)
		b.ReportMetric(base.took.Seconds(), "s-first-pass-base")
		b.ReportMetric(slow.took.Seconds(), "s-first-pass-slow")
		b.ReportMetric(r.slowOthersMax.Seconds(), "s-others-last")
		b.ReportMetric(r.baseOthersMax.Seconds(), "s-others-last-base")
	}
}
