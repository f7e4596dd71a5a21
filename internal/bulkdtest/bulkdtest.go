// Package bulkdtest runs a whole standalone bulkd for end-to-end tests: a
// private redis-server, the components `bulkd serve` builds, the in-process
// executor and the HTTP API on a loopback port. Tests drive it over HTTP
// like a client would.
package bulkdtest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/apicontract"
	"github.com/bulkd/bulkd/internal/company"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/internal/serve"
	"github.com/bulkd/bulkd/internal/testredis"
)

// Env is one running bulkd.
type Env struct {
	T      testing.TB
	URL    string
	Redis  *redis.Client
	Parts  *serve.Components
	Config config.Config
	// Clock is the API's, billing's and the engine's clock: real time
	// until a test moves it (quota windows across a UTC midnight).
	Clock  *Clock
	client *http.Client
}

// Clock is real time shifted by an offset a test sets.
type Clock struct {
	mu     sync.Mutex
	offset time.Duration
}

// Now is the shifted time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// Set makes Now read t (and run on from there).
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset = time.Until(t)
}

// Option adjusts the configuration before the parts are built.
type Option func(*config.Config)

// WithConfig applies f to the configuration.
func WithConfig(f func(*config.Config)) Option { return Option(f) }

// WithMailWorld points the verifier and the finder at w (its DNS server
// and SMTP port, and the outbound allowance its loopback hosts need) with timings for loopback: 2 s SMTP commands, one retry
// of a temporary answer after 1 s, 10 s a lookup. A later option may
// change them.
func WithMailWorld(w *mailworld.World) Option {
	return func(c *config.Config) {
		c.DNSServer, c.SMTPPort = w.DNSAddr(), w.SMTPPort()
		c.OutboundAllowCIDRs = mailworld.AllowCIDRs // its hosts are on loopback
		c.SMTPCommandTimeout = 2 * time.Second
		c.VerifyRetryDelays = "1s"
		c.LookupTimeout = 10 * time.Second
	}
}

// NoWorkers builds the executor but does not start it, so every row stays
// pending until StartWorkers.
func NoWorkers() Option { return func(c *config.Config) { c.Workers = -1 } }

// LogTo, when set before Start, receives every log line of the bulkd it
// starts, debug level included (a test that proves what the logs do not
// contain: test/privacy). Tests that set it must not run in parallel.
var LogTo io.Writer

// Start runs a standalone bulkd for t. Redirect checks are off unless an
// option turns them on (they need a local website server).
func Start(t testing.TB, opts ...Option) *Env {
	t.Helper()
	rdb, _ := testredis.Client(t)
	cfg := config.Default()
	cfg.RedirectChecks = false
	cfg.ShardSize = 50
	cfg.Workers = 4
	for _, o := range opts {
		o(&cfg)
	}
	start := cfg.Workers > 0
	if !start {
		cfg.Workers = 4
	}
	var out io.Writer = io.Discard
	if testing.Verbose() {
		out = &tlog{t}
	}
	if LogTo != nil {
		out = io.MultiWriter(out, LogTo)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if out != io.Discard {
		log = slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	clock := &Clock{}
	parts, err := serve.BuildWith(cfg, rdb, log, serve.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	parts.Local.Backoff = 20 * time.Millisecond
	e := &Env{T: t, Redis: rdb, Parts: parts, Config: cfg, Clock: clock, client: &http.Client{Timeout: 30 * time.Second}}
	// Every exchange is checked against the published OpenAPI document.
	ts := httptest.NewServer(apicontract.Serve(t, parts.API))
	e.URL = ts.URL
	t.Cleanup(ts.Close)
	if start {
		e.StartWorkers()
	}
	return e
}

// StartWorkers starts the in-process executor; it stops when the test ends.
func (e *Env) StartWorkers() {
	ctx, cancel := context.WithCancel(context.Background())
	e.Parts.Local.Start(ctx)
	e.T.Cleanup(func() { cancel(); e.Parts.Local.Wait() })
}

type tlog struct{ t testing.TB }

func (l *tlog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// Account creates an account with balance and a pay-as-you-go key.
func (e *Env) Account(balance credits.Amount) (accountID, key string) {
	e.T.Helper()
	return NewAccount(e.T, e.Parts, "test", balance)
}

// Key creates another key for an account.
func (e *Env) Key(accountID string, typ accounts.KeyType) string {
	e.T.Helper()
	k, _, err := e.Parts.API.Accounts.CreateKey(context.Background(), accountID, typ)
	if err != nil {
		e.T.Fatal(err)
	}
	return k
}

// Balance reads an account's balance.
func (e *Env) Balance(accountID string) credits.Amount {
	e.T.Helper()
	return BalanceOf(e.T, e.Parts, accountID)
}

// PutCompanies stores company records, normalizing their URL and domain the
// way the importer does.
func (e *Env) PutCompanies(recs ...company.Record) {
	e.T.Helper()
	if err := ImportCompanies(context.Background(), e.Parts, recs...); err != nil {
		e.T.Fatal(err)
	}
}

// The functions below do the same on any assembled bulkd (the
// whole-system suites keep one on the Redis their cluster uses).

// NewAccount creates an account with balance and a pay-as-you-go key.
func NewAccount(t testing.TB, parts *serve.Components, name string, balance credits.Amount) (accountID, key string) {
	t.Helper()
	ctx := context.Background()
	a, err := parts.API.Accounts.CreateAccount(ctx, name, balance)
	if err != nil {
		t.Fatal(err)
	}
	k, _, err := parts.API.Accounts.CreateKey(ctx, a.ID, accounts.PayAsYouGo)
	if err != nil {
		t.Fatal(err)
	}
	return a.ID, k
}

// BalanceOf reads an account's balance.
func BalanceOf(t testing.TB, parts *serve.Components, accountID string) credits.Amount {
	t.Helper()
	b, err := parts.API.Billing.Balance(context.Background(), accountID)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ImportCompanies stores company records through the JSON Lines importer,
// so their URL and domain are normalized as in production.
func ImportCompanies(ctx context.Context, parts *serve.Components, recs ...company.Record) error {
	var buf bytes.Buffer
	for _, r := range recs {
		b, _ := json.Marshal(r)
		buf.Write(b)
		buf.WriteByte('\n')
	}
	_, err := company.Import(ctx, &buf, company.Format("jsonl"), parts.Companies, parts.Normalize, nil)
	return err
}

// Response is an HTTP answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Decode unmarshals the body into v.
func (r Response) Decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %s: %v", r.Body, err)
	}
}

// Do sends a request with key (none when empty).
func (e *Env) Do(method, path, key string, body []byte) Response {
	e.T.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, e.URL+path, rd)
	if err != nil {
		e.T.Fatal(err)
	}
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := e.client.Do(req)
	if err != nil {
		e.T.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return Response{Status: res.StatusCode, Header: res.Header, Body: b}
}

// Get is Do(GET).
func (e *Env) Get(path, key string) Response { return e.Do(http.MethodGet, path, key, nil) }

// PostJSON marshals v and POSTs it.
func (e *Env) PostJSON(path, key string, v any) Response {
	e.T.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		e.T.Fatal(err)
	}
	return e.Do(http.MethodPost, path, key, b)
}

// WaitFor polls the status path until status is completed, or fails after d.
func (e *Env) WaitFor(statusPath, key string, d time.Duration) map[string]any {
	e.T.Helper()
	deadline := time.Now().Add(d)
	for {
		r := e.Get(statusPath, key)
		var m map[string]any
		r.Decode(e.T, &m)
		if m["status"] == "completed" || m["status"] == "complete" { // verification says complete
			return m
		}
		if time.Now().After(deadline) {
			e.T.Fatalf("job not completed after %v: %s", d, r.Body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// FreeAddr returns a loopback address with a port that was free a moment
// ago, for a process under test to listen on.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Eventually polls ok every poll until it holds, failing the test after d.
func Eventually(t testing.TB, d, poll time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(poll)
	}
}
