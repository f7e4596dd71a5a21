package verification

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/mtaworld"
	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/bulkd/bulkd/internal/verify"
	"github.com/bulkd/bulkd/internal/verify/rules"
)

// TestAccuracyMTAWorld is issue 25's goal on unmodified mail software
// (internal/mtaworld, docs/mta-world.md): stock Postfix with postgrey and
// a DNS block list, and Exim, each with the limits postmasters set. The
// verifier is built as `bulkd serve` builds it (serve.parts.verifiers: its
// defaults, the Redis limiter at 3 sessions and 5 new sessions/s per
// server, per-server rules from Redis) except for the retry schedule,
// which is scaled down with the world's 5 s greylisting and 10-20 s rate
// windows (BULKD_MTA_RETRY, default 8s,16s,32s; the run used
// 30s,60s,120s), and the 421 back-off, scaled down alike to 8 s.
//
// Goals: >= 99 % of the knowable addresses right (all are knowable: a
// DNSBL-blocked address only as unknown/blocked, a catch-all only as
// risky/catch_all, the others by status), no false deliverable, no false
// undeliverable, and no server above its configured connection limit as
// the server itself counted it (Postfix's anvil and smtpd log lines,
// Exim's log), but for the one refused connection that teaches the
// verifier the limit.
//
// BULKD_MTA_WORLD="scale[,noslow]" runs a bigger world for make bench
// (scale 2: 456 addresses); "noslow" leaves out the slow server, for the
// first-pass comparison. BULKD_MTA_DIR keeps the servers' logs.
func TestAccuracyMTAWorld(t *testing.T) {
	opts := mtaworld.Options{Seed: 25}
	if env := os.Getenv("BULKD_MTA_WORLD"); env != "" {
		parts := strings.Split(env, ",")
		n, err := strconv.Atoi(parts[0])
		if err != nil {
			t.Fatalf("BULKD_MTA_WORLD=%q: %v", env, err)
		}
		opts.Scale = n
		opts.NoSlow = len(parts) > 1 && parts[1] == "noslow"
	}
	// BULKD_MTA_DIR keeps the servers' configuration and logs there (a
	// directory the daemons' users can search, e.g. under /tmp).
	opts.Dir = os.Getenv("BULKD_MTA_DIR")
	if err := mtaworld.Available(""); err != nil {
		t.Skipf("real-MTA world unavailable (CI runs as root and `make deps` installs it): %v", err)
	}
	delays := []time.Duration{8 * time.Second, 16 * time.Second, 32 * time.Second}
	if env := os.Getenv("BULKD_MTA_RETRY"); env != "" {
		delays = nil
		for _, p := range strings.Split(env, ",") {
			d, err := time.ParseDuration(p)
			if err != nil {
				t.Fatalf("BULKD_MTA_RETRY=%q: %v", env, err)
			}
			delays = append(delays, d)
		}
	}
	w, err := mtaworld.Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = w.Close()
		}
	})
	t.Logf("servers:\n%s", w.Summary())
	rdb, _ := testredis.Client(t)
	log := discardLog
	if testing.Verbose() && os.Getenv("BULKD_MTA_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	v := worldVerifier(t, verify.Config{
		DNSServer:        w.DNSAddr(),
		SMTPPort:         w.SMTPPort(),
		RateLimitBackoff: 8 * time.Second,
		Rules:            rules.NewRedisHolder(ctx, rdb, 0, log),
		Logger:           log,
	}, verify.DefaultLists(), rdb, verify.LimiterOptions{SessionsPerHost: 3, SessionsPerSecond: 5})
	fam := New(v, delays)

	cases := w.Cases()
	sort.SliceStable(cases, func(a, b int) bool { return domainOf(cases[a].Email) < domainOf(cases[b].Email) })
	emails := make([]string, len(cases))
	for i, c := range cases {
		emails[i] = c.Email
	}
	final, firstPass, all := answerUntilFinal(ctx, t, "real MTAs", fam, emails, toJobs(jobsAtOnce))

	type tally struct{ n, right, falseDeliverable, falseUndeliverable int }
	by := map[string]*tally{}
	var sum tally
	for _, c := range cases {
		r := final[c.Email]
		if by[c.Server] == nil {
			by[c.Server] = &tally{}
		}
		right := rightAnswer(c.Truth, r)
		for _, tl := range []*tally{by[c.Server], &sum} {
			tl.n++
			if right {
				tl.right++
			}
			if r.Status == verify.StatusDeliverable && c.Truth != mtaworld.Deliverable {
				tl.falseDeliverable++
			}
			if r.Status == verify.StatusUndeliverable && c.Truth != mtaworld.Undeliverable {
				tl.falseUndeliverable++
			}
		}
		if !right {
			t.Logf("wrong: %s (%s, truth %s) got %s/%s (code %d)", c.Email, c.Server, c.Truth, r.Status, r.Reason, r.SMTPCode)
		}
	}
	closed = true
	if err := w.Close(); err != nil {
		t.Error(err)
	}
	stats := w.Stats()
	var tab strings.Builder
	tab.WriteString("\n| server | addresses | right | false deliverable | false undeliverable | connections | most at once (limit) | refused by limit | RCPT rejects |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range w.Servers() {
		tl, st := by[s.Name], stats[s.Name]
		limit := "-"
		if s.ConnLimit > 0 {
			limit = strconv.Itoa(s.ConnLimit)
		}
		fmt.Fprintf(&tab, "| %s | %d | %d | %d | %d | %d | %d (%s) | %d | %v |\n", s.Name, tl.n, tl.right, tl.falseDeliverable,
			tl.falseUndeliverable, st.Connections, st.MaxConcurrent, limit, st.Refused, st.Rejects)
		// A server's limit is unknown until it says so: one refused
		// connection (which the server counts as one over its limit) is
		// how it is learned; a second one is not polite.
		if s.ConnLimit > 0 && (st.MaxConcurrent > s.ConnLimit+1 || st.Refused > 1) {
			t.Errorf("%s: %d connections at once as the server counted them, %d refused; its limit is %d (one refusal to learn it is allowed)",
				s.Name, st.MaxConcurrent, st.Refused, s.ConnLimit)
		}
	}
	acc := 100 * float64(sum.right) / float64(max(sum.n, 1))
	t.Logf("%d addresses: %d right (%.2f %%), %d false deliverable, %d false undeliverable; first pass %v, all final %v (retries %v)%s",
		sum.n, sum.right, acc, sum.falseDeliverable, sum.falseUndeliverable, firstPass.Round(time.Millisecond), all.Round(time.Millisecond), delays, tab.String())
	if acc < 99 {
		t.Errorf("accuracy %.2f %%, want >= 99 %%", acc)
	}
	if sum.falseDeliverable != 0 || sum.falseUndeliverable != 0 {
		t.Errorf("%d false deliverable, %d false undeliverable, want 0 and 0", sum.falseDeliverable, sum.falseUndeliverable)
	}
}

// rightAnswer: a mailbox must come out deliverable and an unknown user
// undeliverable (any reason: Exim's "550 Unrouteable address" has no
// enhanced code); a catch-all domain risky/catch_all; a server that
// refuses our client through its DNS block list unknown/blocked.
func rightAnswer(truth mtaworld.Truth, r verify.Result) bool {
	switch truth {
	case mtaworld.Deliverable:
		return r.Status == verify.StatusDeliverable
	case mtaworld.Undeliverable:
		return r.Status == verify.StatusUndeliverable
	case mtaworld.CatchAll:
		return r.Status == verify.StatusRisky && r.Reason == verify.ReasonCatchAll
	case mtaworld.Blocked:
		return r.Status == verify.StatusUnknown && r.Reason == verify.ReasonBlocked
	}
	return false
}

// jobsAtOnce is how many jobs share the world: the addresses are dealt
// to two jobs (each one shard, sorted by domain, as the engine hands a
// shard to a worker), answered at the same time as two customers' lists
// over the same domains would be. One job alone meets no server's
// connection limit: the verifier opens one session per server for it.
const jobsAtOnce = 2
