package e2e

// Harness for the company enrichment end-to-end tests: a client that talks
// to a standalone bulkd over HTTP and validates every response it receives
// (and the request of every 200) against the served /openapi.json, typed
// views of the company answers, and a forward proxy that stands in for the
// websites the redirect checks visit.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/test/companyapi"
)

const (
	coBulkPath   = "/v1/company-enrichment/bulk"
	coSinglePath = "/v1/company-enrichment"
)

// companyAPI is one running bulkd seen from a client.
type companyAPI struct {
	*bulkdtest.Env
	router routers.Router
	client *http.Client
}

// companyStart runs a standalone bulkd for t. The rate limit is lifted (these
// tests poll and page a lot; rate limiting has its own tests) and every
// response is checked against the OpenAPI document the server publishes.
func companyStart(t *testing.T, opts ...bulkdtest.Option) *companyAPI {
	t.Helper()
	opts = append([]bulkdtest.Option{bulkdtest.WithConfig(func(c *config.Config) { c.RateLimit = 1_000_000 })}, opts...)
	env := bulkdtest.Start(t, opts...)
	a := &companyAPI{Env: env, client: &http.Client{Timeout: 60 * time.Second}}
	r := a.send(t, http.MethodGet, "/openapi.json", "", nil)
	if r.Status != http.StatusOK {
		t.Fatalf("GET /openapi.json: %d %s", r.Status, r.Body)
	}
	doc, err := openapi3.NewLoader().LoadFromData(r.Body)
	if err != nil {
		t.Fatalf("load /openapi.json: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("/openapi.json is not a valid OpenAPI document: %v", err)
	}
	doc.Servers = openapi3.Servers{{URL: env.URL}}
	if a.router, err = legacy.NewRouter(doc); err != nil {
		t.Fatal(err)
	}
	return a
}

// send is one HTTP exchange without any checking.
func (a *companyAPI) send(t testing.TB, method, path, key string, body []byte) bulkdtest.Response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, a.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := a.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return bulkdtest.Response{Status: res.StatusCode, Header: res.Header, Body: b}
}

// do is one HTTP exchange whose response must match the OpenAPI document:
// the route and status must be documented and the body must validate.
// On a 200 the request must validate too, so the document accepts what
// the server accepts.
func (a *companyAPI) do(t testing.TB, method, path, key string, body []byte) bulkdtest.Response {
	t.Helper()
	r := a.send(t, method, path, key, body)
	a.check(t, method, path, key, body, r)
	return r
}

func (a *companyAPI) check(t testing.TB, method, path, key string, body []byte, r bulkdtest.Response) {
	t.Helper()
	req, _ := http.NewRequest(method, a.URL+path, bytes.NewReader(body))
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	route, params, err := a.router.FindRoute(req)
	if err != nil {
		t.Fatalf("%s %s is not in the OpenAPI document: %v", method, path, err)
	}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, MultiError: true}
	reqIn := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	if r.Status == http.StatusOK && len(body) < 1<<20 { // big bodies: shape checked by the small ones
		if err := openapi3filter.ValidateRequest(context.Background(), reqIn); err != nil {
			t.Fatalf("%s %s was accepted (200) but the OpenAPI document rejects the request: %v\nbody: %.500s", method, path, err, body)
		}
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: reqIn,
		Status:                 r.Status,
		Header:                 r.Header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	in.SetBodyBytes(r.Body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Fatalf("%s %s -> %d does not match the OpenAPI document: %v\nbody: %.2000s", method, path, r.Status, err, r.Body)
	}
	// SPEC 4 and 8: every answer to a known key carries the rate-limit
	// headers (the wire spelling is apiserver's TestHeaderSpelling).
	if key != "" && r.Status != http.StatusUnauthorized {
		for _, h := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
			if len(r.Header.Values(h)) != 1 {
				t.Fatalf("%s %s -> %d: header %s missing (headers %v)", method, path, r.Status, h, r.Header)
			}
		}
	}
}

func (a *companyAPI) get(t testing.TB, path, key string) bulkdtest.Response {
	t.Helper()
	return a.do(t, http.MethodGet, path, key, nil)
}

func (a *companyAPI) post(t testing.TB, path, key string, v any) bulkdtest.Response {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return a.do(t, http.MethodPost, path, key, b)
}

// The wire types of the submission and status answers are shared with the
// other whole-system suites.
type (
	coIn         = companyapi.Row
	coSubmission = companyapi.Submitted
	coStatus     = companyapi.JobStatus
)

var (
	coURL    = companyapi.NetworkURL
	coDomain = companyapi.Domain
)

// submit posts rows and requires a 200.
func (a *companyAPI) submit(t testing.TB, key string, rows []coIn) coSubmission {
	t.Helper()
	r := a.post(t, coBulkPath, key, map[string]any{"input": rows})
	if r.Status != http.StatusOK {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	var s coSubmission
	coDecode(t, r.Body, &s)
	if s.Status != "submitted" || s.TotalRows != int64(len(rows)) {
		t.Fatalf("submission %+v for %d rows", s, len(rows))
	}
	return s
}

func (a *companyAPI) status(t testing.TB, key, id string) coStatus {
	t.Helper()
	r := a.get(t, coBulkPath+"/"+id, key)
	if r.Status != http.StatusOK {
		t.Fatalf("status of %s: %d %s", id, r.Status, r.Body)
	}
	var st coStatus
	coDecode(t, r.Body, &st)
	if st.JobID != id {
		t.Fatalf("status of %s says job_id %s", id, st.JobID)
	}
	coCheckStatus(t, st)
	return st
}

// coCheckStatus holds for every status answer: the summary buckets
// partition the rows, and completed_at is set exactly when completed, with
// every row processed. (Every row processed and still running is the
// moment a job settles: its last answer is in and its refund, when it has
// one, is being paid; internal/jobs settle.)
func coCheckStatus(t testing.TB, st coStatus) {
	t.Helper()
	s := st.Summary
	if sum := s["total_found"] + s["total_not_found"] + s["total_error"] + s["total_invalid_url"] + s["total_pending"]; sum != st.TotalRows {
		t.Fatalf("summary buckets add up to %d, total_rows is %d: %+v", sum, st.TotalRows, st)
	}
	if s["total_pending"] != st.TotalRows-st.TotalProcessed || s["total_invalid_url"] != st.TotalInvalid {
		t.Fatalf("summary disagrees with the totals: %+v", st)
	}
	if (st.Status == "completed") != (st.CompletedAt != nil) || (st.Status == "completed" && st.TotalProcessed != st.TotalRows) {
		t.Fatalf("status %q with completed_at %v and %d of %d rows processed", st.Status, st.CompletedAt, st.TotalProcessed, st.TotalRows)
	}
}

// wait polls the status until the job is completed.
func (a *companyAPI) wait(t testing.TB, key, id string) coStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := a.status(t, key, id)
		if st.Status == "completed" {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s not completed after 30s: %+v", id, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// coRow is one company result row: the typed fields the tests look at, and
// the whole row as decoded JSON for exact comparisons.
type coRow struct {
	Result          string   `json:"result"`
	Input           *string  `json:"input"`
	InputURL        *string  `json:"input_url"`
	IsRedirect      bool     `json:"is_redirect"`
	RedirectedTo    *string  `json:"redirected_to"`
	CreditsConsumed float64  `json:"credits_consumed"`
	Reason          *string  `json:"reason"`
	NetworkURL      *string  `json:"network_url"`
	NetworkID       *int64   `json:"network_id"`
	Name            *string  `json:"name"`
	Domain          *string  `json:"domain"`
	Specialties     []string `json:"specialties"`
	Similar         []any    `json:"similar_companies"`

	raw map[string]any
}

func (r *coRow) UnmarshalJSON(b []byte) error {
	type plain coRow
	if err := json.Unmarshal(b, (*plain)(r)); err != nil {
		return err
	}
	return json.Unmarshal(b, &r.raw)
}

// data is the row without the fields that depend on the submitted row
// (SPEC 2.5 rule 2: a duplicate carries the first row's result and data).
func (r coRow) data() map[string]any {
	m := map[string]any{}
	for k, v := range r.raw {
		switch k {
		case "input", "input_url", "credits_consumed":
		default:
			m[k] = v
		}
	}
	return m
}

func (r coRow) String() string {
	m := map[string]any{}
	for k, v := range r.raw {
		if s, ok := v.(string); ok && len(s) > 80 {
			v = s[:60] + fmt.Sprintf("...(%d bytes)", len(s))
		}
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// coDataFields are the data fields of SPEC 2.4, all null or empty unless the
// coRow is found.
var coDataFields = []string{"network_url", "network_id", "name", "description", "website", "domain", "email_domain",
	"industry", "company_size", "employee_count", "company_type", "headquarters", "founded_year", "specialties",
	"follower_count", "similar_companies"}

// coCheckEmptyData asserts every data field is null (arrays empty), except
// network_url when keepURL is set.
func coCheckEmptyData(t testing.TB, r coRow, keepURL bool) {
	t.Helper()
	for _, f := range coDataFields {
		v, ok := r.raw[f]
		if !ok {
			t.Fatalf("row lacks %s: %s", f, r)
		}
		switch {
		case f == "network_url" && keepURL:
			if v == nil {
				t.Fatalf("network_url is null: %s", r)
			}
		case f == "specialties" || f == "similar_companies":
			if l, ok := v.([]any); !ok || len(l) != 0 {
				t.Fatalf("%s is %v, want []: %s", f, v, r)
			}
		case v != nil:
			t.Fatalf("%s is %v, want null: %s", f, v, r)
		}
	}
}

type coPage struct {
	JobID          string  `json:"job_id"`
	TotalRows      int64   `json:"total_rows"`
	TotalProcessed int64   `json:"total_processed"`
	Limit          int     `json:"limit"`
	Offset         int     `json:"offset"`
	Results        []coRow `json:"results"`
}

// page reads one results page; query is "" or "limit=..&offset=..".
func (a *companyAPI) page(t testing.TB, key, id, query string) coPage {
	t.Helper()
	path := coBulkPath + "/" + id + "/results"
	if query != "" {
		path += "?" + query
	}
	r := a.get(t, path, key)
	if r.Status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, r.Status, r.Body)
	}
	var p coPage
	coDecode(t, r.Body, &p)
	if p.JobID != id {
		t.Fatalf("page of job %s says job_id %s", id, p.JobID)
	}
	return p
}

// results reads every row of a job, pageSize rows at a time, raising offset
// by limit until it reaches total_rows (SPEC 4.1).
func (a *companyAPI) results(t testing.TB, key, id string, pageSize int) []coRow {
	t.Helper()
	var all []coRow
	for offset := 0; ; offset += pageSize {
		p := a.page(t, key, id, fmt.Sprintf("limit=%d&offset=%d", pageSize, offset))
		if p.Limit != pageSize || p.Offset != offset {
			t.Fatalf("page asked limit %d offset %d, says %d %d", pageSize, offset, p.Limit, p.Offset)
		}
		if want := min(pageSize, max(int(p.TotalRows)-offset, 0)); len(p.Results) != want {
			t.Fatalf("page at %d of %d rows (limit %d) has %d rows, want %d", offset, p.TotalRows, pageSize, len(p.Results), want)
		}
		all = append(all, p.Results...)
		if offset+pageSize >= int(p.TotalRows) {
			return all
		}
	}
}

// coCreditsSum adds up credits_consumed over rows.
func coCreditsSum(rows []coRow) float64 {
	s := 0.0
	for _, r := range rows {
		s += r.CreditsConsumed
	}
	return s
}

// coError is a SPEC 2.10 error body.
type coError struct {
	Detail string `json:"detail"`
	Code   string `json:"code"`
	Errors []struct {
		Loc  string `json:"loc"`
		Msg  string `json:"msg"`
		Type string `json:"type"`
	} `json:"errors"`
}

// coWantError asserts status and the SPEC 2.10 shape (errors only on 422,
// and a single problem's message as detail) and returns the body.
func coWantError(t testing.TB, r bulkdtest.Response, status int) coError {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	var e coError
	coDecode(t, r.Body, &e)
	if e.Detail == "" {
		t.Fatalf("error without detail: %s", r.Body)
	}
	if (len(e.Errors) > 0) != (status == http.StatusUnprocessableEntity) {
		t.Fatalf("errors[] on a %d: %s", status, r.Body)
	}
	if len(e.Errors) == 1 && e.Detail != e.Errors[0].Msg {
		t.Fatalf("single-problem 422 detail %q differs from its item %q", e.Detail, e.Errors[0].Msg)
	}
	return e
}

// coWantValidation asserts a 422 with exactly one problem at loc of type typ.
func coWantValidation(t testing.TB, r bulkdtest.Response, loc, typ string) coError {
	t.Helper()
	e := coWantError(t, r, http.StatusUnprocessableEntity)
	if len(e.Errors) != 1 || e.Errors[0].Loc != loc || e.Errors[0].Type != typ {
		t.Fatalf("want one problem at %s of type %s, got %s", loc, typ, r.Body)
	}
	return e
}

func coDecode(t testing.TB, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %.500s: %v", b, err)
	}
}

func coWantBalance(t testing.TB, a *companyAPI, acct string, want credits.Amount) {
	t.Helper()
	if got := a.Balance(acct); got != want {
		t.Fatalf("balance %s, want %s", got, want)
	}
}

func coSameJSON(a, b any) bool { return reflect.DeepEqual(a, b) }

// coWebsites is a forward HTTP proxy on loopback standing in for every
// website the redirect checks visit (bulkd reaches it through
// --http-proxy, so requests arrive in absolute form and r.Host names the
// site). Sites not listed answer 200. CONNECT is refused, so an https hop
// fails the way an unreachable site does.
type coWebsites struct {
	srv *httptest.Server

	mu        sync.Mutex
	redirects map[string]string  // host -> Location of a 301
	holds     map[string]*coHold // host -> held until released
	hits      map[string]int
}

type coHold struct {
	arrived     chan struct{} // closed when the first request comes in
	release     chan struct{} // closed by the test
	arriveOnce  sync.Once
	releaseOnce sync.Once
}

func (h *coHold) Release() { h.releaseOnce.Do(func() { close(h.release) }) }

func coStartWebsites(t *testing.T) *coWebsites {
	t.Helper()
	w := &coWebsites{redirects: map[string]string{}, holds: map[string]*coHold{}, hits: map[string]int{}}
	w.srv = httptest.NewServer(http.HandlerFunc(w.serve))
	t.Cleanup(w.srv.Close)
	t.Cleanup(func() { // before srv.Close (LIFO): let held handlers return
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, h := range w.holds {
			h.Release()
		}
	})
	return w
}

// redirect makes http://host/ answer 301 to location.
func (w *coWebsites) redirect(host, location string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.redirects[host] = location
}

// hold makes requests to host wait until the returned hold is released.
func (w *coWebsites) hold(host string) *coHold {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := &coHold{arrived: make(chan struct{}), release: make(chan struct{})}
	w.holds[host] = h
	return h
}

func (w *coWebsites) hitsOf(host string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.hits[host]
}

func (w *coWebsites) serve(rw http.ResponseWriter, r *http.Request) {
	w.mu.Lock()
	w.hits[r.Host]++
	loc, isRedirect := w.redirects[r.Host]
	h := w.holds[r.Host]
	w.mu.Unlock()
	if r.Method == http.MethodConnect {
		http.Error(rw, "no TLS sites here", http.StatusBadGateway)
		return
	}
	if !r.URL.IsAbs() {
		http.Error(rw, "not a proxy request", http.StatusBadRequest)
		return
	}
	if h != nil {
		h.arriveOnce.Do(func() { close(h.arrived) })
		select {
		case <-h.release:
		case <-r.Context().Done():
			return
		}
	}
	if isRedirect {
		rw.Header().Set("Location", loc)
		rw.WriteHeader(http.StatusMovedPermanently)
		return
	}
	rw.Header().Set("Content-Type", "text/html")
	_, _ = io.WriteString(rw, "<p>"+strings.ToUpper(r.Host)+"</p>")
}

// coWithWebsites turns redirect checks on and routes them through w.
func coWithWebsites(w *coWebsites) bulkdtest.Option {
	return bulkdtest.WithConfig(func(c *config.Config) {
		c.RedirectChecks = true
		c.HTTPProxy = w.srv.URL
	})
}
