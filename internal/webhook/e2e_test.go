package webhook_test

// Webhooks end to end through a standalone bulkd (internal/bulkdtest): a
// submission with webhook_url, the job run by the in-process executor, the
// event swept from the job's state and delivered to a real receiver on
// loopback, signed with the account's secret as `bulkd admin
// webhook-secret` prints it.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/admin"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/company"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/internal/webhook"
)

type hit struct {
	header http.Header
	body   []byte
}

// hookReceiver answers the n-th request (1-based) with answer(n); 0 hangs
// until the sender gives up.
type hookReceiver struct {
	*httptest.Server
	mu   sync.Mutex
	hits []hit
}

func newHookReceiver(t *testing.T, answer func(n int) int) *hookReceiver {
	r := &hookReceiver{}
	stop := make(chan struct{})
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.hits = append(r.hits, hit{req.Header.Clone(), b})
		n := len(r.hits)
		r.mu.Unlock()
		if st := answer(n); st != 0 {
			w.WriteHeader(st)
			return
		}
		select {
		case <-req.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(func() { close(stop); r.Close() })
	return r
}

func (r *hookReceiver) got() []hit {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hit(nil), r.hits...)
}

// accepted are the events a receiver answered 2xx, by type.
func (r *hookReceiver) accepted(t *testing.T, answer func(n int) int) map[string]webhook.Event {
	out := map[string]webhook.Event{}
	for i, h := range r.got() {
		if st := answer(i + 1); st < 200 || st > 299 {
			continue
		}
		var e webhook.Event
		if err := json.Unmarshal(h.body, &e); err != nil {
			t.Fatalf("event body %s: %v", h.body, err)
		}
		out[e.Type] = e
	}
	return out
}

// startHooks runs the env's webhook sweeper and deliverer, fast.
func startHooks(t *testing.T, env *bulkdtest.Env) {
	svc := env.Parts.Webhooks
	svc.Deliverer.Opts.Poll, svc.Deliverer.Opts.Sweep = 10*time.Millisecond, 20*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func hookConfig(c *config.Config) {
	c.WebhookAllowLoopback = true
	c.PublicURL = "https://api.bulkd.example/"
	c.WebhookTimeout = 300 * time.Millisecond
	c.WebhookBackoff, c.WebhookBackoffMax = 20*time.Millisecond, 80*time.Millisecond
}

// secretOf is what `bulkd admin webhook-secret ACCOUNT` prints.
func secretOf(t *testing.T, rdb redis.UniversalClient, acct string, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if err := admin.Run(context.Background(), rdb, admin.Env{Stdout: &out, Stderr: &errOut, Now: time.Now},
		append([]string{"webhook-secret", acct}, args...)); err != nil {
		t.Fatalf("admin webhook-secret: %v (%s)", err, errOut.String())
	}
	return strings.TrimSpace(out.String())
}

// A company job with a webhook: the receiver fails (500), times out, then
// accepts; every attempt is the same event (one id, one body), signed with
// the account's secret; the event says what the status endpoint says.
// Sweeping the job again (a sweeper that died before noting its work)
// sends nothing twice.
func TestCompanyJobWebhook(t *testing.T) {
	env := bulkdtest.Start(t, bulkdtest.WithConfig(hookConfig))
	env.PutCompanies(company.Record{NetworkURL: new("https://www.linkedin.com/company/acme-corp"), Name: new("Acme Corp"),
		Website: new("https://www.acme.example"), Domain: new("acme.example")})
	acct, key := env.Account(credits.Whole(10))
	answer := func(n int) int { return map[int]int{1: 500, 2: 0, 3: 200}[n] }
	rec := newHookReceiver(t, answer)
	startHooks(t, env)

	r := env.PostJSON("/v1/company-enrichment/bulk", key, map[string]any{
		"webhook_url": rec.URL + "/hooks/bulkd?src=test",
		"input":       []map[string]string{{"network_url": "https://www.linkedin.com/company/acme-corp"}, {"domain": "nothing-here.example"}, {"domain": "not a domain"}},
	})
	if r.Status != http.StatusOK {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	var sub struct {
		JobID string `json:"job_id"`
	}
	r.Decode(t, &sub)
	bulkdtest.Eventually(t, 20*time.Second, 10*time.Millisecond, "the webhook's third attempt", func() bool { return len(rec.got()) >= 3 })
	time.Sleep(100 * time.Millisecond) // nothing more may come
	hits := rec.got()
	if len(hits) != 3 {
		t.Fatalf("%d deliveries, want 3", len(hits))
	}
	secret := secretOf(t, env.Redis, acct)
	for i, h := range hits {
		if h.header.Get("X-Bulkd-Event-Id") != hits[0].header.Get("X-Bulkd-Event-Id") || !bytes.Equal(h.body, hits[0].body) {
			t.Errorf("attempt %d is another event: %v %s", i+1, h.header, h.body)
		}
		if err := webhook.Verify(h.header.Get("X-Bulkd-Signature"), secret, h.body, 5*time.Minute, time.Now()); err != nil {
			t.Errorf("attempt %d: %v", i+1, err)
		}
	}
	ev := rec.accepted(t, answer)[webhook.TypeCompleted]
	st := env.Get("/v1/company-enrichment/bulk/"+sub.JobID, key)
	var status struct {
		Status  string           `json:"status"`
		Summary map[string]int64 `json:"summary"`
	}
	st.Decode(t, &status)
	want := "/v1/company-enrichment/bulk/" + sub.JobID
	if ev.EventID != hits[0].header.Get("X-Bulkd-Event-Id") || ev.EventID != webhook.EventID(sub.JobID, webhook.TypeCompleted) ||
		ev.JobID != sub.JobID || ev.Family != "company_enrichment" || ev.Status != "completed" || ev.Status != status.Status ||
		ev.Counts["total_found"] != 1 || ev.Counts["total_not_found"] != 1 || ev.Counts["total_invalid_url"] != 1 ||
		ev.Links.Status != want || ev.Links.Results != want+"/results" ||
		ev.Links.StatusURL != "https://api.bulkd.example"+want || ev.Links.ResultsURL != "https://api.bulkd.example"+want+"/results" ||
		ev.CreatedAt.IsZero() {
		t.Fatalf("event %s; status %s", hits[2].body, st.Body)
	}
	for k, v := range status.Summary {
		if ev.Counts[k] != v {
			t.Errorf("counts[%s] = %d, status says %d", k, ev.Counts[k], v)
		}
	}
	// A sweeper that died after enqueueing, before dropping the job from
	// its set: the next sweep finds the event already known.
	if err := env.Redis.ZAdd(context.Background(), "bulkd:jobs:webhooks", redis.Z{Score: 1, Member: sub.JobID}).Err(); err != nil {
		t.Fatal(err)
	}
	bulkdtest.Eventually(t, 5*time.Second, 10*time.Millisecond, "the job swept again", func() bool {
		return env.Redis.ZScore(context.Background(), "bulkd:jobs:webhooks", sub.JobID).Err() == redis.Nil
	})
	time.Sleep(100 * time.Millisecond)
	if n := len(rec.got()); n != 3 {
		t.Fatalf("%d deliveries after the sweep again", n)
	}
	// A rotated secret: the next event is signed with both.
	if nw := secretOf(t, env.Redis, acct, "--rotate"); nw == secret || secretOf(t, env.Redis, acct) != nw {
		t.Fatalf("rotation: %q", nw)
	}
}

// A verification job with a webhook whose greylisted address is retried:
// the job is partial_complete_retrying, then complete, while no deliverer
// runs (a process that died: the events are in the job's state), and once
// one runs both events arrive, once each.
func TestVerificationJobWebhook(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := mailworld.Start(ctx, mailworld.Classes(mailworld.ClassOptions{Greylist: 300 * time.Millisecond, Tarpit: 2 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	env := bulkdtest.Start(t, bulkdtest.WithConfig(func(c *config.Config) {
		hookConfig(c)
		c.PublicURL = ""
		c.DNSServer, c.SMTPPort = w.DNSAddr(), w.SMTPPort()
		c.OutboundAllowCIDRs = mailworld.AllowCIDRs
		c.SMTPCommandTimeout = time.Second
		c.VerifyRetryDelays = "400ms,400ms"
	}))
	acct, key := env.Account(credits.Whole(10))
	ok := func(int) int { return 204 }
	rec := newHookReceiver(t, ok)
	r := env.PostJSON("/v1/bulk", key, map[string]any{"emails": []string{"alice@ok.test", "alice@grey.test", "nobody@ok.test"},
		"webhook_url": rec.URL + "/v"})
	if r.Status != http.StatusOK {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	var sub struct {
		JobID string `json:"job_id"`
	}
	r.Decode(t, &sub)
	var status map[string]any
	bulkdtest.Eventually(t, 20*time.Second, 20*time.Millisecond, "complete", func() bool {
		status = map[string]any{}
		env.Get("/v1/bulk/"+sub.JobID, key).Decode(t, &status)
		return status["status"] == "complete"
	})
	if len(rec.got()) != 0 {
		t.Fatal("delivered with no deliverer running")
	}
	startHooks(t, env)
	bulkdtest.Eventually(t, 10*time.Second, 10*time.Millisecond, "two events", func() bool { return len(rec.got()) >= 2 })
	time.Sleep(150 * time.Millisecond)
	if n := len(rec.got()); n != 2 {
		t.Fatalf("%d deliveries, want 2", n)
	}
	evs := rec.accepted(t, ok)
	retrying, done := evs["job.partial_complete_retrying"], evs[webhook.TypeCompleted]
	secret := secretOf(t, env.Redis, acct)
	for _, h := range rec.got() {
		if err := webhook.Verify(h.header.Get("X-Bulkd-Signature"), secret, h.body, time.Minute, time.Now()); err != nil {
			t.Error(err)
		}
	}
	if retrying.Status != "partial_complete_retrying" || retrying.JobID != sub.JobID || retrying.Family != "email_verification" ||
		retrying.EventID == done.EventID || retrying.Links.Status != "/v1/bulk/"+sub.JobID || retrying.Links.StatusURL != "" {
		t.Errorf("retrying event %+v", retrying)
	}
	summary, _ := status["summary"].(map[string]any)
	if done.Status != "complete" || done.Counts["deliverable"] != 2 || done.Counts["undeliverable"] != 1 ||
		float64(done.Counts["deliverable"]) != summary["deliverable"] || !done.CreatedAt.After(retrying.CreatedAt) {
		t.Errorf("completed event %+v; status %v", done, status)
	}
}

// A webhook_url is validated at submission on every bulk mount: only
// https, no IP literal, no name resolving inside (private, loopback,
// link-local, CGNAT...); loopback only with the test option. A refused URL
// is a 422 on body.webhook_url and nothing is charged.
func TestSubmissionRefusesWebhookTargets(t *testing.T) {
	env := bulkdtest.Start(t, bulkdtest.NoWorkers(), bulkdtest.WithConfig(func(c *config.Config) { c.RateLimit = 100_000 }))
	dns := &countingResolver{m: resolverMap{
		"hooks.example.com": {"93.184.216.34"}, "private.example.com": {"10.0.0.8"}, "metadata.example.com": {"169.254.169.254"},
		"cgnat.example.com": {"100.100.1.1"}, "localhost": {"127.0.0.1"}, "ula.example.com": {"fd00::5"},
	}}
	env.Parts.API.Webhooks.Resolver = dns
	acct, key := env.Account(credits.Whole(100))
	ukey := env.Key(acct, accounts.Unlimited)
	if err := env.Parts.API.Accounts.SetPlan(context.Background(), acct, accounts.PlanStarter, accounts.StateActive, time.Now().AddDate(0, 1, 0)); err != nil {
		t.Fatal(err)
	}
	lookupRows := []map[string]string{{"first_name": "Ann", "last_name": "Lee", "domain": "ok.example"}}
	mounts := []struct {
		path, key string
		body      map[string]any
	}{
		{"/v1/company-enrichment/bulk", key, map[string]any{"input": []map[string]string{{"domain": "acme.example"}}}},
		{"/v1/bulk", key, map[string]any{"emails": []string{"a@ok.example"}}},
		{"/v1/bulk-lookup", key, map[string]any{"input": lookupRows}},
		{"/v1/unlimited/bulk-lookup", ukey, map[string]any{"input": lookupRows}},
	}
	bad := map[any]string{
		"http://hooks.example.com/h":          "url_scheme",
		"https://10.0.0.1/h":                  "value_error",
		"https://[::1]/h":                     "value_error",
		"https://private.example.com/h":       "value_error",
		"https://metadata.example.com/latest": "value_error",
		"https://cgnat.example.com/h":         "value_error",
		"https://ula.example.com/h":           "value_error",
		"https://localhost:8443/h":            "value_error",
		"http://127.0.0.1:9/h":                "url_scheme",
		"https://nowhere.example.com/h":       "value_error",
		"":                                    "url_parsing",
		"https://hooks.example.com/" + strings.Repeat("x", 2048): "string_too_long",
		42: "string_type",
	}
	balance := env.Balance(acct)
	for _, m := range mounts {
		for url, typ := range bad {
			body := map[string]any{"webhook_url": url}
			for k, v := range m.body {
				body[k] = v
			}
			r := env.PostJSON(m.path, m.key, body)
			var e struct {
				Detail string `json:"detail"`
				Errors []struct{ Loc, Msg, Type string }
			}
			r.Decode(t, &e)
			if r.Status != http.StatusUnprocessableEntity || len(e.Errors) != 1 || e.Errors[0].Loc != "body.webhook_url" ||
				e.Errors[0].Type != typ || e.Detail != e.Errors[0].Msg {
				t.Errorf("%s with %.60v: %d %s", m.path, url, r.Status, r.Body)
			}
		}
		// Given twice: malformed (which one would run?).
		raw := `{"webhook_url":"https://hooks.example.com/a","webhook_url":"https://hooks.example.com/b",` + strings.TrimPrefix(mustJSON(m.body), "{")
		if r := env.Do(http.MethodPost, m.path, m.key, []byte(raw)); r.Status != http.StatusBadRequest {
			t.Errorf("%s with webhook_url twice: %d %s", m.path, r.Status, r.Body)
		}
	}
	if got := env.Balance(acct); got != balance {
		t.Fatalf("refused submissions charged: %v -> %v", balance, got)
	}
	// Public targets (and null, and no field) are accepted, and stored with
	// the job; only a URL given is resolved.
	for _, url := range []any{"https://hooks.example.com/bulkd", nil, "absent"} {
		body := map[string]any{"webhook_url": url, "input": []map[string]string{{"domain": "acme.example"}}}
		if url == "absent" {
			delete(body, "webhook_url")
		}
		before := dns.calls.Load()
		r := env.PostJSON("/v1/company-enrichment/bulk", key, body)
		var sub struct {
			JobID string `json:"job_id"`
		}
		r.Decode(t, &sub)
		j, err := env.Parts.Engine.Store.Get(context.Background(), sub.JobID)
		given := url == "https://hooks.example.com/bulkd"
		if r.Status != http.StatusOK || err != nil || j.WebhookURL != (map[bool]string{true: "https://hooks.example.com/bulkd"}[given]) {
			t.Errorf("submit with %v: %d %s; job %+v %v", url, r.Status, r.Body, j, err)
		}
		if n := dns.calls.Load() - before; n != map[bool]int64{true: 1}[given] {
			t.Errorf("submit with %v: %d lookups", url, n)
		}
	}
}

// countingResolver counts its lookups.
type countingResolver struct {
	m     resolverMap
	calls atomic.Int64
}

func (c *countingResolver) LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error) {
	c.calls.Add(1)
	return c.m.LookupIPAddr(ctx, host)
}

type resolverMap map[string][]string

func (m resolverMap) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	as, ok := m[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []net.IPAddr
	for _, a := range as {
		out = append(out, net.IPAddr{IP: net.ParseIP(a)})
	}
	return out, nil
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
