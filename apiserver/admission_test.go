package apiserver_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
)

// companyBody is a valid company submission of exactly size bytes: distinct
// domain rows, padded with trailing whitespace.
func companyBody(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"input":[`)
	for i := 0; b.Len() < size-64; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"domain":"company-%d.example"}`, i)
	}
	b.WriteString("]}")
	for b.Len() < size {
		b.WriteByte(' ')
	}
	return b.Bytes()
}

// heldPost is a POST whose body is sent up to a point and then held, so
// the request stays admitted (and decoding) until release.
type heldPost struct {
	pw   *io.PipeWriter
	rest []byte
	done chan bulkdtest.Response
}

// holdPost starts a POST of body to path, writes the first half of the body
// and waits. chunked sends no Content-Length.
func holdPost(t *testing.T, url, key string, body []byte, chunked bool) *heldPost {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, url, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(body))
	if chunked {
		req.ContentLength = -1
	}
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	h := &heldPost{pw: pw, rest: body[len(body)/2:], done: make(chan bulkdtest.Response, 1)}
	go func() {
		res, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
		if err != nil {
			h.done <- bulkdtest.Response{Status: -1, Body: []byte(err.Error())}
			return
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		h.done <- bulkdtest.Response{Status: res.StatusCode, Header: res.Header, Body: b}
	}()
	go func() { _, _ = pw.Write(body[:len(body)/2]) }()
	return h
}

// release sends the rest of the body and returns the answer.
func (h *heldPost) release(t *testing.T) bulkdtest.Response {
	t.Helper()
	go func() { _, _ = h.pw.Write(h.rest); _ = h.pw.Close() }()
	select {
	case r := <-h.done:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("held request did not finish")
		return bulkdtest.Response{}
	}
}

// TestAdmissionBoundsBodiesDecodedAtOnce runs a real bulkd with room for 2
// MiB of bodies being decoded (--max-decoding-bytes) and 1 MiB bodies at
// most, holds bodies half-sent so that they stay admitted, and checks that
// a body beyond the bound gets 503 server_busy with Retry-After (and the
// rate-limit headers) before it is read, that the admitted ones succeed,
// that a chunked body is weighed at its route's limit, and that requests
// without a body are not held up.
func TestAdmissionBoundsBodiesDecodedAtOnce(t *testing.T) {
	const mib = 1 << 20
	env := bulkdtest.Start(t, bulkdtest.NoWorkers(), bulkdtest.WithConfig(func(c *config.Config) {
		c.MaxBodyBytes = mib
		c.MaxDecodingBytes = 2 * mib
		c.RateLimit = 1_000_000
	}))
	_, key := env.Account(credits.Whole(1_000_000))
	inUse := func() int64 { return int64(testutil.ToFloat64(env.Parts.API.Metrics.AdmissionBytes)) }
	waitInUse := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for inUse() != want {
			if time.Now().After(deadline) {
				t.Fatalf("admitted bytes %d, want %d", inUse(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	const bulk = "/v1/company-enrichment/bulk"
	big := companyBody(mib)
	small := companyBody(10 << 10)

	// Fill the bound: one 1 MiB body with its length declared, one chunked
	// body (a few KiB sent) that weighs the route's limit, 1 MiB.
	a := holdPost(t, env.URL+bulk, key, big, false)
	waitInUse(mib)
	b := holdPost(t, env.URL+bulk, key, small, true)
	waitInUse(2 * mib)

	// Full: every body waits its 2 s and is turned away unread; a GET, or
	// a body over the limit (refused from its Content-Length), is not held.
	if r := env.Get("/v1/credits", key); r.Status != 200 {
		t.Fatalf("GET while full: %d %s", r.Status, r.Body)
	}
	start := time.Now()
	over := env.Do(http.MethodPost, bulk, key, companyBody(mib+1))
	checkErrorBody(t, over, 400, "")
	if !strings.Contains(string(over.Body), "larger than the limit of 1048576 bytes") || time.Since(start) > time.Second {
		t.Fatalf("over-limit body: %s after %v", over.Body, time.Since(start))
	}
	var wg sync.WaitGroup
	busy := make([]bulkdtest.Response, 4)
	start = time.Now()
	for i := range busy {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path, body := bulk, small
			switch i {
			case 1:
				body = big
			case 2:
				path, body = "/v1/bulk", []byte(`{"emails":["a@b.example"]}`)
			case 3:
				path, body = "/v1/email-lookup", []byte(`{"first_name":"A","last_name":"B","domain":"c.example"}`)
			}
			busy[i] = env.Do(http.MethodPost, path, key, body)
		}()
	}
	wg.Wait()
	if d := time.Since(start); d < 1900*time.Millisecond || d > 10*time.Second {
		t.Fatalf("turned away after %v; the wait is 2 s", d)
	}
	oc := newOpenAPIChecker(t, &testAPI{t: t, URL: env.URL, client: &http.Client{Timeout: 10 * time.Second}})
	for i, r := range busy {
		checkErrorBody(t, r, 503, "server_busy")
		path := []string{bulk, bulk, "/v1/bulk", "/v1/email-lookup"}[i]
		oc.check(http.MethodPost, env.URL+path, "{}", response{Status: r.Status, Header: r.Header, Body: r.Body})
		if r.Header.Get("Retry-After") != "2" || !hasRateHeaders(r.Header) {
			t.Fatalf("503 %d headers %v", i, r.Header)
		}
	}
	if n := testutil.ToFloat64(env.Parts.API.Metrics.AdmissionRejected); n != 4 {
		t.Fatalf("rejections counted %v, want 4", n)
	}

	// The admitted bodies finish and are accepted; the room is given back.
	for i, h := range []*heldPost{a, b} {
		if r := h.release(t); r.Status != 200 || !strings.Contains(string(r.Body), `"job_id"`) {
			t.Fatalf("admitted body %d: %d %s", i, r.Status, r.Body)
		}
	}
	waitInUse(0)

	// A chunked single lookup weighs its route's limit (16 KiB), not the
	// bulk limit: it fits next to a held 1 MiB body.
	a = holdPost(t, env.URL+bulk, key, big, false)
	waitInUse(mib)
	c := holdPost(t, env.URL+"/v1/email-lookup", key, []byte(`{"first_name":`), true)
	waitInUse(mib + 16<<10)
	if r := c.release(t); r.Status != 400 {
		t.Fatalf("chunked single lookup: %d %s", r.Status, r.Body)
	}
	if r := a.release(t); r.Status != 200 {
		t.Fatalf("admitted body: %d %s", r.Status, r.Body)
	}
	waitInUse(0)
	if r := env.Do(http.MethodPost, bulk, key, big); r.Status != 200 {
		t.Fatalf("after the burst: %d %s", r.Status, r.Body)
	}
}

// checkErrorBody is checkError for a bulkdtest.Response.
func checkErrorBody(t *testing.T, r bulkdtest.Response, status int, code string) {
	t.Helper()
	checkError(t, response{Status: r.Status, Header: r.Header, Body: r.Body}, status, code)
}
