package verify_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/internal/outbound"
	"github.com/bulkd/bulkd/internal/testredis"
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
		// The world's hosts are on loopback: the operator's allowance.
		Policy: &outbound.Policy{Allow: outbound.LoopbackPrefixes},
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

func mustNew(t testing.TB, cfg verify.Config, lim verify.HostLimiter) *verify.Verifier {
	t.Helper()
	v, err := verify.New(cfg, nil, lim)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestSessionsShared: addresses of several domains on one MX host, with
// duplicates and invalid inputs mixed in, are answered in input order from
// one session per host.
func TestSessionsShared(t *testing.T) {
	w := startWorld(t, mailworld.Classes(mailworld.ClassOptions{}))
	v := mustNew(t, worldConfig(w), nil)
	in := []string{"alice@shared-a.test", " Alice@Shared-A.test ", "not-an-email", "bob@shared-b.test", "max@full.test",
		"old@disabled.test", "carol@shared-a.test", "alice@shared-a.test", "alice@ok.test", "info@catchall.test", "Info@Catchall.test"}
	want := []string{"accepted", "accepted", "invalid_syntax", "accepted", "mailbox_full", "mailbox_disabled",
		"mailbox_not_found", "accepted", "accepted", "catch_all", "catch_all"}
	res := v.Verify(context.Background(), in)
	for i, r := range res {
		if r.Reason != want[i] {
			t.Errorf("%q: %s, want %s", in[i], r.Reason, want[i])
		}
	}
	if res[1].Email != "alice@shared-a.test" || res[2].Email != "not-an-email" || res[2].ValidSyntax {
		t.Errorf("emails: %q %q", res[1].Email, res[2].Email)
	}
	r := res[4]
	if !r.HasFullInbox || r.MXHost == nil || *r.MXHost != "mx.provider.test" || r.Provider == nil || *r.Provider != "provider.test" ||
		r.SMTPCode != 552 || r.Score != 30 || r.Domain == nil || *r.Domain != "full.test" {
		b, _ := json.Marshal(r)
		t.Errorf("full: %s", b)
	}
	if !res[5].IsDisabled || !res[9].IsCatchAll || !res[9].IsRole || res[9].Score != 40 || res[0].Score != 95 {
		t.Errorf("flags: %+v %+v", res[5], res[9])
	}
	st := w.Stats()
	if n := st.PerHost["mx.provider.test"].Sessions; n != 1 {
		t.Errorf("%d sessions to the shared host, want 1", n)
	}
	// Rcpts: 4 domains on the shared host (4 probes + 5 addresses), ok.test
	// (probe + 1), catchall.test (probe + 1): duplicates are asked once.
	if st.Rcpts != 4+5+2+2 {
		t.Errorf("%d RCPTs", st.Rcpts)
	}

	// A second call uses the cached catch-all verdicts: no probes.
	w.ResetStats()
	v.Verify(context.Background(), []string{"bob@ok.test", "zed@catchall.test"})
	if st := w.Stats(); st.Rcpts != 2 {
		t.Errorf("second call sent %d RCPTs, want 2 (no probes)", st.Rcpts)
	}
}

// TestResultJSON pins the JSON field names of a Result.
func TestResultJSON(t *testing.T) {
	w := startWorld(t, mailworld.Classes(mailworld.ClassOptions{}))
	v := mustNew(t, worldConfig(w), nil)
	r := v.VerifyOne(context.Background(), "alice@ok.test")
	b, _ := json.Marshal(r)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	for _, k := range []string{"email", "status", "reason", "is_valid_syntax", "domain", "mx_host", "provider", "is_catch_all",
		"is_disposable", "is_role", "is_free", "is_disabled", "has_full_inbox", "suggestion", "score", "smtp_code", "checked_at"} {
		if _, ok := m[k]; !ok {
			t.Errorf("field %s missing in %s", k, b)
		}
	}
	if len(m) != 17 {
		t.Errorf("unexpected fields in %s", b)
	}
	bad := v.VerifyOne(context.Background(), "someone@gmial.con")
	if bad.Suggestion == nil || *bad.Suggestion != "someone@gmail.com" || bad.Status != verify.StatusUndeliverable {
		t.Errorf("typo: %+v", bad)
	}
}

// TestGreylistLater: without GreylistRetry a greylisted address is
// unknown/greylisted and temporary; asked again after the greylist period
// (by the caller, as the job engine does) it is answered exactly, because
// the domain's probe address is the same.
func TestGreylistLater(t *testing.T) {
	w := startWorld(t, mailworld.Classes(mailworld.ClassOptions{Greylist: 500 * time.Millisecond}))
	v := mustNew(t, worldConfig(w), nil)
	in := []string{"alice@grey.test", "ghost@grey.test"}
	res := v.Verify(context.Background(), in)
	for _, r := range res {
		if r.Status != verify.StatusUnknown || r.Reason != verify.ReasonGreylisted || !r.Temporary || r.RetryAfter <= 0 {
			t.Fatalf("first pass: %+v", r)
		}
	}
	time.Sleep(600 * time.Millisecond)
	res = v.Verify(context.Background(), in)
	if res[0].Reason != verify.ReasonAccepted || res[1].Reason != verify.ReasonMailboxNotFound || res[0].Temporary {
		t.Fatalf("second pass: %+v", res)
	}
}

// TestDeadline: VerifyOne returns by its deadline even against a tarpit,
// and a cancelled context answers what is left unknown/timeout.
func TestDeadline(t *testing.T) {
	w := startWorld(t, mailworld.Classes(mailworld.ClassOptions{Tarpit: 5 * time.Second}))
	cfg := worldConfig(w)
	cfg.CommandTimeout = 10 * time.Second
	v := mustNew(t, cfg, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	start := time.Now()
	r := v.VerifyOne(ctx, "alice@tarpit.test")
	if d := time.Since(start); d > time.Second {
		t.Fatalf("VerifyOne took %v past a 400ms deadline", d)
	}
	if r.Reason != verify.ReasonTimeout || !r.Temporary {
		t.Fatalf("%+v", r)
	}
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	res := v.Verify(ctx, []string{"alice@tarpit.test", "alice@ok.test", "nobody@nxdomain.test"})
	if res[0].Reason != verify.ReasonTimeout || res[1].Reason != verify.ReasonAccepted || res[2].Reason != verify.ReasonNoSuchDomain {
		t.Fatalf("%+v", res)
	}
}

// TestIPLiteral: an address literal is checked at that IP directly.
func TestIPLiteral(t *testing.T) {
	w := startWorld(t, mailworld.Classes(mailworld.ClassOptions{}))
	ip := w.HostIP("mx.ok.test")
	v := mustNew(t, worldConfig(w), nil)
	r := v.VerifyOne(context.Background(), "alice@["+ip+"]")
	// The world's hosts refuse to relay for a domain they do not serve.
	if r.Reason != verify.ReasonRejected || r.MXHost == nil || *r.MXHost != "["+ip+"]" || r.Provider != nil || r.SMTPCode != 550 {
		b, _ := json.Marshal(r)
		t.Fatalf("%s", b)
	}
	// Without the allowance (the default policy) the same world is not
	// reached: undeliverable/no_mail_server, no session.
	cfg := worldConfig(w)
	cfg.Policy = nil
	v = mustNew(t, cfg, nil)
	w.ResetStats()
	if r := v.VerifyOne(context.Background(), "alice@["+ip+"]"); r.Reason != verify.ReasonNoMailServer || r.MXHost != nil {
		t.Fatalf("default policy, loopback literal: %+v", r)
	}
	if r := v.VerifyOne(context.Background(), "alice@ok.test"); r.Reason != verify.ReasonNoMailServer || r.MXHost == nil || *r.MXHost != "mx.ok.test" {
		t.Fatalf("default policy, loopback MX: %+v", r)
	}
	if n := w.Stats().Sessions; n != 0 {
		t.Fatalf("default policy: %d SMTP sessions", n)
	}
}

// TestHostLimitsLearned: a host that allows one session and 5 RCPTs per
// session, with 40 addresses: every answer is exact, the 421 and 452
// replies teach the verifier the limits (few of either), and the next
// call stays within them from the start.
func TestHostLimitsLearned(t *testing.T) {
	spec := mailworld.Spec{
		Hosts:   []mailworld.Host{{Name: "mx.tight.test", MaxConns: 1, MaxRcpts: 5}},
		Domains: []mailworld.Domain{{Name: "tight.test", MX: []string{"mx.tight.test"}}},
	}
	var in []string
	for i := 0; i < 40; i++ {
		local := "user" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if i%4 != 0 {
			spec.Domains[0].Users = append(spec.Domains[0].Users, local)
		}
		in = append(in, local+"@tight.test")
	}
	w := startWorld(t, spec)
	cfg := worldConfig(w)
	cfg.MaxRcptsPerSession = 20
	v := mustNew(t, cfg, verify.NewLocalLimiter(verify.LimiterOptions{SessionsPerSecond: 100}))
	check := func() {
		for i, r := range v.Verify(context.Background(), in) {
			want := verify.ReasonAccepted
			if i%4 == 0 {
				want = verify.ReasonMailboxNotFound
			}
			if r.Reason != want {
				t.Errorf("%s: %s/%s, want %s", in[i], r.Status, r.Reason, want)
			}
		}
	}
	check()
	st := w.Stats()
	t.Logf("first call: sessions %d, 421 %d, 452 %d", st.Sessions, st.Rejected421, st.Replies452)
	if st.Rejected421 > 2 || st.Replies452 > 20 {
		t.Errorf("did not learn: %+v", st)
	}
	w.ResetStats()
	check()
	if st := w.Stats(); st.Rejected421 != 0 || st.Replies452 != 0 {
		t.Errorf("second call still hits the limits: %+v", st)
	}
}

// TestListsApplied: a disposable domain's accepted mailbox is
// risky/disposable; role and free flags come from the lists.
func TestListsApplied(t *testing.T) {
	w := startWorld(t, mailworld.Classes(mailworld.ClassOptions{}))
	l := verify.DefaultLists()
	if _, err := l.Load("disposable", strings.NewReader("ok.test\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Load("free", strings.NewReader("shared-a.test\n")); err != nil {
		t.Fatal(err)
	}
	v, err := verify.New(worldConfig(w), l, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := v.Verify(context.Background(), []string{"alice@ok.test", "nobody@ok.test", "alice@shared-a.test", "postmaster@catchall.test"})
	if r := res[0]; r.Status != verify.StatusRisky || r.Reason != verify.ReasonDisposable || !r.IsDisposable || r.Score != 20 {
		t.Errorf("disposable: %+v", r)
	}
	if r := res[1]; r.Reason != verify.ReasonMailboxNotFound || !r.IsDisposable {
		t.Errorf("disposable, unknown user: %+v", r)
	}
	if r := res[2]; r.Reason != verify.ReasonAccepted || !r.IsFree || r.Score != 90 {
		t.Errorf("free: %+v", r)
	}
	if r := res[3]; r.Reason != verify.ReasonCatchAll || !r.IsRole || !r.IsCatchAll {
		t.Errorf("role: %+v", r)
	}
}

// TestTwoProcessesShareHosts: two verifiers (two "processes", separate
// Redis clients) verify the same world at the same time through one Redis
// limiter: together they never exceed a host's 3 sessions (no 421), and
// every knowable answer is exact.
func TestTwoProcessesShareHosts(t *testing.T) {
	srv := testredis.Start(t)
	spec := mailworld.Bench(mailworld.BenchOptions{Domains: 60, PerDomain: 10, RTT: 10 * time.Millisecond, Seed: 3})
	w := startWorld(t, spec)
	cases := w.Cases()
	var wg sync.WaitGroup
	results := make([][]verify.Result, 2)
	for p := 0; p < 2; p++ {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
		t.Cleanup(func() { _ = rdb.Close() })
		v := mustNew(t, worldConfig(w), verify.NewRedisLimiter(rdb, verify.LimiterOptions{SessionsPerHost: 3, SessionsPerSecond: 50}))
		wg.Go(func() {
			results[p] = v.Verify(context.Background(), emailsOf(cases))
		})
	}
	wg.Wait()
	st := w.Stats()
	if st.Rejected421 != 0 {
		t.Errorf("%d sessions refused with 421", st.Rejected421)
	}
	for h, n := range st.MaxConcurrent {
		if n > 3 {
			t.Errorf("%s saw %d concurrent sessions", h, n)
		}
	}
	grey := map[string]bool{}
	for _, d := range spec.Domains {
		grey[d.Name] = d.Greylist > 0
	}
	for p := range results {
		for i, c := range cases {
			r := results[p][i]
			if r.Status == verify.StatusDeliverable && c.Status != mailworld.Deliverable {
				t.Errorf("false deliverable %s", c.Email)
			}
			if !c.Knowable || grey[c.Email[strings.LastIndexByte(c.Email, '@')+1:]] {
				continue
			}
			if r.Status != c.Status || r.Reason != c.Reason {
				t.Errorf("process %d: %s got %s/%s, want %s/%s", p, c.Email, r.Status, r.Reason, c.Status, c.Reason)
			}
		}
	}
	t.Logf("sessions %d, rcpts %d, 452 %d", st.Sessions, st.Rcpts, st.Replies452)
}
