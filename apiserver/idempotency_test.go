package apiserver_test

// Idempotency-Key on the charging requests, and the reversal of ambiguous
// single charges, through the real handlers on a real Redis.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/apiserver"
	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/finder"
	"github.com/bulkd/bulkd/internal/idempotency"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/verification"
	"github.com/bulkd/bulkd/internal/verify"
)

// idleExecutor takes jobs and runs nothing: the submissions are what
// these tests are about.
type idleExecutor struct{ enqueued atomic.Int64 }

func (e *idleExecutor) Enqueue(context.Context, *jobs.Job) error { e.enqueued.Add(1); return nil }
func (e *idleExecutor) Cancel(context.Context, string) error     { return nil }

// withEngine gives the API a real job engine (Redis store, billing) whose
// executor runs nothing.
func withEngine(ex *idleExecutor) option {
	return func(d *apiserver.Deps) {
		d.Jobs = jobs.NewEngine(jobs.NewStore(d.Redis, d.Billing), d.Billing, ex, d.Logger)
		d.Jobs.Now = d.Now
	}
}

// gatedFinder is fakeFinder behind a gate: each Find call is counted and
// waits for the gate to open.
type gatedFinder struct {
	calls   atomic.Int64
	entered chan struct{}
	gate    chan struct{}
}

func (g *gatedFinder) Find(ctx context.Context, people []finder.Person) []finder.Result {
	g.calls.Add(1)
	select {
	case g.entered <- struct{}{}:
	default:
	}
	select {
	case <-g.gate:
	case <-ctx.Done():
	}
	return fakeFinder{}.Find(ctx, people)
}

// fakeVerifier answers every address deliverable and counts its calls.
type fakeVerifier struct{ calls atomic.Int64 }

func (f *fakeVerifier) Verify(_ context.Context, emails []string) []verify.Result {
	f.calls.Add(1)
	out := make([]verify.Result, len(emails))
	for i, e := range emails {
		out[i] = verify.Result{Email: e, Status: verify.StatusDeliverable, Reason: verify.ReasonAccepted}
	}
	return out
}

func withVerifier(v *fakeVerifier) option {
	return func(d *apiserver.Deps) {
		d.Singles = append(d.Singles, apiserver.Single{Method: "GET", Path: "/verify", Family: verification.New(v, nil), Keys: apiserver.Metered, ChargePrefix: "verify-"})
	}
}

// postIdem POSTs body to path with an API key and an Idempotency-Key.
func (a *testAPI) postIdem(path, body, key, idem string) response {
	a.t.Helper()
	return a.do(http.MethodPost, path, body, "X-API-Key", key, "Idempotency-Key", idem)
}

func (a *testAPI) ledger(acct string) []billing.Entry {
	a.t.Helper()
	es, err := a.Billing.Entries(context.Background(), acct, "", 1000)
	if err != nil {
		a.t.Fatal(err)
	}
	return es
}

func (a *testAPI) balance(acct string) credits.Amount {
	a.t.Helper()
	b, err := a.Billing.Balance(context.Background(), acct)
	if err != nil {
		a.t.Fatal(err)
	}
	return b
}

func kinds(es []billing.Entry) string {
	var k []string
	for _, e := range es {
		k = append(k, e.Kind)
	}
	return strings.Join(k, ",")
}

func replayed(r response) bool { return r.Header.Get("Idempotent-Replayed") == "true" }

const idemCompanyBody = `{"input":[{"domain":"acme.example"},{"domain":"globex.example"},{"domain":"acme.example"}]}`

// loseNextReply puts a front in front of the API that, for the next request
// only, lets the server answer in full and then drops the connection
// without sending the answer on: the client sees a network error after the
// work (and the charge) was done, like a reply lost to a timeout.
func loseNextReply(t *testing.T, api *testAPI) (arm func()) {
	t.Helper()
	var lose atomic.Bool
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !lose.CompareAndSwap(true, false) {
			api.Server.ServeHTTP(w, r)
			return
		}
		api.Server.ServeHTTP(httptest.NewRecorder(), r)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		_ = conn.Close()
	}))
	t.Cleanup(front.Close)
	api.URL = front.URL
	// No retries by the transport: the test is the client that retries.
	api.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	return func() { lose.Store(true) }
}

// A bulk submission whose reply was lost, retried with the same key, is
// charged once and answered with the first answer; the key with another
// body is 422; another API key with the same Idempotency-Key is its own
// request; after 24 hours the key is new again.
func TestIdempotentBulkSubmission(t *testing.T) {
	ex := &idleExecutor{}
	api := newTestAPI(t, withEngine(ex))
	arm := loseNextReply(t, api)
	oc := newOpenAPIChecker(t, api)
	acct, key := api.account(credits.Whole(100), accounts.PayAsYouGo)
	const path = "/v1/company-enrichment/bulk"

	// The first attempt: charged, its answer lost on the way.
	arm()
	req, _ := http.NewRequest(http.MethodPost, api.URL+path, strings.NewReader(idemCompanyBody))
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Idempotency-Key", "order-7731")
	if res, err := api.client.Do(req); err == nil {
		res.Body.Close()
		t.Fatalf("the first reply reached the client (%d); the front should have dropped it", res.StatusCode)
	}
	if got := api.balance(acct); got != credits.Whole(98) {
		t.Fatalf("balance after the lost reply %s, want 98 (the work was done)", got)
	}

	// The retry: the first answer, not a second job.
	r := api.postIdem(path, idemCompanyBody, key, "order-7731")
	if r.Status != 200 || !replayed(r) {
		t.Fatalf("retry: %d replayed=%v: %s", r.Status, replayed(r), r.Body)
	}
	oc.check(http.MethodPost, api.URL+path, idemCompanyBody, r)
	first := r.JSON(t)
	es := api.ledger(acct)
	if kinds(es) != "charge" || es[0].JobID != first["job_id"] {
		t.Fatalf("ledger %+v, want one charge for job %v", es, first["job_id"])
	}
	if got := api.balance(acct); got != credits.Whole(98) {
		t.Errorf("balance %s after the retry, want 98", got)
	}
	if n := ex.enqueued.Load(); n != 1 {
		t.Errorf("%d jobs enqueued, want 1", n)
	}
	if r.Header.Get("X-RateLimit-Limit") == "" {
		t.Error("a replayed answer carries no rate-limit headers")
	}
	// Again: byte-identical.
	r2 := api.postIdem(path, idemCompanyBody, key, "order-7731")
	if r2.Status != 200 || string(r2.Body) != string(r.Body) {
		t.Fatalf("second retry %d %s, want %s", r2.Status, r2.Body, r.Body)
	}

	// The same key with another body: 422, nothing charged.
	other := `{"input":[{"domain":"initech.example"}]}`
	r = api.postIdem(path, other, key, "order-7731")
	m := checkError(t, r, 422, apiserver.CodeIdempotencyKeyReused)
	items := m["errors"].([]any)
	if it := items[0].(map[string]any); it["loc"] != "header.Idempotency-Key" || it["type"] != apiserver.CodeIdempotencyKeyReused {
		t.Errorf("error item %v", it)
	}
	oc.check(http.MethodPost, api.URL+path, other, r)
	// The same body on another path is another request too.
	if r := api.postIdem("/v1/company-enrichment/bulk/", idemCompanyBody, key, "order-7731"); r.Status == 200 {
		t.Errorf("the key on another path answered 200: %s", r.Body)
	}

	// Another API key of the same account, same Idempotency-Key: its own
	// request, charged on its own.
	key2 := api.newKey(acct)
	r = api.postIdem(path, idemCompanyBody, key2, "order-7731")
	if r.Status != 200 || replayed(r) || r.JSON(t)["job_id"] == first["job_id"] {
		t.Fatalf("other API key: %d replayed=%v %s", r.Status, replayed(r), r.Body)
	}
	if got := api.balance(acct); got != credits.Whole(96) {
		t.Errorf("balance %s, want 96 (two jobs of 2)", got)
	}

	// 24 hours later the key is a new request.
	api.Clock.Set(api.Clock.Now().Add(24*time.Hour + time.Second))
	r = api.postIdem(path, idemCompanyBody, key, "order-7731")
	if r.Status != 200 || replayed(r) || r.JSON(t)["job_id"] == first["job_id"] {
		t.Fatalf("after the TTL: %d replayed=%v %s", r.Status, replayed(r), r.Body)
	}
	if got := api.balance(acct); got != credits.Whole(94) {
		t.Errorf("balance %s, want 94", got)
	}
	// Just before the TTL it was still the first answer (checked on a
	// fresh key).
	r = api.postIdem(path, idemCompanyBody, key, "order-7732")
	api.Clock.Set(api.Clock.Now().Add(24*time.Hour - time.Second))
	if r3 := api.postIdem(path, idemCompanyBody, key, "order-7732"); !replayed(r3) || string(r3.Body) != string(r.Body) {
		t.Errorf("23:59:59 later: %d replayed=%v", r3.Status, replayed(r3))
	}
}

func (a *testAPI) newKey(acct string) string {
	a.t.Helper()
	k, _, err := a.Accounts.CreateKey(context.Background(), acct, accounts.PayAsYouGo)
	if err != nil {
		a.t.Fatal(err)
	}
	return k
}

// Concurrent requests with one key run the handler once: while the first
// runs the others get 409 idempotency_in_progress with Retry-After; once
// it is done they get its answer. One charge.
func TestIdempotentConcurrentSingleLookup(t *testing.T) {
	g := &gatedFinder{entered: make(chan struct{}, 1), gate: make(chan struct{})}
	api := newTestAPI(t, withLookupFinder(1000, g))
	oc := newOpenAPIChecker(t, api)
	acct, key := api.account(credits.Whole(5), accounts.PayAsYouGo)
	const path = "/v1/email-lookup"
	// Registered after the server's cleanup, so it runs first: a failing
	// test never leaves a handler stuck at the gate.
	release := sync.OnceFunc(func() { close(g.gate) })
	t.Cleanup(release)

	first := make(chan response, 1)
	go func() { first <- api.postIdem(path, lookupFound, key, "lookup-1") }()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first lookup never reached the finder")
	}
	var wg sync.WaitGroup
	answers := make([]response, 8)
	for i := range answers {
		wg.Go(func() { answers[i] = api.postIdem(path, lookupFound, key, "lookup-1") })
	}
	wg.Wait()
	for _, r := range answers {
		checkError(t, r, 409, apiserver.CodeIdempotencyInProgress)
		if r.Header.Get("Retry-After") != "1" {
			t.Errorf("409 Retry-After %q, want 1", r.Header.Get("Retry-After"))
		}
		oc.check(http.MethodPost, api.URL+path, lookupFound, r)
	}
	// Even with another body: the first is still running.
	checkError(t, api.postIdem(path, lookupNobody, key, "lookup-1"), 409, apiserver.CodeIdempotencyInProgress)
	release()
	r := <-first
	if r.Status != 200 || replayed(r) {
		t.Fatalf("first: %d %s", r.Status, r.Body)
	}
	// Now many at once: all the stored answer.
	for i := range answers {
		wg.Go(func() { answers[i] = api.postIdem(path, lookupFound, key, "lookup-1") })
	}
	wg.Wait()
	for _, a := range answers {
		if a.Status != 200 || !replayed(a) || string(a.Body) != string(r.Body) {
			t.Fatalf("after the first: %d replayed=%v %s", a.Status, replayed(a), a.Body)
		}
	}
	if n := g.calls.Load(); n != 1 {
		t.Errorf("finder ran %d times, want 1", n)
	}
	if got := api.balance(acct); got != credits.Whole(4) {
		t.Errorf("balance %s, want 4 (one lookup)", got)
	}
	if k := kinds(api.ledger(acct)); k != "charge" {
		t.Errorf("ledger %s, want one charge", k)
	}
}

// Many concurrent submissions with one key make one job and one charge,
// whatever the interleaving.
func TestIdempotentConcurrentBulkSubmissions(t *testing.T) {
	ex := &idleExecutor{}
	api := newTestAPI(t, withEngine(ex))
	acct, key := api.account(credits.Whole(100), accounts.PayAsYouGo)
	var wg sync.WaitGroup
	answers := make([]response, 16)
	for i := range answers {
		wg.Go(func() { answers[i] = api.postIdem("/v1/company-enrichment/bulk", idemCompanyBody, key, "batch-42") })
	}
	wg.Wait()
	var jobID any
	ok := 0
	for _, r := range answers {
		switch r.Status {
		case 200:
			ok++
			id := r.JSON(t)["job_id"]
			if jobID == nil {
				jobID = id
			}
			if id != jobID {
				t.Fatalf("two jobs: %v and %v", jobID, id)
			}
		case 409:
			checkError(t, r, 409, apiserver.CodeIdempotencyInProgress)
		default:
			t.Fatalf("answer %d %s", r.Status, r.Body)
		}
	}
	if ok == 0 {
		t.Fatal("no 200 among the answers")
	}
	t.Logf("%d answers: %d x 200 (one ran, the others replayed), %d x 409", len(answers), ok, len(answers)-ok)
	if n := ex.enqueued.Load(); n != 1 {
		t.Errorf("%d jobs, want 1", n)
	}
	if got := api.balance(acct); got != credits.Whole(98) {
		t.Errorf("balance %s, want 98", got)
	}
}

// Only answers that kept a charge (2xx) are stored: a refusal (403) or a
// refunded failure (502) leaves the key free, so the retry runs and may
// succeed (after a top-up) without paying twice.
func TestIdempotencyStoresOnlySuccess(t *testing.T) {
	api := newTestAPI(t, withLookup(1000))
	acct, key := api.account(0, accounts.PayAsYouGo)
	const path = "/v1/email-lookup"

	checkError(t, api.postIdem(path, lookupFound, key, "k-403"), 403, "")
	if _, err := api.Billing.Adjust(context.Background(), acct, credits.Whole(3), "top-up"); err != nil {
		t.Fatal(err)
	}
	r := api.postIdem(path, lookupFound, key, "k-403")
	if r.Status != 200 || replayed(r) {
		t.Fatalf("after the top-up: %d replayed=%v %s", r.Status, replayed(r), r.Body)
	}
	// 502 (refunded) twice: both run, both refunded.
	for range 2 {
		r := api.postIdem(path, lookupGrey, key, "k-502")
		checkError(t, r, 502, "")
		if replayed(r) {
			t.Fatal("a 502 was replayed")
		}
	}
	// A validation error: not stored either; the corrected body runs.
	checkError(t, api.postIdem(path, `{"first_name":"Ada"}`, key, "k-422"), 422, "")
	if r := api.postIdem(path, lookupNobody, key, "k-422"); r.Status != 200 || replayed(r) {
		t.Fatalf("corrected body: %d replayed=%v %s", r.Status, replayed(r), r.Body)
	}
	if got := api.balance(acct); got != credits.Whole(1) {
		t.Errorf("balance %s, want 1 (two lookups answered of 3)", got)
	}
	if k := kinds(api.ledger(acct)); k != "adjust,charge,charge,refund,charge,refund,charge" {
		t.Errorf("ledger %s", k)
	}
}

// The header's format: 1..255 printable ASCII characters, one header; the
// draft standard's quoted form is the same key as the bare one.
func TestIdempotencyKeyFormat(t *testing.T) {
	api := newTestAPI(t, withLookup(1000))
	oc := newOpenAPIChecker(t, api)
	acct, key := api.account(credits.Whole(5), accounts.PayAsYouGo)
	const path = "/v1/email-lookup"
	for _, tc := range []struct {
		name    string
		headers []string
		typ     string
	}{
		{"empty", []string{"Idempotency-Key", ""}, "string_too_short"},
		{"empty quoted", []string{"Idempotency-Key", `""`}, "string_too_short"},
		{"too long", []string{"Idempotency-Key", strings.Repeat("k", 256)}, "string_too_long"},
		{"not ascii", []string{"Idempotency-Key", "clé-1"}, "value_error"},
		{"two headers", []string{"Idempotency-Key", "a", "Idempotency-Key", "b"}, "value_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := api.do(http.MethodPost, path, lookupFound, append([]string{"X-API-Key", key}, tc.headers...)...)
			m := checkError(t, r, 422, "")
			it := m["errors"].([]any)[0].(map[string]any)
			if it["loc"] != "header.Idempotency-Key" || it["type"] != tc.typ || m["detail"] != it["msg"] {
				t.Errorf("422 %s", r.Body)
			}
			oc.check(http.MethodPost, api.URL+path, lookupFound, r)
		})
	}
	if got := api.balance(acct); got != credits.Whole(5) {
		t.Fatalf("a refused key charged: balance %s", got)
	}
	long := strings.Repeat("~", 255)
	r := api.postIdem(path, lookupFound, key, long)
	if r.Status != 200 {
		t.Fatalf("255-character key: %d %s", r.Status, r.Body)
	}
	oc.check(http.MethodPost, api.URL+path, lookupFound, r)
	if r := api.postIdem(path, lookupFound, key, `"`+long+`"`); !replayed(r) {
		t.Errorf("quoted form of the key was not the same key: %d %s", r.Status, r.Body)
	}
	if r := api.postIdem(path, lookupFound, key, "a key with spaces"); r.Status != 200 {
		t.Errorf("key with spaces: %d %s", r.Status, r.Body)
	}
}

// GET /v1/verify charges, so it takes the header too; the query is the
// request (another address with the key is 422).
func TestIdempotentSingleVerify(t *testing.T) {
	v := &fakeVerifier{}
	api := newTestAPI(t, withVerifier(v))
	oc := newOpenAPIChecker(t, api)
	acct, key := api.account(credits.Whole(1), accounts.PayAsYouGo)
	get := func(q, idem string) response {
		return api.do(http.MethodGet, "/v1/verify?"+q, "", "X-API-Key", key, "Idempotency-Key", idem)
	}
	r1 := get("email=ada@found.example&timeout=10", "v-1")
	r2 := get("timeout=10&email=ada@found.example", "v-1") // same query, other order
	if r1.Status != 200 || replayed(r1) || r2.Status != 200 || !replayed(r2) || string(r1.Body) != string(r2.Body) {
		t.Fatalf("verify: %d %s / %d replayed=%v %s", r1.Status, r1.Body, r2.Status, replayed(r2), r2.Body)
	}
	oc.check(http.MethodGet, api.URL+"/v1/verify?email=ada@found.example&timeout=10", "", r2)
	r := get("email=bob@found.example&timeout=10", "v-1")
	checkError(t, r, 422, apiserver.CodeIdempotencyKeyReused)
	oc.check(http.MethodGet, api.URL+"/v1/verify?email=bob@found.example&timeout=10", "", r)
	if n := v.calls.Load(); n != 1 {
		t.Errorf("verifier ran %d times, want 1", n)
	}
	if got := api.balance(acct); got != credits.Amount(800) {
		t.Errorf("balance %s, want 0.8", got)
	}
}

// A process that died while running a request leaves its claim; the key
// answers 409 until the claim's lease runs out, then runs anew.
func TestIdempotencyClaimOfDeadProcessExpires(t *testing.T) {
	api := newTestAPI(t, withLookup(1000))
	_, key := api.account(credits.Whole(5), accounts.PayAsYouGo)
	now := api.Clock.Now()
	rk := idemRecord(key, "orphan")
	// What a claim looks like in Redis while its request runs.
	if err := api.Redis.HSet(context.Background(), rk, "st", "run", "own", "dead-process", "t0", now.UnixMilli(),
		"lease", now.Add(30*time.Second).UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	checkError(t, api.postIdem("/v1/email-lookup", lookupFound, key, "orphan"), 409, apiserver.CodeIdempotencyInProgress)
	api.Clock.Set(now.Add(31 * time.Second))
	if r := api.postIdem("/v1/email-lookup", lookupFound, key, "orphan"); r.Status != 200 || replayed(r) {
		t.Fatalf("after the lease: %d %s", r.Status, r.Body)
	}
	ttl := api.Redis.PTTL(context.Background(), rk).Val()
	if ttl < 23*time.Hour || ttl > 24*time.Hour {
		t.Errorf("stored answer expires in %v, want about 24 h", ttl)
	}
}

// dropReplies is a go-redis hook that lets the next n scripts run in Redis
// and then loses their replies, as a read timeout or a dropped connection
// after Redis ran the script would.
type dropReplies struct{ n atomic.Int64 }

var errLostReply = errors.New("read tcp: i/o timeout (reply lost by the test)")

func (d *dropReplies) DialHook(next redis.DialHook) redis.DialHook { return next }
func (d *dropReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (d *dropReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		name := strings.ToLower(cmd.Name())
		if err == nil && (name == "evalsha" || name == "eval") && d.n.Add(-1) >= 0 {
			cmd.SetErr(errLostReply)
			return errLostReply
		}
		return err
	}
}

// withBillingHook gives billing a client of its own (the same Redis)
// with a hook that can drop or hold its scripts.
func withBillingHook(h redis.Hook) option {
	return func(d *apiserver.Deps) {
		var c redis.UniversalClient
		switch r := d.Redis.(type) {
		case *redis.Client:
			o := *r.Options()
			c = redis.NewClient(&o)
		case *redis.ClusterClient:
			o := *r.Options()
			c = redis.NewClusterClient(&o)
		default:
			panic(fmt.Sprintf("withBillingHook: unexpected client %T", d.Redis))
		}
		c.AddHook(h)
		d.Billing = billing.New(c, d.Now)
	}
}

// A single request whose charge reply is lost (the charge ran in Redis)
// answers 500 and reverses the charge: the balance (or quota) is whole
// again and the ledger shows the charge and its refund. Before the fix
// the 500 kept the charge.
func TestSingleRequestsReverseAmbiguousCharge(t *testing.T) {
	h := &dropReplies{}
	v := &fakeVerifier{}
	api := newTestAPI(t, withLookup(1000), withVerifier(v), withBillingHook(h))
	ctx := context.Background()
	for _, tc := range []struct {
		name, method, path, body string
		unlimited                bool
		want                     string // ledger kinds
	}{
		{"email-lookup", http.MethodPost, "/v1/email-lookup", lookupFound, false, "charge,refund"},
		{"verify", http.MethodGet, "/v1/verify?email=ada@found.example", "", false, "charge,refund"},
		{"company", http.MethodGet, "/v1/company-enrichment?domain=acme.example", "", false, "charge,refund"},
		{"unlimited email-lookup", http.MethodPost, "/v1/unlimited/email-lookup", lookupFound, true, "quota_consume,quota_release"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var acct, key string
			if tc.unlimited {
				acct, key = api.unlimitedAccount(accounts.PlanStarter, accounts.StateActive, api.Clock.Now().Add(time.Hour))
			} else {
				acct, key = api.account(credits.Whole(3), accounts.PayAsYouGo)
			}
			h.n.Store(1)
			r := api.do(tc.method, tc.path, tc.body, "X-API-Key", key)
			checkError(t, r, 500, "")
			if h.n.Load() >= 1 {
				t.Fatal("no script reply was dropped")
			}
			es := api.ledger(acct)
			if kinds(es) != tc.want || es[0].JobID != es[1].JobID {
				t.Fatalf("ledger %+v, want %s of one charge", es, tc.want)
			}
			if tc.unlimited {
				a, err := api.Accounts.Account(ctx, acct)
				if err != nil {
					t.Fatal(err)
				}
				used, err := api.Billing.Used(ctx, acct, apiserver.SingleLookupWindow(a, api.Clock.Now()))
				if err != nil || used != 0 {
					t.Errorf("single lookups used %d (%v), want 0", used, err)
				}
			} else if got := api.balance(acct); got != credits.Whole(3) {
				t.Errorf("balance %s, want 3", got)
			}
		})
	}
	if n := v.calls.Load(); n != 0 {
		t.Errorf("the verifier ran %d times after a failed charge", n)
	}
}

// holdScripts is a go-redis hook that keeps the next script from reaching
// Redis, answers the caller with a timeout, and lets the test send the
// command later: a charge still on its way when its caller gave up.
type holdScripts struct {
	armed atomic.Bool
	mu    sync.Mutex
	held  []any
}

func (h *holdScripts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *holdScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *holdScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := strings.ToLower(cmd.Name())
		if (name == "evalsha" || name == "eval") && h.armed.CompareAndSwap(true, false) {
			h.mu.Lock()
			h.held = append([]any(nil), cmd.Args()...)
			h.mu.Unlock()
			cmd.SetErr(errLostReply)
			return errLostReply
		}
		return next(ctx, cmd)
	}
}

// A charge that reaches Redis only after the handler gave up on it and
// reversed it takes nothing: the reversal left a tombstone under the
// charge id (internal/billing), so the late script finds the id taken.
func TestSingleLookupLateChargeIsNoOp(t *testing.T) {
	h := &holdScripts{}
	api := newTestAPI(t, withLookup(1000), withBillingHook(h))
	ctx := context.Background()
	for _, tc := range []struct {
		name, path string
		unlimited  bool
	}{{"email-lookup", "/v1/email-lookup", false}, {"unlimited email-lookup", "/v1/unlimited/email-lookup", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var acct, key string
			if tc.unlimited {
				acct, key = api.unlimitedAccount(accounts.PlanStarter, accounts.StateActive, api.Clock.Now().Add(time.Hour))
			} else {
				acct, key = api.account(credits.Whole(3), accounts.PayAsYouGo)
			}
			// One lookup that goes through loads the scripts, so the held
			// EVALSHA can run later.
			if r := api.do(http.MethodPost, tc.path, lookupNobody, "X-API-Key", key); r.Status != 200 {
				t.Fatalf("warm-up: %d %s", r.Status, r.Body)
			}
			before := kinds(api.ledger(acct))
			bal := api.balance(acct)
			h.armed.Store(true)
			checkError(t, api.do(http.MethodPost, tc.path, lookupFound, "X-API-Key", key), 500, "")
			h.mu.Lock()
			held := h.held
			h.mu.Unlock()
			if held == nil {
				t.Fatal("no script was held")
			}
			// Now the charge arrives.
			if err := api.Redis.Do(ctx, held...).Err(); err != nil {
				t.Fatalf("late charge: %v", err)
			}
			if got := kinds(api.ledger(acct)); got != before {
				t.Errorf("ledger %s after the late charge, want %s (nothing moved)", got, before)
			}
			if tc.unlimited {
				a, _ := api.Accounts.Account(ctx, acct)
				if used, _ := api.Billing.Used(ctx, acct, apiserver.SingleLookupWindow(a, api.Clock.Now())); used != 1 {
					t.Errorf("single lookups used %d, want 1 (the warm-up)", used)
				}
			} else if got := api.balance(acct); got != bal {
				t.Errorf("balance %s after the late charge, want %s", got, bal)
			}
		})
	}
}

// A request that runs longer than the lease keeps its claim: the owner
// renews it, so a retry during the long run is told 409 and does not run
// the handler a second time; the record, which holds the request's charge,
// keeps living for the TTL meanwhile.
func TestIdempotencyLeaseRenewedWhileRunning(t *testing.T) {
	g := &gatedFinder{entered: make(chan struct{}, 1), gate: make(chan struct{})}
	api := newTestAPI(t, withLookupFinder(1000, g), func(d *apiserver.Deps) {
		d.Idempotency.Lease = 300 * time.Millisecond
	})
	release := sync.OnceFunc(func() { close(g.gate) })
	t.Cleanup(release)
	_, key := api.account(credits.Whole(5), accounts.PayAsYouGo)
	first := make(chan response, 1)
	go func() { first <- api.postIdem("/v1/email-lookup", lookupFound, key, "long-1") }()
	<-g.entered
	time.Sleep(time.Second) // more than three leases
	// The charge is recorded on the claim: the renewals must not shorten
	// the record back to the lease, or a crash now would lose the link
	// between the key and the charge to reverse.
	if ttl := api.Redis.PTTL(context.Background(), idemRecord(key, "long-1")).Val(); ttl < time.Hour {
		t.Errorf("record with a charge expires in %v after renewals, want the 24 h TTL", ttl)
	}
	second := make(chan response, 1)
	go func() { second <- api.postIdem("/v1/email-lookup", lookupFound, key, "long-1") }()
	select {
	case r := <-second:
		checkError(t, r, 409, apiserver.CodeIdempotencyInProgress)
	case <-time.After(3 * time.Second):
		t.Fatal("the retry ran the handler: the claim expired while its request ran")
	}
	release()
	if r := <-first; r.Status != 200 {
		t.Fatalf("first: %d %s", r.Status, r.Body)
	}
	if n := g.calls.Load(); n != 1 {
		t.Errorf("finder ran %d times, want 1", n)
	}
}

// idemRecord is the Redis key of an Idempotency-Key's record.
func idemRecord(apiKey, idem string) string {
	return idempotency.Key(accounts.KeyIDOf(apiKey), idem)
}

// crashAfterCommit leaves an Idempotency-Key's record as a process that
// died after committing its job, before storing its answer, leaves it: a
// running claim (with the job and fingerprint recorded before the charge)
// whose lease has run out.
func crashAfterCommit(t *testing.T, api *testAPI, apiKey, idem string) {
	t.Helper()
	ctx := context.Background()
	rk := idemRecord(apiKey, idem)
	if err := api.Redis.HSet(ctx, rk, "st", "run", "own", "dead-process",
		"lease", api.Clock.Now().Add(-time.Second).UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := api.Redis.HDel(ctx, rk, "code", "ct", "body").Err(); err != nil {
		t.Fatal(err)
	}
}

// Found by the soak suite (test/soak): a replica killed after it committed
// a submission and before it answered left the key "in progress" until the
// claim's lease ran out; the client's retry then made a second job and
// paid twice. The claim records the job before the charge: the retry
// answers with the committed job, charged once; another body is 422.
func TestIdempotentSubmissionCommittedByDeadProcess(t *testing.T) {
	ex := &idleExecutor{}
	api := newTestAPI(t, withEngine(ex))
	acct, key := api.account(credits.Whole(100), accounts.PayAsYouGo)
	const path = "/v1/company-enrichment/bulk"

	first := api.postIdem(path, idemCompanyBody, key, "crash-1")
	if first.Status != 200 {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	job := first.JSON(t)["job_id"]
	crashAfterCommit(t, api, key, "crash-1")
	// Redis must not expire the record with the claim's lease (30 s): it
	// is the only link from the key to the job.
	if ttl := api.Redis.PTTL(context.Background(), idemRecord(key, "crash-1")).Val(); ttl < 23*time.Hour {
		t.Fatalf("record expires in %v, want the 24 h TTL", ttl)
	}

	// Another body under the key: 422, nothing charged, the record kept.
	checkError(t, api.postIdem(path, `{"input":[{"domain":"initech.example"}]}`, key, "crash-1"), 422, apiserver.CodeIdempotencyKeyReused)

	r := api.postIdem(path, idemCompanyBody, key, "crash-1")
	if r.Status != 200 || !replayed(r) || r.JSON(t)["job_id"] != job {
		t.Fatalf("retry after the crash: %d replayed=%v %s, want job %v", r.Status, replayed(r), r.Body, job)
	}
	if string(r.Body) != string(first.Body) {
		t.Errorf("retry answered %s, the first answer was %s", r.Body, first.Body)
	}
	if got := api.balance(acct); got != credits.Whole(98) {
		t.Errorf("balance %s, want 98: charged once", got)
	}
	if k := kinds(api.ledger(acct)); k != "charge" {
		t.Errorf("ledger %s, want one charge", k)
	}
	if n := ex.enqueued.Load(); n != 1 {
		t.Errorf("%d jobs enqueued, want 1", n)
	}
	// The recovered answer is stored: the next retry replays it.
	if r := api.postIdem(path, idemCompanyBody, key, "crash-1"); r.Status != 200 || !replayed(r) || r.JSON(t)["job_id"] != job {
		t.Fatalf("second retry: %d %s", r.Status, r.Body)
	}
}

// The other crash: the process stopped between the charge and the commit
// (here it hangs there). Once its claim's lease has run out, the retry
// rolls the hung submission back (its charge refunded, its commit made
// impossible) and runs anew: one job, one net charge; the hung request,
// when it wakes, answers 500 and refunds nothing twice.
func TestIdempotentSubmissionTakesOverHungOne(t *testing.T) {
	ex := &idleExecutor{}
	var eng *jobs.Engine
	api := newTestAPI(t, func(d *apiserver.Deps) {
		withEngine(ex)(d)
		eng = d.Jobs
	})
	acct, key := api.account(credits.Whole(100), accounts.PayAsYouGo)
	const path = "/v1/company-enrichment/bulk"

	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	eng.SetFailpoint(func(step string) error {
		if step == jobs.StepCommit {
			once.Do(func() { close(reached) })
			<-release
		}
		return nil
	})
	hung := make(chan response, 1)
	go func() { hung <- api.postIdem(path, idemCompanyBody, key, "crash-2") }()
	select {
	case <-reached:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request never reached the commit")
	}
	eng.SetFailpoint(nil)
	if got := api.balance(acct); got != credits.Whole(98) {
		t.Fatalf("balance %s while the first hangs, want 98", got)
	}
	checkError(t, api.postIdem(path, idemCompanyBody, key, "crash-2"), 409, apiserver.CodeIdempotencyInProgress)
	if ttl := api.Redis.PTTL(context.Background(), idemRecord(key, "crash-2")).Val(); ttl < 23*time.Hour {
		t.Fatalf("record of a prepared submission expires in %v, want the 24 h TTL", ttl)
	}

	// The lease runs out (the hung process renews nothing on this clock).
	api.Clock.Set(api.Clock.Now().Add(31 * time.Second))
	r := api.postIdem(path, idemCompanyBody, key, "crash-2")
	if r.Status != 200 || replayed(r) {
		t.Fatalf("retry after the lease: %d replayed=%v %s", r.Status, replayed(r), r.Body)
	}
	if got := api.balance(acct); got != credits.Whole(98) {
		t.Errorf("balance %s after the takeover, want 98 (the hung charge refunded, the new one taken)", got)
	}
	close(release)
	if h := <-hung; h.Status != 500 {
		t.Errorf("the hung request answered %d %s, want 500 (its job was taken over)", h.Status, h.Body)
	}
	if got := api.balance(acct); got != credits.Whole(98) {
		t.Errorf("balance %s after the hung request woke, want 98", got)
	}
	if k := kinds(api.ledger(acct)); k != "charge,refund,charge" {
		t.Errorf("ledger %s, want charge,refund,charge", k)
	}
	if again := api.postIdem(path, idemCompanyBody, key, "crash-2"); !replayed(again) || string(again.Body) != string(r.Body) {
		t.Errorf("the key now replays the retry's answer: %d %s", again.Status, again.Body)
	}
}

// A single request (here a lookup) whose process died after its charge and
// before storing its answer: the client never got what it paid for. The
// claim recorded the charge id before the charge; the retry after the
// lease reverses it and pays for its own answer, so the client pays once.
// A retry that fails validation first leaves the dead charge for the next.
func TestIdempotentSingleChargeOfDeadProcessReversed(t *testing.T) {
	api := newTestAPI(t, withLookup(1000))
	acct, key := api.account(credits.Whole(5), accounts.PayAsYouGo)
	if r := api.postIdem("/v1/email-lookup", lookupFound, key, "s-crash"); r.Status != 200 {
		t.Fatalf("first: %d %s", r.Status, r.Body)
	}
	if ttl := api.Redis.PTTL(context.Background(), idemRecord(key, "s-crash")).Val(); ttl < 23*time.Hour {
		t.Fatalf("record expires in %v, want the 24 h TTL", ttl)
	}
	crashAfterCommit(t, api, key, "s-crash")

	checkError(t, api.postIdem("/v1/email-lookup", `{"first_name":"x"}`, key, "s-crash"), 422, "")
	if got := api.balance(acct); got != credits.Whole(4) {
		t.Fatalf("balance %s after a 422 retry, want 4 (nothing moved)", got)
	}
	r := api.postIdem("/v1/email-lookup", lookupFound, key, "s-crash")
	if r.Status != 200 || replayed(r) {
		t.Fatalf("retry after the crash: %d replayed=%v %s", r.Status, replayed(r), r.Body)
	}
	if got := api.balance(acct); got != credits.Whole(4) {
		t.Errorf("balance %s, want 4: the dead request's credit given back, the retry's taken", got)
	}
	if k := kinds(api.ledger(acct)); k != "charge,refund,charge" {
		t.Errorf("ledger %s, want charge,refund,charge", k)
	}
	if again := api.postIdem("/v1/email-lookup", lookupFound, key, "s-crash"); !replayed(again) || string(again.Body) != string(r.Body) {
		t.Errorf("the key now replays the retry's answer: %d %s", again.Status, again.Body)
	}
}

// TestIdempotencyFloodOfFreeAnswersStoresNothing is issue 26's item 3 as
// an attacker runs it: a single GET of an invalid 2,040-character domain
// (a free answer) with a new Idempotency-Key each time. Before, each
// stored a 2.7 KB record for 24 h (219 records in 10 s from one key,
// about 5 GB a day, in a noeviction Redis). Now a record is stored only
// for an answer that kept a charge, a quota unit or a job: the flood
// stores nothing, while a charged lookup's record is still stored and
// replayed (and a flood of those is paid for, one charge a record).
func TestIdempotencyFloodOfFreeAnswersStoresNothing(t *testing.T) {
	api := newTestAPI(t, withLookup(1000))
	acct, key := api.account(credits.Whole(5), accounts.PayAsYouGo)
	long := "/v1/company-enrichment?domain=" + strings.Repeat("a", 2032) + ".example"
	for i := range 300 {
		r := api.do(http.MethodGet, long, "", "X-API-Key", key, "Idempotency-Key", fmt.Sprintf("flood-%d", i))
		if r.Status != 200 || replayed(r) {
			t.Fatalf("request %d: %d %s", i, r.Status, r.Body)
		}
	}
	ctx := context.Background()
	held := func() (n int, bytes int64) {
		ks, err := api.Redis.Keys(ctx, "bulkd:idem:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range ks {
			b, err := api.Redis.MemoryUsage(ctx, k, 0).Result()
			if err != nil {
				t.Fatal(err)
			}
			bytes += b
		}
		return len(ks), bytes
	}
	if n, b := held(); n != 0 {
		t.Fatalf("300 free answers left %d idempotency records (%d bytes)", n, b)
	}
	if got := api.balance(acct); got != credits.Whole(5) {
		t.Fatalf("the free answers charged: balance %s", got)
	}
	// The same key again runs again (nothing to replay), at no cost.
	if r := api.do(http.MethodGet, long, "", "X-API-Key", key, "Idempotency-Key", "flood-0"); r.Status != 200 || replayed(r) {
		t.Fatalf("free answer retried: %d replayed=%v", r.Status, replayed(r))
	}
	// A charged answer is stored and replayed, charged once.
	r1 := api.postIdem("/v1/email-lookup", lookupFound, key, "paid-1")
	r2 := api.postIdem("/v1/email-lookup", lookupFound, key, "paid-1")
	if r1.Status != 200 || replayed(r1) || !replayed(r2) || string(r1.Body) != string(r2.Body) {
		t.Fatalf("charged lookup: %d / replayed=%v", r1.Status, replayed(r2))
	}
	n, b := held()
	if n != 1 {
		t.Fatalf("%d records after one charged answer", n)
	}
	t.Logf("300 free answers with new keys: 0 records; one charged answer: 1 record of %d bytes; balance %s", b, api.balance(acct))
}
