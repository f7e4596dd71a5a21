package apiserver_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/apiserver"
	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/apicontract"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/company/normalize"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/enrich"
	"github.com/bulkd/bulkd/internal/ratelimit"
	"github.com/bulkd/bulkd/internal/testredis"
)

// testAPI is a real API server on loopback backed by a private redis-server.
type testAPI struct {
	t        *testing.T
	URL      string
	Redis    *redis.Client
	Accounts *accounts.Store
	Billing  *billing.Billing
	Clock    *fakeClock
	Server   *apiserver.Server
	client   *http.Client
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

type option func(*apiserver.Deps)

func withRateLimit(n int) option {
	return func(d *apiserver.Deps) { d.Limiter = ratelimit.New(d.Redis, n) }
}

func newTestAPI(t *testing.T, opts ...option) *testAPI {
	t.Helper()
	rdb, _ := testredis.Client(t)
	clk := &fakeClock{t: time.Now().UTC()}
	d := apiserver.Deps{
		Redis:    rdb,
		Accounts: accounts.NewStore(rdb, clk.Now),
		Billing:  billing.New(rdb, clk.Now),
		Limiter:  ratelimit.New(rdb, 1000), // high unless a test is about rate limits
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now:      clk.Now,
	}
	// The company family's routes, mounted as internal/serve does, with no
	// store behind them: enough for the answers that come before any work
	// (405, 422, 429).
	co := enrich.NewFamily(normalize.New(normalize.DefaultHosts), &enrich.Answerer{})
	d.Bulk = []apiserver.Bulk{{Path: "/company-enrichment/bulk", Keys: apiserver.Metered, Family: co}}
	d.Singles = []apiserver.Single{{Method: "GET", Path: "/company-enrichment", Family: co, Keys: apiserver.Metered, ChargePrefix: "single-"}}
	for _, o := range opts {
		o(&d)
	}
	s := apiserver.New(d)
	// Every exchange is checked against the published document
	// (internal/apicontract; contract_test.go lists what no test produced).
	ts := httptest.NewServer(apicontract.Serve(t, s))
	t.Cleanup(ts.Close)
	return &testAPI{t: t, URL: ts.URL, Redis: rdb, Accounts: d.Accounts, Billing: d.Billing, Clock: clk, Server: s,
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 200}}}
}

// metrics is what GET /metrics answers (Server.MetricsHandler, served on
// its own listener by bulkd).
func (a *testAPI) metrics() string {
	a.t.Helper()
	rec := httptest.NewRecorder()
	a.Server.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != 200 {
		a.t.Fatalf("GET /metrics: %d", rec.Code)
	}
	return rec.Body.String()
}

// account makes an account with a balance and returns it with one key of typ.
func (a *testAPI) account(bal credits.Amount, typ accounts.KeyType) (string, string) {
	a.t.Helper()
	ctx := context.Background()
	acct, err := a.Accounts.CreateAccount(ctx, "t", bal)
	if err != nil {
		a.t.Fatal(err)
	}
	key, _, err := a.Accounts.CreateKey(ctx, acct.ID, typ)
	if err != nil {
		a.t.Fatal(err)
	}
	return acct.ID, key
}

func (a *testAPI) unlimitedAccount(plan accounts.Plan, state accounts.PlanState, periodEnd time.Time) (string, string) {
	a.t.Helper()
	id, key := a.account(0, accounts.Unlimited)
	if plan != accounts.PlanNone {
		if err := a.Accounts.SetPlan(context.Background(), id, plan, state, periodEnd); err != nil {
			a.t.Fatal(err)
		}
	}
	return id, key
}

type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r response) JSON(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body is not a JSON object: %v: %s", err, r.Body)
	}
	return m
}

// do sends a request; headers is a list of name, value pairs added verbatim.
func (a *testAPI) do(method, path, body string, headers ...string) response {
	a.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, a.URL+path, rd)
	if err != nil {
		a.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header[headers[i]] = append(req.Header[headers[i]], headers[i+1])
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := a.client.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	// Go's client canonicalises header names; the wire spelling is checked
	// in TestHeaderSpelling.
	return response{Status: res.StatusCode, Header: res.Header, Body: b}
}

func (a *testAPI) get(path, key string) response {
	a.t.Helper()
	return a.do(http.MethodGet, path, "", "X-Api-Key", key)
}

// checkError asserts the SPEC 2.10 error shape.
func checkError(t *testing.T, r response, status int, code string) map[string]any {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	m := r.JSON(t)
	if d, _ := m["detail"].(string); d == "" {
		t.Fatalf("no detail: %s", r.Body)
	}
	got, has := m["code"]
	if code == "" && has {
		t.Fatalf("unexpected code %v: %s", got, r.Body)
	}
	if code != "" && got != code {
		t.Fatalf("code %v, want %s: %s", got, code, r.Body)
	}
	if _, has := m["errors"]; has != (status == 422) {
		t.Fatalf("errors[] present=%v on %d: %s", has, status, r.Body)
	}
	for k := range m {
		if k != "detail" && k != "code" && k != "errors" {
			t.Fatalf("extra field %q in error body %s", k, r.Body)
		}
	}
	return m
}
