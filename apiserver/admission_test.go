package apiserver_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
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

// holdPost starts a POST of body to path, writes its first sent bytes and
// waits. chunked sends no Content-Length.
func holdPost(t *testing.T, url, key string, body []byte, sent int, chunked bool) *heldPost {
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
	h := &heldPost{pw: pw, rest: body[sent:], done: make(chan bulkdtest.Response, 1)}
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
	go func() { _, _ = pw.Write(body[:sent]) }()
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

// admittedBytes polls bulkd_admission_bytes until it is want.
func admittedBytes(t *testing.T, env *bulkdtest.Env, want int64) {
	t.Helper()
	inUse := func() int64 { return int64(testutil.ToFloat64(env.Parts.API.Metrics.AdmissionBytes)) }
	deadline := time.Now().Add(10 * time.Second)
	for inUse() != want {
		if time.Now().After(deadline) {
			t.Fatalf("admitted bytes %d, want %d", inUse(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAdmissionBoundsBodiesDecodedAtOnce runs a real bulkd with room for 2
// MiB of bodies being decoded (--max-decoding-bytes), 1 MiB bodies at most
// and so a 1 MiB share per account, fills the bound with two accounts'
// bodies sent all but their last bytes (one of them chunked: bytes are
// weighed as they arrive, whatever was declared), and checks that a third
// account's bodies get 503 server_busy with Retry-After (and the
// rate-limit headers) after the 2 s wait, that a full account's next body
// gets 429 account_busy, that the held ones succeed, and that requests
// without a body are not held up.
func TestAdmissionBoundsBodiesDecodedAtOnce(t *testing.T) {
	const mib = 1 << 20
	env := bulkdtest.Start(t, bulkdtest.NoWorkers(), bulkdtest.WithConfig(func(c *config.Config) {
		c.MaxBodyBytes = mib
		c.MaxDecodingBytes = 2 * mib
		c.RateLimit = 1_000_000
		c.BodyGrace = time.Minute // the held bodies pause on purpose
	}))
	_, keyA := env.Account(credits.Whole(1_000_000))
	_, keyB := env.Account(credits.Whole(1_000_000))
	_, keyC := env.Account(credits.Whole(1_000_000))
	const bulk = "/v1/company-enrichment/bulk"
	big := companyBody(mib)
	small := companyBody(10 << 10)
	const unsent = 8 // companyBody ends in padding spaces: the JSON is all there

	// Fill the bound: A's body with its length declared and B's chunked,
	// each sent but for its last 8 bytes.
	a := holdPost(t, env.URL+bulk, keyA, big, mib-unsent, false)
	admittedBytes(t, env, mib-unsent)
	b := holdPost(t, env.URL+bulk, keyB, big, mib-unsent, true)
	admittedBytes(t, env, 2*(mib-unsent))

	// Full: every body of a third account waits its 2 s and is turned away;
	// a GET, or a body over the limit (refused from its Content-Length),
	// is not held.
	if r := env.Get("/v1/credits", keyC); r.Status != 200 {
		t.Fatalf("GET while full: %d %s", r.Status, r.Body)
	}
	start := time.Now()
	over := env.Do(http.MethodPost, bulk, keyC, companyBody(mib+1))
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
				// Larger than the 16 bytes left, as every body here.
				path, body = "/v1/bulk", []byte(`{"emails":["someone@b.example","other@b.example"]}`)
			case 3:
				path, body = "/v1/email-lookup", []byte(`{"first_name":"A","last_name":"B","domain":"c.example"}`)
			}
			busy[i] = env.Do(http.MethodPost, path, keyC, body)
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
	// A's share is full: its next body is its own problem, 429.
	r := env.Do(http.MethodPost, bulk, keyA, small)
	checkErrorBody(t, r, 429, "account_busy")
	oc.check(http.MethodPost, env.URL+bulk, "{}", response{Status: r.Status, Header: r.Header, Body: r.Body})
	if r.Header.Get("Retry-After") != "2" || !hasRateHeaders(r.Header) {
		t.Fatalf("429 headers %v", r.Header)
	}

	// The admitted bodies finish and are accepted; the room is given back.
	for i, h := range []*heldPost{a, b} {
		if r := h.release(t); r.Status != 200 || !strings.Contains(string(r.Body), `"job_id"`) {
			t.Fatalf("admitted body %d: %d %s", i, r.Status, r.Body)
		}
	}
	admittedBytes(t, env, 0)

	// A chunked single lookup holds what it sent, not its route's limit.
	a = holdPost(t, env.URL+bulk, keyA, big, mib-unsent, false)
	admittedBytes(t, env, mib-unsent)
	c := holdPost(t, env.URL+"/v1/email-lookup", keyB, []byte(`{"first_name":`), len(`{"first_name":`), true)
	admittedBytes(t, env, mib-unsent+int64(len(`{"first_name":`)))
	if r := c.release(t); r.Status != 400 {
		t.Fatalf("chunked single lookup: %d %s", r.Status, r.Body)
	}
	if r := a.release(t); r.Status != 200 {
		t.Fatalf("admitted body: %d %s", r.Status, r.Body)
	}
	admittedBytes(t, env, 0)
	if r := env.Do(http.MethodPost, bulk, keyC, big); r.Status != 200 {
		t.Fatalf("after the burst: %d %s", r.Status, r.Body)
	}
}

// rawUpload is a POST written on a bare connection, so that a test sends
// exactly the bytes it means to and then nothing (a stalled upload).
type rawUpload struct {
	conn net.Conn
	br   *bufio.Reader
}

// startUpload sends the headers of a POST to path declaring declared bytes
// of body, and first.
func startUpload(t *testing.T, env *bulkdtest.Env, path, key string, declared int, first []byte) *rawUpload {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(env.URL, "http://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	u := &rawUpload{conn: conn, br: bufio.NewReader(conn)}
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: bulkd\r\nX-API-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		path, key, declared)
	u.send(t, append([]byte(head), first...))
	return u
}

func (u *rawUpload) send(t *testing.T, b []byte) {
	t.Helper()
	_ = u.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := u.conn.Write(b); err != nil {
		t.Fatalf("upload write: %v", err)
	}
}

// answer reads the upload's answer, waiting at most d; closing is whether
// it said Connection: close.
func (u *rawUpload) answer(t *testing.T, d time.Duration) (r bulkdtest.Response, closing bool) {
	t.Helper()
	_ = u.conn.SetReadDeadline(time.Now().Add(d))
	res, err := http.ReadResponse(u.br, nil)
	if err != nil {
		t.Fatalf("no answer to the upload within %v: %v", d, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return bulkdtest.Response{Status: res.StatusCode, Header: res.Header, Body: b}, res.Close
}

// TestStalledUploadsOfOneAccountDoNotTurnOthersAway is issue 18's item 2:
// one account opens many large uploads, paced under its rate limit, that
// send their headers and a few bytes and then stall. Before, each reserved
// its declared Content-Length, so two of them filled the bound and another
// account's 45-byte submission waited 2 s and got 503 server_busy. Now
// they hold only what they sent: the other account's small submissions and
// a fast large one are accepted at once, and the stalled uploads are
// answered 408 once the grace has passed, giving everything back.
func TestStalledUploadsOfOneAccountDoNotTurnOthersAway(t *testing.T) {
	const mib = 1 << 20
	const grace = 1500 * time.Millisecond
	env := bulkdtest.Start(t, bulkdtest.NoWorkers(), bulkdtest.WithConfig(func(c *config.Config) {
		c.MaxBodyBytes = mib
		c.MaxDecodingBytes = 2 * mib
		c.BodyGrace = grace // the default rate (64 KiB/s), a short grace
	}))
	_, keyA := env.Account(credits.Whole(1_000_000))
	_, keyB := env.Account(credits.Whole(1_000_000))
	const bulk = "/v1/company-enrichment/bulk"

	// A: 40 uploads declaring the largest body, 16 a second (A's key may
	// make 20), each sending its headers and its first row, then nothing.
	var ups []*rawUpload
	started := make([]time.Time, 0, 40)
	for range 40 {
		ups = append(ups, startUpload(t, env, bulk, keyA, mib, []byte(`{"input":[{"domain":"a.example"},`)))
		started = append(started, time.Now())
		time.Sleep(60 * time.Millisecond)
	}

	// B, while the last of them stall: 45-byte submissions and a fast
	// 1 MiB one, none made to wait for room.
	small := []byte(`{"input":[{"domain":"small-b.example"}]}     `)
	if len(small) != 45 {
		t.Fatalf("small body is %d bytes", len(small))
	}
	for i, body := range [][]byte{small, small, companyBody(mib), small} {
		start := time.Now()
		r := env.Do(http.MethodPost, bulk, keyB, body)
		// Never the 2 s wait for room: a small body at once, the large
		// one in the time its decode takes on a busy machine.
		if d := time.Since(start); r.Status != 200 || d > max(time.Second, time.Duration(len(body))*5*time.Microsecond) {
			t.Fatalf("B's submission %d (%d bytes) while A's uploads stall: %d after %v: %s", i, len(body), r.Status, d, r.Body)
		}
	}

	// A's stalled uploads are dropped after the grace: 408, connection
	// closed. Only one at a time may hold A's 1 MiB share (each may need all
	// of it); the others wait their 2 s and get 429 account_busy: A's own.
	ended := map[int]int{}
	for i, u := range ups {
		r, closing := u.answer(t, time.Until(started[i].Add(grace+5*time.Second)))
		ended[r.Status]++
		switch r.Status {
		case 408:
			checkErrorBody(t, r, 408, "")
			if !closing {
				t.Fatalf("408 without Connection: close: %v", r.Header)
			}
		default:
			checkErrorBody(t, r, 429, "account_busy")
		}
	}
	if ended[408] < 2 || ended[408]+ended[429] != 40 {
		t.Fatalf("A's uploads ended %v", ended)
	}
	if n := testutil.ToFloat64(env.Parts.API.Metrics.SlowBodies); n != float64(ended[408]) {
		t.Fatalf("slow bodies counted %v, want %d", n, ended[408])
	}
	t.Logf("A's 40 stalled uploads ended %v", ended)
	admittedBytes(t, env, 0)
}

// TestSlowBodyIsDropped checks the arrival rate rule: a body that trickles
// below --body-min-rate, and one sent fast that then stops, are answered
// 408 about a grace after they slow down, and their connection closed;
// a body that takes longer than the grace at a healthy rate is accepted.
func TestSlowBodyIsDropped(t *testing.T) {
	const mib = 1 << 20
	const grace = time.Second
	env := bulkdtest.Start(t, bulkdtest.NoWorkers(), bulkdtest.WithConfig(func(c *config.Config) {
		c.MaxBodyBytes = mib
		c.BodyGrace = grace
		c.BodyMinRate = 64 << 10
		c.RateLimit = 1_000_000
	}))
	_, key := env.Account(credits.Whole(1_000_000))
	const bulk = "/v1/company-enrichment/bulk"
	body := companyBody(mib)

	// A slow-loris body: 100 bytes every 200 ms, 500 bytes/s.
	start := time.Now()
	loris := startUpload(t, env, bulk, key, len(body), body[:100])
	stop := make(chan struct{})
	trickled := make(chan struct{})
	go func() {
		defer close(trickled)
		for off := 100; off+100 <= len(body); off += 100 {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			_ = loris.conn.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := loris.conn.Write(body[off : off+100]); err != nil {
				return // dropped
			}
		}
	}()
	r, closing := loris.answer(t, 10*time.Second)
	close(stop)
	<-trickled
	took := time.Since(start)
	checkErrorBody(t, r, 408, "")
	if took < grace-100*time.Millisecond || took > grace+3*time.Second {
		t.Fatalf("slow-loris body dropped after %v; grace %v", took, grace)
	}
	if !strings.Contains(string(r.Body), "arrived too slowly") || !closing {
		t.Fatalf("408 detail: %s, Connection: close %v", r.Body, closing)
	}
	// Its connection is closed: no second request on it.
	_ = loris.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := loris.br.ReadByte(); err == nil {
		t.Fatal("the dropped body's connection is still open")
	}

	// Sent fast, then stopped: what it sent earns it no more than the grace.
	start = time.Now()
	burst := startUpload(t, env, bulk, key, len(body), body[:256<<10])
	r, _ = burst.answer(t, 10*time.Second)
	checkErrorBody(t, r, 408, "")
	if took := time.Since(start); took < grace-100*time.Millisecond || took > grace+3*time.Second {
		t.Fatalf("stopped body dropped after %v; grace %v", took, grace)
	}

	// 1 MiB in 32 KiB pieces every 50 ms (640 KiB/s): longer than the
	// grace, well above the least rate.
	start = time.Now()
	steady := startUpload(t, env, bulk, key, len(body), nil)
	for off := 0; off < len(body); off += 32 << 10 {
		steady.send(t, body[off:min(off+32<<10, len(body))])
		time.Sleep(50 * time.Millisecond)
	}
	r, _ = steady.answer(t, 20*time.Second)
	if r.Status != 200 || time.Since(start) < grace {
		t.Fatalf("steady body: %d after %v: %s", r.Status, time.Since(start), r.Body)
	}
	if n := testutil.ToFloat64(env.Parts.API.Metrics.SlowBodies); n != 2 {
		t.Fatalf("slow bodies counted %v, want 2", n)
	}
	admittedBytes(t, env, 0)
}

// TestAccountShareBoundsOneAccount: one account's bodies being received
// take at most its share (--max-decoding-bytes-per-account); past it the
// account's next body gets 429 account_busy after the 2 s wait, while
// another account is served at once from the rest of the budget.
func TestAccountShareBoundsOneAccount(t *testing.T) {
	const kib = 1 << 10
	env := bulkdtest.Start(t, bulkdtest.NoWorkers(), bulkdtest.WithConfig(func(c *config.Config) {
		c.MaxBodyBytes = 512 * kib
		c.MaxDecodingBytes = 4096 * kib
		c.MaxDecodingBytesPerAccount = 1024 * kib
		c.BodyGrace = time.Minute // the held bodies pause on purpose
		c.RateLimit = 1_000_000
	}))
	_, keyA := env.Account(credits.Whole(1_000_000))
	_, keyB := env.Account(credits.Whole(1_000_000))
	const bulk = "/v1/company-enrichment/bulk"
	body := companyBody(512 * kib)
	const unsent = 8

	a1 := holdPost(t, env.URL+bulk, keyA, body, len(body)-unsent, false)
	a2 := holdPost(t, env.URL+bulk, keyA, body, len(body)-unsent, false)
	admittedBytes(t, env, 2*int64(len(body)-unsent))

	start := time.Now()
	r := env.Do(http.MethodPost, bulk, keyA, companyBody(10*kib))
	checkErrorBody(t, r, 429, "account_busy")
	if d := time.Since(start); d < 1900*time.Millisecond || r.Header.Get("Retry-After") != "2" || !hasRateHeaders(r.Header) {
		t.Fatalf("429 after %v, headers %v", d, r.Header)
	}
	if !strings.Contains(string(r.Body), "at most 1048576 bytes") {
		t.Fatalf("429 detail does not name the share: %s", r.Body)
	}
	start = time.Now()
	if r := env.Do(http.MethodPost, bulk, keyB, companyBody(10*kib)); r.Status != 200 || time.Since(start) > time.Second {
		t.Fatalf("B while A's share is full: %d after %v: %s", r.Status, time.Since(start), r.Body)
	}
	if n := testutil.ToFloat64(env.Parts.API.Metrics.AdmissionAccountRejected); n != 1 {
		t.Fatalf("account rejections counted %v, want 1", n)
	}
	for i, h := range []*heldPost{a1, a2} {
		if r := h.release(t); r.Status != 200 {
			t.Fatalf("A's held body %d: %d %s", i, r.Status, r.Body)
		}
	}
	admittedBytes(t, env, 0)
}

// checkErrorBody is checkError for a bulkdtest.Response.
func checkErrorBody(t *testing.T, r bulkdtest.Response, status int, code string) {
	t.Helper()
	checkError(t, response{Status: r.Status, Header: r.Header, Body: r.Body}, status, code)
}

// pacedPost POSTs body in 64 KiB pieces, one every pause, and returns the
// answer: a client at full speed that is still in the middle of its body
// while the others are in the middle of theirs.
func pacedPost(t *testing.T, url, key string, body []byte, pause time.Duration) bulkdtest.Response {
	pr, pw := io.Pipe()
	go func() {
		for off := 0; off < len(body); off += 64 << 10 {
			if _, err := pw.Write(body[off:min(off+64<<10, len(body))]); err != nil {
				return
			}
			time.Sleep(pause)
		}
		_ = pw.Close()
	}()
	req, err := http.NewRequest(http.MethodPost, url, pr)
	if err != nil {
		t.Error(err)
		return bulkdtest.Response{}
	}
	req.ContentLength = int64(len(body))
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	res, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		_ = pr.CloseWithError(err)
		return bulkdtest.Response{Status: -1, Body: []byte(err.Error())}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	_ = pr.Close()
	return bulkdtest.Response{Status: res.StatusCode, Header: res.Header, Body: b}
}

// TestConcurrentLargeBodiesAllFinish: weighing bytes as they arrive must
// not let bodies that each hold part of the room all wait for more (hold
// and wait). With a budget of 1.25 bodies of the largest size (the
// automatic floor) and a share of one, two accounts' largest bodies sent
// at the same time, and four of one account's, are all accepted: a read
// is granted only while every body in flight can still finish, so one
// goes on while the others wait for its room. Without that test, every
// one of them held a part and was turned away after the 2 s wait.
func TestConcurrentLargeBodiesAllFinish(t *testing.T) {
	const mib = 1 << 20
	env := bulkdtest.Start(t, bulkdtest.NoWorkers(), bulkdtest.WithConfig(func(c *config.Config) {
		c.MaxBodyBytes = mib
		c.MaxDecodingBytes = mib + mib/4
		c.RateLimit = 1_000_000
	}))
	_, keyX := env.Account(credits.Whole(1_000_000))
	_, keyY := env.Account(credits.Whole(1_000_000))
	const bulk = "/v1/company-enrichment/bulk"
	body := companyBody(mib)
	for c, keys := range [][]string{{keyX, keyY}, {keyX, keyX, keyX, keyX}} {
		answers := make([]bulkdtest.Response, len(keys))
		var wg sync.WaitGroup
		for i, k := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers[i] = pacedPost(t, env.URL+bulk, k, body, 10*time.Millisecond)
			}()
		}
		wg.Wait()
		for i, r := range answers {
			if r.Status != 200 {
				t.Fatalf("case %d, %d concurrent largest bodies: body %d got %d %s", c, len(keys), i, r.Status, r.Body)
			}
		}
		admittedBytes(t, env, 0)
	}
}

// sparseCompanyBody is a submission body of size bytes with whitespace
// between its rows, so that it stays under the row limit.
func sparseCompanyBody(size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"input":[`)
	pad := bytes.Repeat([]byte(" "), 1024)
	for i := 0; b.Len() < size-2048; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"domain":"company-%d.example"}`, i)
		b.Write(pad)
	}
	b.WriteString("]}")
	for b.Len() < size {
		b.WriteByte(' ')
	}
	return b.Bytes()
}

// TestFastStartBuysNoTrickle is issue 26's item 2 with the chart's
// proportions (64 MiB bodies, a budget of 1.25 bodies, a share of one):
// account A sends 63 MiB of a declared 64 MiB at full speed, then 1 byte
// every 4 s. Under the old average rule the fast start bought about
// 1,000 s of trickle, holding 63 MiB of the budget; under the sliding
// window A is answered 408 one window after it slowed down, and account
// B's 20 MiB body, retried as its 503s say, is admitted meanwhile.
func TestFastStartBuysNoTrickle(t *testing.T) {
	const mib = 1 << 20
	const window = 2 * time.Second // the grace, which is the window
	env := bulkdtest.Start(t, bulkdtest.NoWorkers(), bulkdtest.WithConfig(func(c *config.Config) {
		c.MaxBodyBytes = 64 * mib
		c.MaxDecodingBytes = 80 * mib
		c.MaxDecodingBytesPerAccount = 64 * mib
		c.BodyGrace = window
		c.BodyMinRate = 64 << 10
		c.RateLimit = 1_000_000
	}))
	_, keyA := env.Account(credits.Whole(1_000_000))
	_, keyB := env.Account(credits.Whole(1_000_000))
	const bulk = "/v1/company-enrichment/bulk"
	body := sparseCompanyBody(64 * mib)

	a := startUpload(t, env, bulk, keyA, len(body), nil)
	for off := 0; off < 63*mib; off += mib {
		_ = a.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := a.conn.Write(body[off : off+mib]); err != nil {
			r, _ := a.answer(t, 5*time.Second)
			t.Fatalf("A's fast part refused after %d MiB: %v: %d %s", off/mib, err, r.Status, r.Body)
		}
	}
	slowed := time.Now()
	stop := make(chan struct{})
	trickled := make(chan struct{})
	go func() {
		defer close(trickled)
		for off := 63 * mib; off < len(body); off++ {
			select {
			case <-stop:
				return
			case <-time.After(4 * time.Second):
			}
			_ = a.conn.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := a.conn.Write(body[off : off+1]); err != nil {
				return // dropped
			}
		}
	}()

	// B, meanwhile: 20 MiB, retried after each 503's Retry-After.
	bBody := sparseCompanyBody(20 * mib)
	bDone := make(chan bulkdtest.Response, 1)
	var bTries int
	go func() {
		for {
			bTries++
			r := env.Do(http.MethodPost, bulk, keyB, bBody)
			if r.Status != 503 || time.Since(slowed) > 30*time.Second {
				bDone <- r
				return
			}
			time.Sleep(2 * time.Second)
		}
	}()

	r, closing := a.answer(t, 30*time.Second)
	took := time.Since(slowed)
	close(stop)
	<-trickled
	checkErrorBody(t, r, 408, "")
	if !closing {
		t.Fatal("the 408 did not close the connection")
	}
	// One window after the last fast byte, a few of the trickle's reads
	// and the server's decoding of 63 MiB (not the client's time) aside.
	if took > window+5*time.Second {
		t.Fatalf("A's trickle was dropped %v after it slowed down; the window is %v", took, window)
	}
	rb := <-bDone
	if rb.Status != 200 {
		t.Fatalf("B's 20 MiB body after %d tries: %d %s", bTries, rb.Status, rb.Body)
	}
	t.Logf("A dropped %v after slowing down; B's 20 MiB body admitted after %d tries, %v after A slowed down",
		took.Round(time.Millisecond), bTries, time.Since(slowed).Round(time.Millisecond))
	admittedBytes(t, env, 0)
}
