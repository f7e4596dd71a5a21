package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/mailworld"
)

// The clients: one per API key, each sending at its rate limit, behaving as
// a careful real client does:
//   - paced at the key's limit (20 requests/s), at most InFlight at once;
//   - a load balancer in front of the two replicas: each key has a home
//     replica, and a replica that refused or cut a connection is avoided
//     for a moment (passive health checking) by every client;
//   - 429 and 503 (and 409 idempotency_in_progress): the key waits
//     Retry-After before it sends anything else, then sends the same
//     request again;
//   - a connection error: the same request again on the other replica, a
//     submission with the same Idempotency-Key, so a submission whose
//     answer was lost is charged once and counted once;
//   - 5xx on a submission: the same request again after a second (the API
//     reverses the charge of a failed submission).

type endpoint uint8

const (
	epCompanySubmit endpoint = iota
	epCompanyStatus
	epCompanyResults
	epVerifySubmit
	epVerifyStatus
	epVerifyResults
	epLookupSubmit
	epLookupStatus
	epLookupResults
	epUnlimitedSubmit
	epUnlimitedStatus
	epUnlimitedResults
	epCredits
	epUsage
	numEndpoints
)

var endpointNames = [numEndpoints]string{
	"POST /v1/company-enrichment/bulk", "GET /v1/company-enrichment/bulk/{id}", "GET /v1/company-enrichment/bulk/{id}/results",
	"POST /v1/bulk", "GET /v1/bulk/{id}", "GET /v1/bulk/{id}/results",
	"POST /v1/bulk-lookup", "GET /v1/bulk-lookup/{id}", "GET /v1/bulk-lookup/{id}/results",
	"POST /v1/unlimited/bulk-lookup", "GET /v1/unlimited/bulk-lookup/{id}", "GET /v1/unlimited/bulk-lookup/{id}/results",
	"GET /v1/credits", "GET /v1/unlimited/usage",
}

type familyKind int

const (
	famCompany familyKind = iota
	famVerify
	famLookup
	famUnlimited
)

type family struct {
	kind                         familyKind
	name, path                   string
	submit, status, results      endpoint
	completed                    string // the status word of a finished job
	quota                        bool   // metered by the daily bulk search quota
	minRows, maxRows, ledgerUnit int
}

var families = []*family{
	{kind: famCompany, name: "company", path: "/v1/company-enrichment/bulk", submit: epCompanySubmit, status: epCompanyStatus, results: epCompanyResults, completed: "completed"},
	{kind: famVerify, name: "verify", path: "/v1/bulk", submit: epVerifySubmit, status: epVerifyStatus, results: epVerifyResults, completed: "complete"},
	{kind: famLookup, name: "lookup", path: "/v1/bulk-lookup", submit: epLookupSubmit, status: epLookupStatus, results: epLookupResults, completed: "completed"},
	{kind: famUnlimited, name: "unlimited_lookup", path: "/v1/unlimited/bulk-lookup", submit: epUnlimitedSubmit, status: epUnlimitedStatus, results: epUnlimitedResults, completed: "completed", quota: true},
}

// Outcome codes of a sample that got no HTTP answer.
const (
	errRefused int16 = -1 // the connection was refused: the replica was down
	errCut     int16 = -2 // the connection broke after the request was sent: in flight on a killed replica
	errTimeout int16 = -3 // no answer within the client timeout
	errOther   int16 = -4
)

// sample is one HTTP request as the client saw it.
type sample struct {
	start  int32 // ms since the run started
	dur    int32 // µs
	ep     endpoint
	rep    uint8
	status int16 // HTTP status, or err*
	phase  uint8 // phaseLoad, phaseDrain
}

const (
	phaseLoad uint8 = iota
	phaseDrain
)

// job is an accepted submission as its client knows it.
type job struct {
	id        string
	fam       *family
	kc        *keyClient
	accepted  time.Duration // since the run started
	totalRows int64         // total_rows (total_emails for verification)
	charge    credits.Amount
	attempts  int  // requests the submission took
	replayed  bool // the accepting answer was a replay of an earlier one
	idem      string
	tries     []try // every request of the submission (diagnostics)

	company []companyRow
	verify  []verifyRow
	lookup  []mailworld.PersonCase

	// Under kc.mu.
	status   string
	done     bool
	doneSeen time.Duration
	nextPoll time.Time
	polling  bool
	readOff  int64
	reading  bool
	readAll  bool
}

// try is one request of a submission.
type try struct {
	at, took time.Duration // since the run started
	rep      int
	status   int16
}

func (t try) String() string {
	st := strconv.Itoa(int(t.status))
	if t.status < 0 {
		st = errName(t.status)
	}
	return fmt.Sprintf("%.3fs+%dms r%d %s", t.at.Seconds(), t.took.Milliseconds(), t.rep, st)
}

// clientStats are one key's counters (under keyClient.mu).
type clientStats struct {
	ticks, skippedPaused, skippedBusy int64
	submissions, accepted, replayed   int64 // logical submissions; accepted ones; accepted by a replayed answer
	submitRetries                     int64 // extra requests of submissions (any cause)
	rejected                          map[int]int64
	gaveUp                            int64
	pauses                            int64
	paused                            time.Duration
	noRetryAfter                      int64    // 429 and 503 answers without Retry-After
	unexpected                        []string // first few unexpected answers
}

type keyClient struct {
	r         *runner
	idx       int
	key       string
	acct      *account
	fams      []*family
	home      int
	inflight  atomic.Int32
	mu        sync.Mutex
	rng       *rand.Rand
	paused    time.Time // no request before this (Retry-After)
	nextSub   time.Time
	jobs      []*job
	subs      []*job // every logical submission, accepted or not
	samples   []sample
	stats     clientStats
	submitSeq int
}

// account is one account of the suite with what it was given.
type account struct {
	id        string
	unlimited bool
	opening   credits.Amount // the grant (an adjust entry)
	keys      []*keyClient
}

// run paces the key until stop closes.
func (c *keyClient) run(ctx context.Context, stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	interval := time.Second / time.Duration(c.r.cfg.RPS)
	// A random phase, so the keys' ticks do not all land together.
	c.mu.Lock()
	phase := time.Duration(c.rng.Int63n(int64(interval)))
	c.nextSub = time.Now().Add(time.Duration(c.rng.ExpFloat64() * float64(c.r.cfg.SubmitEvery) / 2))
	c.mu.Unlock()
	select {
	case <-time.After(phase):
	case <-stop:
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var ops sync.WaitGroup
	defer ops.Wait()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		now := time.Now()
		c.mu.Lock()
		c.stats.ticks++
		if now.Before(c.paused) {
			c.stats.skippedPaused++
			c.mu.Unlock()
			continue
		}
		if int(c.inflight.Load()) >= c.r.cfg.InFlight {
			c.stats.skippedBusy++
			c.mu.Unlock()
			continue
		}
		op := c.choose(now)
		c.mu.Unlock()
		if op == nil {
			continue
		}
		c.inflight.Add(1)
		ops.Add(1)
		go func() {
			defer ops.Done()
			defer c.inflight.Add(-1)
			op(ctx)
		}()
	}
}

// choose picks the next request (under c.mu): a submission when one is
// due, else a status poll of a running job, else the next results page of
// a finished job, else a balance read or a random results page.
func (c *keyClient) choose(now time.Time) func(context.Context) {
	if !c.r.stopSubmit.Load() && now.After(c.nextSub) {
		c.nextSub = now.Add(time.Duration(c.rng.ExpFloat64() * float64(c.r.cfg.SubmitEvery)))
		f := c.fams[c.rng.Intn(len(c.fams))]
		return c.submitOp(f)
	}
	for _, j := range c.jobs {
		if !j.done && !j.polling && now.After(j.nextPoll) {
			j.polling = true
			return func(ctx context.Context) { c.poll(ctx, j) }
		}
	}
	for _, j := range c.jobs {
		if j.done && !j.readAll && !j.reading {
			j.reading = true
			off := j.readOff
			return func(ctx context.Context) { c.readPage(ctx, j, off, true) }
		}
	}
	var done []*job
	for _, j := range c.jobs {
		if j.done {
			done = append(done, j)
		}
	}
	if len(done) > 0 && c.rng.Intn(2) == 0 {
		j := done[c.rng.Intn(len(done))]
		off := c.rng.Int63n(max(j.totalRows, 1))
		return func(ctx context.Context) { c.readPage(ctx, j, off, false) }
	}
	if c.acct.unlimited {
		return func(ctx context.Context) { c.send(ctx, epUsage, http.MethodGet, "/v1/unlimited/usage", nil, "") }
	}
	return func(ctx context.Context) { c.send(ctx, epCredits, http.MethodGet, "/v1/credits", nil, "") }
}

// answer is what one request got.
type answer struct {
	status int16 // HTTP status or err*
	header http.Header
	body   []byte
	rep    int // the replica it went to
}

// send makes one request through the load balancer and records it.
func (c *keyClient) send(ctx context.Context, ep endpoint, method, path string, body []byte, idem string) answer {
	rep := c.r.pick(c.home)
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.r.reps[rep].base()+path, rd)
	if err != nil {
		panic(err)
	}
	req.Header.Set("X-API-Key", c.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if idem != "" {
		req.Header.Set("Idempotency-Key", idem)
	}
	if method == http.MethodPost {
		c.r.postsInFlight[rep].Add(1)
		defer c.r.postsInFlight[rep].Add(-1)
	}
	t0 := time.Now()
	res, err := c.r.hc.Do(req)
	a := answer{rep: rep}
	if err == nil {
		a.body, err = io.ReadAll(res.Body)
		res.Body.Close()
		a.status, a.header = int16(res.StatusCode), res.Header
	}
	if err != nil {
		a.status = classify(err)
		if a.status == errRefused || a.status == errCut {
			c.r.markDown(rep)
		}
	}
	s := sample{start: int32(t0.Sub(c.r.t0).Milliseconds()), dur: int32(time.Since(t0).Microseconds()), ep: ep, rep: uint8(rep), status: a.status}
	if c.r.stopSubmit.Load() {
		s.phase = phaseDrain
	}
	if ctx.Err() == nil || a.status > 0 {
		c.mu.Lock()
		c.samples = append(c.samples, s)
		if (a.status == http.StatusTooManyRequests || a.status == http.StatusServiceUnavailable) && a.header.Get("Retry-After") == "" {
			c.stats.noRetryAfter++
		}
		c.mu.Unlock()
	}
	return a
}

// classify sorts a request error: refused (nobody listening), cut (the
// connection broke with the request in flight), timeout, other.
func classify(err error) int16 {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return errRefused
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return errTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return errCut
	}
	return errOther
}

// retryAfter is the answer's Retry-After in seconds (1 when absent).
func retryAfter(h http.Header) time.Duration {
	if n, err := strconv.Atoi(h.Get("Retry-After")); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	return time.Second
}

// pause makes the key send nothing before d from now.
func (c *keyClient) pause(d time.Duration) {
	c.mu.Lock()
	until := time.Now().Add(d)
	if until.After(c.paused) {
		c.stats.pauses++
		c.stats.paused += until.Sub(maxTime(c.paused, time.Now()))
		c.paused = until
	}
	c.mu.Unlock()
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// waitPause sleeps until the key may send again.
func (c *keyClient) waitPause(ctx context.Context) bool {
	c.mu.Lock()
	d := time.Until(c.paused)
	c.mu.Unlock()
	if d <= 0 {
		return true
	}
	select {
	case <-time.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

func (c *keyClient) note(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.stats.unexpected) < 5 {
		c.stats.unexpected = append(c.stats.unexpected, fmt.Sprintf(format, args...))
	}
}

// submitOp is one logical submission: one body, one Idempotency-Key, as
// many requests as it takes (bounded by SubmitGiveUp).
func (c *keyClient) submitOp(f *family) func(context.Context) {
	c.submitSeq++
	seq := c.submitSeq
	j := &job{fam: f, kc: c}
	var body []byte
	span := func(lo, hi int) int { return lo + c.rng.Intn(hi-lo+1) }
	switch f.kind {
	case famCompany:
		j.company = c.r.companies.companyJob(c.rng, span(c.r.cfg.CompanyRows[0], c.r.cfg.CompanyRows[1]), c.idx*100000+seq)
		body = companyBody(j.company)
	case famVerify:
		body, j.verify = c.r.mail.verifyJob(c.rng, span(c.r.cfg.VerifyRows[0], c.r.cfg.VerifyRows[1]))
	default:
		body, j.lookup = c.r.mail.lookupJob(c.rng, span(c.r.cfg.LookupRows[0], c.r.cfg.LookupRows[1]))
	}
	idem := uuid.NewString()
	j.idem = idem
	return func(ctx context.Context) {
		c.mu.Lock()
		c.stats.submissions++
		c.subs = append(c.subs, j)
		c.mu.Unlock()
		giveUp := time.Now().Add(c.r.cfg.SubmitGiveUp)
		for attempt := 1; ; attempt++ {
			if attempt > 1 {
				c.mu.Lock()
				c.stats.submitRetries++
				c.mu.Unlock()
			}
			if !c.waitPause(ctx) {
				return
			}
			t0 := c.r.since()
			a := c.send(ctx, f.submit, http.MethodPost, f.path, body, idem)
			c.mu.Lock()
			j.tries = append(j.tries, try{at: t0, took: c.r.since() - t0, rep: a.rep, status: a.status})
			c.mu.Unlock()
			switch {
			case a.status == http.StatusOK:
				var r struct {
					JobID       string         `json:"job_id"`
					TotalRows   int64          `json:"total_rows"`
					TotalEmails int64          `json:"total_emails"`
					Credits     credits.Amount `json:"credits_consumed"`
				}
				if err := json.Unmarshal(a.body, &r); err != nil || r.JobID == "" {
					c.note("%s: 200 without a job: %.200s", f.path, a.body)
					return
				}
				j.id, j.totalRows, j.charge, j.attempts = r.JobID, r.TotalRows, r.Credits, attempt
				if f.kind == famVerify {
					j.totalRows = r.TotalEmails
				}
				j.replayed = a.header.Get("Idempotent-Replayed") == "true"
				j.accepted = time.Since(c.r.t0)
				j.nextPoll = time.Now().Add(c.r.cfg.PollEvery / 2)
				c.mu.Lock()
				c.stats.accepted++
				if j.replayed {
					c.stats.replayed++
				}
				c.jobs = append(c.jobs, j)
				c.mu.Unlock()
				c.r.addJob(j)
				return
			case a.status == http.StatusTooManyRequests, a.status == http.StatusServiceUnavailable,
				a.status == http.StatusConflict:
				c.pause(retryAfter(a.header))
			case a.status == errRefused, a.status == errCut, a.status == errOther, a.status == errTimeout:
				// Another replica (the balancer marked this one down), a
				// moment later.
				sleepCtx(ctx, 100*time.Millisecond)
			case a.status >= 500:
				sleepCtx(ctx, time.Second)
			default:
				c.mu.Lock()
				if c.stats.rejected == nil {
					c.stats.rejected = map[int]int64{}
				}
				c.stats.rejected[int(a.status)]++
				c.mu.Unlock()
				c.note("%s: %d %.300s", f.path, a.status, a.body)
				return
			}
			if ctx.Err() != nil {
				return
			}
			if time.Now().After(giveUp) {
				c.mu.Lock()
				c.stats.gaveUp++
				c.mu.Unlock()
				c.note("%s: gave up after %d requests, last %d", f.path, attempt, a.status)
				return
			}
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// poll reads a running job's status once.
func (c *keyClient) poll(ctx context.Context, j *job) {
	a := c.send(ctx, j.fam.status, http.MethodGet, j.fam.path+"/"+j.id, nil, "")
	var st struct {
		Status string `json:"status"`
	}
	ok := a.status == http.StatusOK && json.Unmarshal(a.body, &st) == nil
	c.mu.Lock()
	j.polling = false
	j.nextPoll = time.Now().Add(c.r.cfg.PollEvery)
	if ok {
		j.status = st.Status
		if st.Status == j.fam.completed && !j.done {
			j.done, j.doneSeen = true, time.Since(c.r.t0)
		}
	}
	if a.status == errRefused || a.status == errCut {
		j.nextPoll = time.Now() // at once, through the other replica
	}
	c.mu.Unlock()
	switch {
	case a.status == http.StatusTooManyRequests, a.status == http.StatusServiceUnavailable:
		c.pause(retryAfter(a.header))
	case a.status > 0 && a.status < 500 && !ok:
		c.note("%s/%s: %d %.200s", j.fam.path, j.id, a.status, a.body)
	}
}

// readPage reads one results page of a finished job; inOrder pages advance
// the job's sequential read (a client downloading its results).
func (c *keyClient) readPage(ctx context.Context, j *job, off int64, inOrder bool) {
	limit := c.r.cfg.PageLimit
	a := c.send(ctx, j.fam.results, http.MethodGet, fmt.Sprintf("%s/%s/results?limit=%d&offset=%d", j.fam.path, j.id, limit, off), nil, "")
	c.mu.Lock()
	if inOrder {
		j.reading = false
	}
	c.mu.Unlock()
	switch {
	case a.status == http.StatusOK:
		if inOrder {
			c.mu.Lock()
			j.readOff = off + int64(limit)
			if j.readOff >= j.totalRows {
				j.readAll = true
			}
			c.mu.Unlock()
		}
	case a.status == http.StatusTooManyRequests, a.status == http.StatusServiceUnavailable:
		c.pause(retryAfter(a.header))
	case a.status > 0 && a.status < 500:
		c.note("%s/%s/results: %d %.200s", j.fam.path, j.id, a.status, a.body)
	}
}
