package e2e

// Idempotency-Key on a standalone bulkd: a bulk submission whose reply is
// lost, or whose client gives up waiting, and which the client retries
// with the same key, makes one job and one charge, and the job runs once.

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/jobs"
)

// idemFront stands in front of a bulkd: for an armed request the server
// answers in full and the front then drops the connection, so the client
// never sees the answer (a reply lost on the way).
type idemFront struct {
	URL  string
	lose atomic.Bool
}

func newIdemFront(t *testing.T, api http.Handler) *idemFront {
	f := &idemFront{}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !f.lose.CompareAndSwap(true, false) {
			api.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(httptest.NewRecorder(), r)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}))
	t.Cleanup(ts.Close)
	f.URL = ts.URL
	return f
}

type idemAnswer struct {
	status   int
	replayed bool
	body     []byte
	err      error
}

func idemPost(c *http.Client, url, key, idem string, body []byte) idemAnswer {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return idemAnswer{err: err}
	}
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", idem)
	res, err := c.Do(req)
	if err != nil {
		return idemAnswer{err: err}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return idemAnswer{status: res.StatusCode, replayed: res.Header.Get("Idempotent-Replayed") == "true", body: b, err: err}
}

// checkOneJob checks that the account paid for exactly one job, that job
// jobID, and that it completed with every row answered.
func (e *refundEnv) checkOneJob(t *testing.T, jobID string) {
	t.Helper()
	es := e.ledger(t)
	if len(es) != 1 || es[0].Kind != billing.KindCharge || es[0].JobID != jobID {
		t.Fatalf("ledger %+v, want one charge for job %s", es, jobID)
	}
	if bal := e.Balance(e.acct); bal != e.opening-credits.Whole(refundCharge) {
		t.Errorf("balance %s, want %s less %d", bal, e.opening, refundCharge)
	}
	st := e.WaitFor(refundSubmitPath+"/"+jobID, e.key, 10*time.Second)
	if st["total_processed"] != float64(5) || st["total_rows"] != float64(5) {
		t.Errorf("job status %v", st)
	}
	var metas int
	for _, k := range e.jobKeys(t) {
		if len(k) == len("bulkd:job:{")+36+1 { // the job's meta hash, bulkd:job:{ID}
			metas++
		}
	}
	if metas != 1 {
		t.Errorf("%d jobs in Redis, want 1: %v", metas, e.jobKeys(t))
	}
}

// The reply of a submission is lost after the job was accepted; the
// client's retries with the same key (one, then ten at once) all get the
// first answer. One job, one charge.
func TestIdempotentSubmissionLostReply(t *testing.T) {
	e := refundStart(t)
	front := newIdemFront(t, e.Parts.API)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	body, _ := json.Marshal(refundBody)
	url := front.URL + refundSubmitPath

	front.lose.Store(true)
	if a := idemPost(client, url, e.key, "invoice-2026-11-0042", body); a.err == nil {
		t.Fatalf("the first reply arrived (%d); it should have been lost", a.status)
	}
	first := idemPost(client, url, e.key, "invoice-2026-11-0042", body)
	if first.err != nil || first.status != http.StatusOK || !first.replayed {
		t.Fatalf("retry: %v %d replayed=%v %s", first.err, first.status, first.replayed, first.body)
	}
	var sub struct {
		JobID           string  `json:"job_id"`
		CreditsConsumed float64 `json:"credits_consumed"`
	}
	if err := json.Unmarshal(first.body, &sub); err != nil || sub.CreditsConsumed != refundCharge {
		t.Fatalf("answer %s: %v", first.body, err)
	}
	var wg sync.WaitGroup
	answers := make([]idemAnswer, 10)
	for i := range answers {
		wg.Go(func() { answers[i] = idemPost(client, url, e.key, "invoice-2026-11-0042", body) })
	}
	wg.Wait()
	for _, a := range answers {
		if a.err != nil || a.status != http.StatusOK || !a.replayed || !bytes.Equal(a.body, first.body) {
			t.Fatalf("concurrent retry: %v %d replayed=%v %s", a.err, a.status, a.replayed, a.body)
		}
	}
	e.checkOneJob(t, sub.JobID)
}

// The client gives up waiting for a slow submission and retries at once:
// while the first runs the retries are told 409 idempotency_in_progress;
// then they get an answer, and the account has paid for one job whatever
// became of the first request (the server finished it, or rolled it back
// when the client hung up).
func TestIdempotentSubmissionRetryAfterClientTimeout(t *testing.T) {
	e := refundStart(t)
	var slow atomic.Bool
	slow.Store(true)
	e.Parts.Engine.SetFailpoint(func(step string) error {
		if step == jobs.StepCommit && slow.CompareAndSwap(true, false) {
			time.Sleep(700 * time.Millisecond)
		}
		return nil
	})
	body, _ := json.Marshal(refundBody)
	url := e.URL + refundSubmitPath

	impatient := &http.Client{Timeout: 200 * time.Millisecond}
	if a := idemPost(impatient, url, e.key, "retry-after-timeout", body); a.err == nil {
		t.Fatalf("the slow submission answered within the client's timeout: %d", a.status)
	}
	client := &http.Client{Timeout: 30 * time.Second}
	var got idemAnswer
	inProgress := 0
	deadline := time.Now().Add(15 * time.Second)
	for {
		got = idemPost(client, url, e.key, "retry-after-timeout", body)
		if got.err != nil {
			t.Fatal(got.err)
		}
		if got.status != http.StatusConflict {
			break
		}
		inProgress++
		var eb struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(got.body, &eb)
		if eb.Code != "idempotency_in_progress" {
			t.Fatalf("409 %s", got.body)
		}
		if time.Now().After(deadline) {
			t.Fatal("still in progress after 15 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got.status != http.StatusOK {
		t.Fatalf("retry: %d %s", got.status, got.body)
	}
	if inProgress == 0 {
		t.Error("no retry saw the first request in progress")
	}
	t.Logf("%d retries answered 409 in progress; then 200 replayed=%v", inProgress, got.replayed)
	var sub struct {
		JobID string `json:"job_id"`
	}
	if err := json.Unmarshal(got.body, &sub); err != nil {
		t.Fatal(err)
	}
	// The first request, if it was rolled back, shows as a charge and its
	// refund; what counts is that one job is paid for.
	es := e.ledger(t)
	var net int64
	for _, x := range es {
		if x.Kind == billing.KindCharge && x.JobID == sub.JobID {
			net++
		}
	}
	if net != 1 {
		t.Errorf("ledger %+v: job %s charged %d times", es, sub.JobID, net)
	}
	if bal := e.Balance(e.acct); bal != e.opening-credits.Whole(refundCharge) {
		t.Errorf("balance %s, want %s less %d", bal, e.opening, refundCharge)
	}
	e.WaitFor(refundSubmitPath+"/"+sub.JobID, e.key, 10*time.Second)
	if again := idemPost(client, url, e.key, "retry-after-timeout", body); !again.replayed || !bytes.Equal(again.body, got.body) {
		t.Errorf("a later retry: %d replayed=%v %s", again.status, again.replayed, again.body)
	}
}
