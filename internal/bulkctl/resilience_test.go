package bulkctl_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/bulkctl"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/serve"
)

// serveOn serves h on addr (a loopback address a previous server may have
// just given up).
func serveOn(t *testing.T, addr string, h http.Handler) *http.Server {
	t.Helper()
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// The server goes away while `wait` polls (its HTTP server closed, no
// process listening), and a new bulkd (new components, same Redis, same
// address) comes up and runs the job: wait retries through the outage
// and finishes with the job.
func TestWaitSurvivesServerRestart(t *testing.T) {
	env := bulkdtest.Start(t, bulkdtest.NoWorkers())
	putCompanies(env)
	_, key := env.Account(credits.Whole(100))
	addr := bulkdtest.FreeAddr(t)
	srv1 := serveOn(t, addr, env.Parts.API)
	c := ctl{t: t, url: "http://" + addr, key: key}
	var rows strings.Builder
	rows.WriteString("domain\n")
	for i := range 20 {
		fmt.Fprintf(&rows, "c%02d.example\n", i)
	}
	rows.WriteString("contoso.example\n")
	h := c.must("company", "submit", writeFile(t, "c.csv", rows.String()))

	done := make(chan result, 1)
	go func() { done <- c.run("wait", h, "--interval", "100ms", "--timeout", "60s", "--retry-for", "30s") }()
	time.Sleep(300 * time.Millisecond)
	if err := srv1.Close(); err != nil {
		t.Fatal(err)
	}
	// Down for a while: wait must keep retrying, not give up.
	select {
	case r := <-done:
		t.Fatalf("wait ended while the server was down: %+v", r)
	case <-time.After(1500 * time.Millisecond):
	}
	parts, err := serve.BuildWith(env.Config, env.Redis, slog.New(slog.NewTextHandler(io.Discard, nil)), serve.Options{})
	if err != nil {
		t.Fatal(err)
	}
	serveOn(t, addr, parts.API)
	ctx, cancel := context.WithCancel(context.Background())
	parts.Local.Start(ctx)
	t.Cleanup(func() { cancel(); parts.Local.Wait() })

	var r result
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("wait did not finish after the restart")
	}
	if r.code != 0 || !strings.Contains(r.stderr, "retrying") {
		t.Fatalf("wait: %+v", r)
	}
	var st bulkctl.Combined
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || !st.Finished || st.Processed != 21 {
		t.Fatalf("final status %s (%v)", r.stdout, err)
	}
	out := filepath.Join(t.TempDir(), "r.csv")
	c.must("results", h, "--out", out)
	head, res := readCSV(t, out)
	if got := column(t, head, res, "result"); len(got) != 21 || got[20] != "found" || got[0] != "not_found" {
		t.Fatalf("results %v", got)
	}
}

// fake is a scripted HTTP server: each request to a path gets the next
// answer of its script; requests are recorded with their arrival time.
type fake struct {
	mu      sync.Mutex
	scripts map[string][]answer
	seen    []seenReq
}

type answer struct {
	status int
	header map[string]string
	body   string
}

type seenReq struct {
	method, path, query, idemKey string
	at                           time.Time
	body                         string
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.seen = append(f.seen, seenReq{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Idempotency-Key"), time.Now(), string(b)})
	s := f.scripts[r.Method+" "+r.URL.Path]
	var a answer
	if len(s) > 0 {
		a, f.scripts[r.Method+" "+r.URL.Path] = s[0], s[1:]
	} else {
		a = answer{status: 404, body: `{"detail":"Not found"}`}
	}
	f.mu.Unlock()
	for k, v := range a.header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	_, _ = io.WriteString(w, a.body)
}

// 429 and 503 are retried after their Retry-After, a 500 after a backoff,
// all with the same Idempotency-Key and body; a Retry-After longer than
// --max-retry-after, and a 4xx, end the command (exit 2); a server that
// never answers ends it after --retry-for (exit 3).
func TestRetryAfterAndBackoff(t *testing.T) {
	const job = "0b6f3c2e-5d4a-4c8e-9f1a-2b3c4d5e6f70"
	f := &fake{scripts: map[string][]answer{
		"POST /v1/bulk": {
			{status: 429, header: map[string]string{"Retry-After": "1"}, body: `{"detail":"Rate limit exceeded","code":"rate_limited"}`},
			{status: 503, header: map[string]string{"Retry-After": "1"}, body: `{"detail":"Redis is restarting","code":"temporarily_unavailable"}`},
			{status: 500, body: `{"detail":"Internal server error."}`},
			{status: 409, header: map[string]string{"Retry-After": "1"}, body: `{"detail":"in progress","code":"idempotency_in_progress"}`},
			{status: 200, body: `{"job_id":"` + job + `","status":"submitted","total_emails":2,"estimated_cost":1,"credits_consumed":0.4}`},
			{status: 429, header: map[string]string{"Retry-After": "3600"}, body: `{"detail":"Daily quota","code":"daily_quota_exceeded"}`},
			{status: 403, body: `{"detail":"Insufficient credits: balance is 0, 0.4 required"}`},
		},
	}}
	ts := httptest.NewServer(f)
	defer ts.Close()
	c := ctl{t: t, url: ts.URL, key: "k", stdin: "email\na@b.test\nc@d.test\n"}
	r := c.run("verify", "submit", "-")
	if r.code != 0 || r.stdout != "verify:"+job {
		t.Fatalf("submit: %+v", r)
	}
	if len(f.seen) != 5 {
		t.Fatalf("%d requests, want 5", len(f.seen))
	}
	for i, s := range f.seen {
		if s.idemKey == "" || s.idemKey != f.seen[0].idemKey || s.body != f.seen[0].body {
			t.Errorf("request %d: Idempotency-Key %q body %q (first: %q %q)", i, s.idemKey, s.body, f.seen[0].idemKey, f.seen[0].body)
		}
	}
	for _, i := range []int{1, 2, 4} { // after the 429, the 503 and the 409
		if gap := f.seen[i].at.Sub(f.seen[i-1].at); gap < time.Second {
			t.Errorf("request %d came %s after the one that said Retry-After: 1", i, gap)
		}
	}
	if gap := f.seen[3].at.Sub(f.seen[2].at); gap < 100*time.Millisecond || gap > 2*time.Second {
		t.Errorf("backoff after a 500: %s", gap)
	}
	if !strings.Contains(f.seen[0].body, `"emails":["a@b.test","c@d.test"]`) {
		t.Errorf("body %s", f.seen[0].body)
	}

	start := time.Now()
	if r := c.run("verify", "submit", "-"); r.code != bulkctl.ExitRefused || !strings.Contains(r.stderr, "daily_quota_exceeded") || time.Since(start) > 2*time.Second {
		t.Fatalf("Retry-After 3600: %+v after %s", r, time.Since(start))
	}
	if r := c.run("verify", "submit", "-"); r.code != bulkctl.ExitRefused || !strings.Contains(r.stderr, "Insufficient credits") {
		t.Fatalf("403: %+v", r)
	}
	if len(f.seen) != 7 {
		t.Fatalf("%d requests: a refusal was retried", len(f.seen))
	}

	// Nobody listening: connection refused until --retry-for runs out. The
	// client stops when its next (jittered) wait would pass the budget, so
	// it ends somewhat before 1.5 s, never after.
	dead := ctl{t: t, url: "http://" + bulkdtest.FreeAddr(t), key: "k"}
	start = time.Now()
	r = dead.run("credits", "--retry-for", "1500ms")
	if r.code != bulkctl.ExitFailure || time.Since(start) < 300*time.Millisecond || time.Since(start) > 3*time.Second {
		t.Fatalf("no server: %+v after %s", r, time.Since(start))
	}
	if n := strings.Count(r.stderr, "retrying"); n < 2 {
		t.Fatalf("%d retries logged", n)
	}
}

// A results file cut short (by a crash, mid-row) is continued: the partial
// row is dropped and the download resumes after the last whole row, across
// job boundaries of a split submission, as CSV and as JSON Lines; a second
// run on a complete file writes nothing.
func TestResultsResume(t *testing.T) {
	env := bulkdtest.Start(t)
	putCompanies(env)
	_, key := env.Account(credits.Whole(2000))
	c := ctl{t: t, url: env.URL, key: key}
	var rows strings.Builder
	rows.WriteString("website\n")
	for i := range 1200 {
		if i%100 == 7 {
			rows.WriteString("https://contoso.example/\n")
			continue
		}
		fmt.Fprintf(&rows, "c%04d.example\n", i)
	}
	manifest := filepath.Join(t.TempDir(), "m.json")
	c.must("company", "submit", writeFile(t, "c.csv", rows.String()), "--chunk", "500", "--manifest", manifest, "--wait", "--interval", "50ms")
	dir := t.TempDir()
	for _, ext := range []string{"csv", "jsonl"} {
		full := filepath.Join(dir, "full."+ext)
		c.must("results", manifest, "--out", full, "--page-size", "200")
		want := readAll(t, full)
		if n := strings.Count(want, "\n"); n != 1200+map[string]int{"csv": 1, "jsonl": 0}[ext] {
			t.Fatalf("%s: %d lines", ext, n)
		}
		// Cut in the middle of row 700 (in the second job).
		lines := strings.SplitAfter(want, "\n")
		cut := len(strings.Join(lines[:701], "")) + 10
		for _, size := range []int{cut, cut - 10, 0, 5} {
			part := filepath.Join(dir, fmt.Sprintf("part-%d.%s", size, ext))
			if err := os.WriteFile(part, []byte(want[:size]), 0o644); err != nil {
				t.Fatal(err)
			}
			out := c.run("results", manifest, "--out", part, "--page-size", "200")
			if out.code != 0 {
				t.Fatalf("resume %s at byte %d: %+v", ext, size, out)
			}
			if got := readAll(t, part); got != want {
				t.Fatalf("resumed %s at byte %d differs from the whole download (%d vs %d bytes)", ext, size, len(got), len(want))
			}
		}
		r := c.run("results", manifest, "--out", full)
		if r.code != 0 || !strings.Contains(r.stderr, "0 rows written") || readAll(t, full) != want {
			t.Fatalf("second run on a complete file: %+v", r)
		}
	}
	// A file with more rows than the jobs have is not theirs: refused.
	other := filepath.Join(dir, "other.jsonl")
	if err := os.WriteFile(other, []byte(strings.Repeat("{}\n", 1300)), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := c.run("results", manifest, "--out", other); r.code != bulkctl.ExitUsage {
		t.Fatalf("results into a longer file: %+v", r)
	}
}

// A CSV download that ends early (the server cut the body short after a
// row and a half) is resumed at the next row; the half row is not written.
func TestResultsStreamCutShort(t *testing.T) {
	const job = "5e0c9a41-7b2d-4f3e-8a6c-1d2e3f4a5b6c"
	head := "input,credits_consumed,email,status\n"
	f := &fake{scripts: map[string][]answer{
		"GET /v1/bulk/" + job: {
			{status: 200, body: `{"job_id":"` + job + `","status":"complete","total_emails":3,"total_processed":3}`},
		},
		"GET /v1/bulk/" + job + "/results": {
			{status: 200, body: head + "a@b.test,0.2,a@b.test,deliverable\n\"x@y.test,0.2"},
			{status: 500, body: `{"detail":"Internal server error."}`},
			{status: 200, body: head + "x@y.test,0.2,x@y.test,undeliverable\n\"q,\"\"uoted\"\"@z.test\",0,,unknown\n"},
		},
	}}
	ts := httptest.NewServer(f)
	defer ts.Close()
	c := ctl{t: t, url: ts.URL, key: "k"}
	out := filepath.Join(t.TempDir(), "r.csv")
	r := c.run("results", "verify:"+job, "--out", out)
	if r.code != 0 {
		t.Fatalf("results: %+v", r)
	}
	want := head + "a@b.test,0.2,a@b.test,deliverable\nx@y.test,0.2,x@y.test,undeliverable\n\"q,\"\"uoted\"\"@z.test\",0,,unknown\n"
	if got := readAll(t, out); got != want {
		t.Fatalf("file\n%s\nwant\n%s", got, want)
	}
	var queries []string
	for _, s := range f.seen {
		if strings.HasSuffix(s.path, "/results") {
			queries = append(queries, s.query)
		}
	}
	if strings.Join(queries, " ") != "format=csv&offset=0 format=csv&offset=1 format=csv&offset=1" {
		t.Fatalf("downloads %q", queries)
	}
}

// A job still running: wait --timeout gives up with exit 4, and so do
// results; status says so; once the workers run, results --wait waits
// (with a progress bar on a terminal) and downloads.
func TestNotFinished(t *testing.T) {
	env := bulkdtest.Start(t, bulkdtest.NoWorkers())
	putCompanies(env)
	_, key := env.Account(credits.Whole(100))
	c := ctl{t: t, url: env.URL, key: key}
	h := c.must("company", "submit", writeFile(t, "c.csv", "domain\ncontoso.example\nnorthwind.example\n"))
	start := time.Now()
	if r := c.run("wait", h, "--interval", "100ms", "--timeout", "500ms"); r.code != bulkctl.ExitNotFinished ||
		time.Since(start) > 3*time.Second || !strings.Contains(r.stderr, "not finished after 500ms") {
		t.Fatalf("wait --timeout: %+v", r)
	}
	out := filepath.Join(t.TempDir(), "r.jsonl")
	if r := c.run("results", h, "--out", out); r.code != bulkctl.ExitNotFinished || !strings.Contains(r.stderr, "bulkctl wait") {
		t.Fatalf("results while running: %+v", r)
	}
	var st bulkctl.Combined
	if err := json.Unmarshal([]byte(c.must("status", h)), &st); err != nil || st.Finished || st.Status != "running" || st.Total != 2 {
		t.Fatalf("status %+v %v", st, err)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		env.StartWorkers()
	}()
	c.terminal = true
	r := c.run("results", h, "--out", out, "--wait", "--interval", "100ms")
	if r.code != 0 || !strings.Contains(r.stderr, "100%") || !strings.Contains(r.stderr, "2/2") {
		t.Fatalf("results --wait: %+v", r)
	}
	if got := strings.Count(readAll(t, out), "\n"); got != 2 {
		t.Fatalf("%d rows", got)
	}
	if r := c.run("status", h, "--url", "localhost:8080"); r.code != bulkctl.ExitUsage {
		t.Fatalf("bad --url: %+v", r)
	}
	if r := (ctl{t: t, url: env.URL}).run("credits"); r.code != bulkctl.ExitUsage || !strings.Contains(r.stderr, "BULKD_API_KEY") {
		t.Fatalf("no key: %+v", r)
	}
	if r := c.run("status", "company:0b6f3c2e-5d4a-4c8e-9f1a-2b3c4d5e6f70"); r.code != bulkctl.ExitRefused || !strings.Contains(r.stderr, "Job not found") {
		t.Fatalf("unknown job: %+v", r)
	}
}

// A split submission that runs out of credits at its third part: exit 2,
// the manifest names the two accepted jobs (complete false), and the
// message names the Idempotency-Key prefix; after a top-up, the same
// command with that prefix answers the first two parts again (same jobs,
// no second charge) and submits the third.
func TestPartialSubmissionResumes(t *testing.T) {
	env := bulkdtest.Start(t)
	acct, key := env.Account(credits.Whole(250))
	c := ctl{t: t, url: env.URL, key: key}
	var rows strings.Builder
	rows.WriteString("domain\n")
	for i := range 300 {
		fmt.Fprintf(&rows, "c%03d.example\n", i)
	}
	in := writeFile(t, "c.csv", rows.String())
	manifest := filepath.Join(t.TempDir(), "m.json")
	r := c.run("company", "submit", in, "--chunk", "100", "--manifest", manifest)
	if r.code != bulkctl.ExitRefused || !strings.Contains(r.stderr, "2 of 3 jobs were accepted") {
		t.Fatalf("submit: %+v", r)
	}
	m, err := bulkctl.ReadManifest(manifest)
	if err != nil || m.Complete || len(m.Jobs) != 2 {
		t.Fatalf("manifest %+v %v", m, err)
	}
	if got := env.Balance(acct); got != credits.Whole(50) {
		t.Fatalf("balance %v", got)
	}
	if _, err := env.Parts.API.Billing.Adjust(context.Background(), acct, credits.Whole(100), "top-up"); err != nil {
		t.Fatal(err)
	}
	h := c.must("company", "submit", in, "--chunk", "100", "--manifest", manifest, "--idempotency-key", m.IdempotencyKey)
	hh, err := bulkctl.ParseHandle(h)
	if err != nil || len(hh.Jobs) != 3 || hh.Jobs[0] != m.Jobs[0].JobID || hh.Jobs[1] != m.Jobs[1].JobID {
		t.Fatalf("handle %s (first run %s)", h, m.Handle)
	}
	c.must("company", "submit", in, "--chunk", "100", "--manifest", manifest, "--idempotency-key", m.IdempotencyKey, "--quiet")
	if got := env.Balance(acct); got != credits.Whole(50) {
		t.Fatalf("balance %v after the resumed submission, want 50 (only the third part charged)", got)
	}
	if m2, _ := bulkctl.ReadManifest(manifest); !m2.Complete || m2.Handle != h {
		t.Fatalf("manifest after resuming %+v", m2)
	}
}

// A bare job id: its family is found by asking. An answer that tells the
// key's plan narrows the search: an unlimited-plan key (403 wrong_key_plan
// from a pay-as-you-go family) is asked the unlimited family next and
// nothing else, and a pay-as-you-go key (404 Job not found) never the
// unlimited one; the status read while looking is not asked again.
func TestBareJobIDFamily(t *testing.T) {
	const job = "9a41c2d3-1e2f-4a5b-8c6d-7e8f9a0b1c2d"
	f := &fake{scripts: map[string][]answer{
		"GET /v1/company-enrichment/bulk/" + job: {{status: 403, body: `{"detail":"This endpoint needs a pay-as-you-go key","code":"wrong_key_plan"}`}},
		"GET /v1/unlimited/bulk-lookup/" + job: {{status: 200,
			body: `{"job_id":"` + job + `","status":"completed","total_rows":1,"total_processed":1}`}},
	}}
	ts := httptest.NewServer(f)
	defer ts.Close()
	c := ctl{t: t, url: ts.URL, key: "k"}
	paths := func() []string {
		f.mu.Lock()
		defer f.mu.Unlock()
		var out []string
		for _, s := range f.seen {
			out = append(out, s.path)
		}
		f.seen = nil
		return out
	}
	r := c.run("status", job)
	var st bulkctl.Combined
	if err := json.Unmarshal([]byte(r.stdout), &st); r.code != 0 || err != nil || st.Handle != "unlimited-lookup:"+job || !st.Finished || st.Total != 1 {
		t.Fatalf("status by id with an unlimited key: %+v (%v)", r, err)
	}
	if got, want := strings.Join(paths(), " "), "/v1/company-enrichment/bulk/"+job+" /v1/unlimited/bulk-lookup/"+job; got != want {
		t.Fatalf("asked %s, want %s", got, want)
	}

	// A pay-as-you-go key and a job of none of its families: the unlimited
	// family is not asked.
	f.mu.Lock()
	f.scripts["GET /v1/company-enrichment/bulk/"+job] = []answer{{status: 404, body: `{"detail":"Job not found"}`}}
	f.mu.Unlock()
	r = c.run("status", job)
	if r.code != bulkctl.ExitRefused || !strings.Contains(r.stderr, "not found under any family") {
		t.Fatalf("unknown id: %+v", r)
	}
	if got, want := strings.Join(paths(), " "), "/v1/company-enrichment/bulk/"+job+" /v1/bulk/"+job+" /v1/bulk-lookup/"+job; got != want {
		t.Fatalf("asked %s, want %s", got, want)
	}

	// A 404 of a path the server does not route (a family turned off)
	// says nothing of the key: every family is asked.
	r = c.run("status", job)
	if r.code != bulkctl.ExitRefused {
		t.Fatalf("unknown id: %+v", r)
	}
	if got := len(paths()); got != len(bulkctl.Families) {
		t.Fatalf("asked %d families, want all %d", got, len(bulkctl.Families))
	}
}
