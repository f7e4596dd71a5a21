package apiserver

// Admission control: a process-wide bound on the bytes of request bodies
// being received and decoded (and held decoded) at once, a bounded share of
// it per account, and a least rate a body must arrive at. Without the
// bound, twenty concurrent 64 MiB submissions would each stream into their
// own row slices and dedupe maps at the same time and take the process past
// its memory limit.
//
// Bytes are weighed as they ARRIVE, not by what a request declares: every
// read of a body reserves the bytes it returns, from the account's share
// (--max-decoding-bytes-per-account) and from the process's budget
// (--max-decoding-bytes), when the grant leaves every body in flight a
// way to finish (admission, below). Reserving a declared Content-Length up
// front let one account's uploads that sent their headers and stalled hold
// the whole budget without sending anything (issue 18, item 2: 120 stalled
// 64 MiB uploads from one account made another account's 45-byte
// submission answer 503). Now a stalled upload holds only what it sent.
//
// The reservation is held until the handler returns, not only while the
// body streams in: the decoded rows live until the job is stored, and they
// are what the bound is for.
//
// A read that finds no room waits up to 2 s (Deps.AdmissionWait) for it;
// then the request is answered 429 account_busy when it was the account's
// own share that was full (its own other bodies; the rest of the process
// is untouched), else 503 server_busy. Either way nothing was charged.
//
// A body must keep arriving: every window of --body-grace (a sliding
// window, the first one from the body's start) must carry --body-min-rate
// bytes a second on average, whatever came before (rateWindow). A slower
// body (a slow-loris upload, or one sent fast and then trickled) is
// answered 408 and its connection closed, giving its reservation back. Only time spent waiting
// for the client counts, never time the server spends decoding or waiting
// for room, so a busy server never turns a healthy client into a slow one.

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/bulkd/bulkd/internal/apierr"
)

const (
	// defaultAdmissionWait is how long a read waits for room before its
	// request is turned away: long enough to ride out a burst of small
	// bodies behind a large one, short enough that a client is not left
	// hanging on a server that is full.
	defaultAdmissionWait = 2 * time.Second
	// admissionRetryAfter is the Retry-After of a 503 server_busy and a 429
	// account_busy, in seconds: about the time a 64 MiB submission takes to
	// decode and store on one core (docs/reliability.md).
	admissionRetryAfter = 2
	// decodedPerBodyByte is how many bytes of heap one byte of a
	// submission body costs while it is decoded and stored, at the worst
	// measured (hack/loadgen admission: company rows of long network URLs);
	// the automatic bound keeps that product under a quarter of the Go
	// memory limit.
	decodedPerBodyByte = 4
	// defaultBodyGrace is the grace of the rate rule when Deps.BodyGrace
	// is 0 (config's default --body-grace, with its reasons).
	defaultBodyGrace = 5 * time.Second
	// maxMeteredRead caps one read of a body, so that a reservation never
	// asks for more than a share at once.
	maxMeteredRead = 64 << 10
)

// DefaultMaxDecodingBytes is the bound --max-decoding-bytes 0 stands for:
// with a Go memory limit (GOMEMLIMIT, or memlimit's share of the cgroup
// limit), what fits in a quarter of it at decodedPerBodyByte heap bytes a
// body byte (the rest is for the results cache, Redis replies and the
// runtime); without one, four bodies of the largest size. Never less than
// one body of the largest size and a quarter more: an account's share is
// at least one largest body (or such a body could never be admitted), and
// the quarter is the room every other account keeps while one account's
// share is full (the chart's 768 MiB apiserver: 80 MiB, not 64).
func DefaultMaxDecodingBytes(maxBodyBytes int64) int64 {
	n := 4 * maxBodyBytes
	if lim := debug.SetMemoryLimit(-1); lim > 0 && lim != math.MaxInt64 {
		n = lim / 4 / decodedPerBodyByte
	}
	return max(n, maxBodyBytes+maxBodyBytes/4)
}

// DefaultMaxDecodingBytesPerAccount is the share --max-decoding-bytes-per-
// account 0 stands for: a quarter of the process's bound, so that one
// account never holds more than that, but never less than one body of the
// largest size (or such a body could never be admitted), and never more
// than the bound itself.
func DefaultMaxDecodingBytesPerAccount(maxDecodingBytes, maxBodyBytes int64) int64 {
	return min(max(maxDecodingBytes/4, maxBodyBytes), maxDecodingBytes)
}

// admission is the process's budget, the accounts' shares and the arrival
// rate rule.
//
// Weighing bytes as they arrive has a trap the declared-length reservation
// did not: bodies that each hold part of the room and all wait for more
// (hold and wait). Twenty concurrent 64 MiB bodies of one account split
// its 64 MiB share and none could finish: all twenty were answered 429
// after the wait (measured, hack/loadgen admission). So a read is granted
// only if, after it, the bodies in flight can still all finish in some
// order, each with the room the ones before it give back (the banker's
// safety test, on one resource): each body's remaining need is its
// declared length (its route's limit when chunked) minus what it holds. A
// declaration costs nothing until bytes arrive, and a stalled body never
// holds others up: its large need puts it last in that order, where it
// always fits (no body needs more than a share, and a share is at most
// the budget). The test is made for the account's share (its own bodies)
// and for the process's budget (every body).
type admission struct {
	size       int64
	perAccount int64
	wait       time.Duration
	minRate    int64 // bytes per second; 0: no rate rule
	grace      time.Duration

	mu       sync.Mutex
	free     int64                     // the budget's room
	bodies   map[*meteredBody]struct{} // in flight
	accounts map[string]*accountShare  // accounts with a body in flight
	changed  chan struct{}             // closed (and replaced) when room is given back
}

// accountShare is one account's share of the budget, alive while the
// account has a body in flight (so the map holds only those accounts).
type accountShare struct {
	free   int64
	bodies map[*meteredBody]struct{}
}

func newAdmission(size, perAccount int64, wait time.Duration, minRate int64, grace time.Duration) *admission {
	return &admission{size: size, perAccount: perAccount, wait: wait, minRate: minRate, grace: grace,
		free: size, bodies: map[*meteredBody]struct{}{}, accounts: map[string]*accountShare{}, changed: make(chan struct{})}
}

// enter registers b, which may need up to b.max bytes, under its account.
func (a *admission) enter(b *meteredBody) {
	a.mu.Lock()
	defer a.mu.Unlock()
	sh := a.accounts[b.account]
	if sh == nil {
		sh = &accountShare{free: a.perAccount, bodies: map[*meteredBody]struct{}{}}
		a.accounts[b.account] = sh
	}
	b.share = sh
	sh.bodies[b] = struct{}{}
	a.bodies[b] = struct{}{}
}

// leave gives back everything b holds and forgets it.
func (a *admission) leave(b *meteredBody) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	held := b.held
	a.free += held
	b.share.free += held
	b.held = 0
	delete(a.bodies, b)
	delete(b.share.bodies, b)
	if len(b.share.bodies) == 0 {
		delete(a.accounts, b.account)
	}
	a.broadcast()
	return held
}

// finish says b needs no more room (refused, or all read): it only holds
// what it has until it leaves. That may make a waiting grant safe.
func (a *admission) finish(b *meteredBody) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if b.max != b.held {
		b.max = b.held
		a.broadcast()
	}
}

// broadcast wakes the reads waiting for room; a.mu is held.
func (a *admission) broadcast() {
	close(a.changed)
	a.changed = make(chan struct{})
}

// refusal is why a reservation failed.
type refusal int

const (
	admitted refusal = iota
	accountFull
	processFull
	clientGone
)

// reserve takes n more bytes for b from its account's share and from the
// process's budget, waiting up to a.wait for a grant that keeps both safe.
// Bytes past b.max (only a chunked body over its limit, which its reader
// is about to refuse with a 400) are not weighed.
// It returns how many bytes it took.
func (a *admission) reserve(ctx context.Context, b *meteredBody, n int64) (refusal, int64) {
	var timer *time.Timer
	for {
		a.mu.Lock()
		r := min(n, max(b.max-b.held, 0))
		why := a.tryGrant(b, r)
		ch := a.changed
		a.mu.Unlock()
		if why == admitted {
			return admitted, r
		}
		if timer == nil {
			timer = time.NewTimer(a.wait)
			defer timer.Stop()
		}
		select {
		case <-ch: // room was given back: try again
		case <-timer.C:
			return why, 0
		case <-ctx.Done():
			return clientGone, 0
		}
	}
}

// tryGrant grants r bytes to b when the account's share and the process's
// budget have them and stay safe after; a.mu is held.
func (a *admission) tryGrant(b *meteredBody, r int64) refusal {
	if r == 0 {
		return admitted
	}
	sh := b.share
	if sh.free < r || !safeAfter(sh.bodies, sh.free-r, b, r) {
		return accountFull
	}
	if a.free < r || !safeAfter(a.bodies, a.free-r, b, r) {
		return processFull
	}
	sh.free -= r
	a.free -= r
	b.held += r
	return admitted
}

// safeAfter is the banker's test on one resource: with free room left
// after b takes r more bytes, can every body in bodies finish, in the
// order of their remaining needs, each with the room and the bytes given
// back by the ones before it?
func safeAfter(bodies map[*meteredBody]struct{}, free int64, b *meteredBody, r int64) bool {
	need := func(x *meteredBody) (need, held int64) {
		need, held = max(x.max-x.held, 0), x.held
		if x == b {
			need, held = max(need-r, 0), held+r
		}
		return need, held
	}
	// Most grants: every body could finish on the room left alone.
	most := int64(0)
	for x := range bodies {
		n, _ := need(x)
		most = max(most, n)
	}
	if most <= free {
		return true
	}
	type nh struct{ need, held int64 }
	order := make([]nh, 0, len(bodies))
	for x := range bodies {
		n, h := need(x)
		order = append(order, nh{n, h})
	}
	slices.SortFunc(order, func(p, q nh) int { return cmp.Compare(p.need, q.need) })
	for _, x := range order {
		if x.need > free {
			return false
		}
		free += x.held
	}
	return true
}

// bodyLimit is the largest body the route with this pattern reads: past
// it a declared length is refused at once. It must agree with the limits
// the handlers read with.
func (s *Server) bodyLimit(pattern string) int64 {
	for _, m := range s.Singles {
		if "/v1"+m.Path == pattern {
			return s.singleMaxBody(m)
		}
	}
	switch pattern {
	case "/v1/content-spam-check":
		return min(s.MaxBodyBytes, maxSpamBody)
	}
	return s.MaxBodyBytes
}

// admit is the admission middleware of the authenticated routes (after
// authentication, so a request without a valid key reserves nothing, the
// account is known, and every answer here carries the rate-limit headers;
// before any middleware or handler that reads the body). Requests without
// a body pass untouched.
func (s *Server) admit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		pattern := ""
		if rc := chi.RouteContext(r.Context()); rc != nil {
			pattern = rc.RoutePattern()
		}
		limit := s.bodyLimit(pattern)
		if r.ContentLength > limit {
			// The same answer the handler gives when the body turns out
			// too large while it reads, without reading 64 MiB first.
			apierr.Write(w, apierr.New(http.StatusBadRequest,
				fmt.Sprintf("Request body is larger than the limit of %d bytes.", limit)))
			return
		}
		account := ""
		if p := PrincipalFrom(r.Context()); p != nil {
			account = p.Account.ID
		}
		b := &meteredBody{ReadCloser: r.Body, s: s, a: s.admission, ctx: r.Context(), w: w, r: r, account: account, pattern: pattern, max: limit}
		if r.ContentLength > 0 {
			b.max = r.ContentLength
		}
		s.admission.enter(b)
		defer b.release()
		r.Body = b
		next.ServeHTTP(w, r)
	})
}

// admitInternal weighs a submission body the server produces itself (the
// dashboard's, streamed from a draft) exactly as a client's POST /v1 body
// (admit): every read reserves its bytes from the account's share and
// the process's budget, under the same safety test, and answers 429
// account_busy or 503 server_busy as the API does. Before it (issue 26,
// item 1) eight reviews of one dashboard user's draft built eight bodies
// and their rows outside the budget: 1.83 GB of RSS in a 768 MiB pod.
// The caller calls release once the decoded rows are no longer held.
func (s *Server) admitInternal(ctx context.Context, account, route string, body io.Reader) (r io.Reader, release func()) {
	b := &meteredBody{ReadCloser: io.NopCloser(body), s: s, a: s.admission, ctx: ctx, account: account, pattern: route, max: s.MaxBodyBytes}
	s.admission.enter(b)
	return b, b.release
}

// meteredBody is a request body that reserves what it reads (admit), or
// a body the server makes itself (admitInternal: w and r nil, no rate
// rule, as there is no client to wait for).
type meteredBody struct {
	io.ReadCloser
	s       *Server
	a       *admission
	ctx     context.Context
	w       http.ResponseWriter
	r       *http.Request
	account string
	share   *accountShare // set by admission.enter
	pattern string

	max      int64         // the most it may need: its Content-Length, else its route's limit; guarded by admission.mu
	held     int64         // bytes reserved; guarded by admission.mu
	received int64         // bytes read
	waited   time.Duration // time spent blocked reading from the client
	window   rateWindow    // what arrived when, on that clock (rate rule)
	timer    *time.Timer   // fires when the client is too slow (rate rule)
	slow     atomic.Bool   // set by timer
	err      *apierr.Error // sticky: the answer once a read was refused
}

func (b *meteredBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if len(p) > maxMeteredRead {
		p = p[:maxMeteredRead]
	}
	if len(p) == 0 {
		return 0, nil
	}
	n, err := b.readFromClient(p)
	if b.err != nil {
		return 0, b.err
	}
	if n > 0 {
		switch why, took := b.a.reserve(b.ctx, b, int64(n)); why {
		case admitted:
			b.s.Metrics.AdmissionBytes.Add(float64(took))
		case accountFull:
			return 0, b.refuse(b.accountBusy())
		case processFull:
			return 0, b.refuse(b.serverBusy())
		case clientGone:
			return 0, context.Canceled
		}
	}
	if err == io.EOF {
		b.a.finish(b) // all read: it needs no more room
	}
	return n, err
}

// readFromClient is one read from the client under the rate rule: the
// read may wait for the client until the sliding window would fall short
// (rateWindow.deadline), measured on the client's own clock (time spent
// blocked reading from it), so what a body sent before never buys it a
// pause later.
func (b *meteredBody) readFromClient(p []byte) (int, error) {
	if b.a.minRate <= 0 || b.w == nil {
		return b.ReadCloser.Read(p)
	}
	allowance := b.window.deadline(b.a.grace, b.a.minRate, b.received) - b.waited
	if allowance <= 0 {
		b.refuse(b.tooSlow())
		return 0, nil
	}
	if b.timer == nil {
		b.timer = time.AfterFunc(allowance, b.expire)
	} else {
		b.timer.Reset(allowance)
	}
	start := time.Now()
	n, err := b.ReadCloser.Read(p)
	// Stop reports false when expire ran or is running: the client was
	// too slow even if this read got bytes at the last moment.
	if !b.timer.Stop() || b.slow.Load() {
		b.refuse(b.tooSlow())
		return 0, nil
	}
	b.waited += time.Since(start)
	b.received += int64(n)
	if n > 0 {
		b.window.add(b.a.grace, b.waited, b.received)
	}
	return n, err
}

// rateWindow is the rate rule over a sliding window (issue 26, item 2):
// every span of the window's length on the client's clock must carry at
// least the least rate's worth of bytes, whatever came before. The old
// rule was an average since the start (grace + received/minRate), so 63
// MiB sent fast bought about 1,000 s of a trickle of 1 byte every 4 s,
// holding 63 MiB of the budget the whole time. The window is the grace:
// the first window is the old grace, and a pause of a whole window is
// refused as before.
//
// It keeps (client time, bytes received by then) samples, merged into at
// most rateBuckets+2 per window, so a fast body's thousands of reads cost
// a few dozen bytes. A merged sample is dated by its newest read, which
// errs for the client by at most a bucket (window/rateBuckets).
type rateWindow struct {
	s []rateSample // oldest first; s[0] at or before the window's start
}

type rateSample struct {
	first, at time.Duration // the bucket's first and newest read, on the client's clock
	cum       int64         // bytes received by at
}

const rateBuckets = 16

// add records that cum bytes had arrived at client time at.
func (w *rateWindow) add(window, at time.Duration, cum int64) {
	if n := len(w.s); n > 0 && at-w.s[n-1].first < window/rateBuckets {
		w.s[n-1].at, w.s[n-1].cum = at, cum
	} else {
		w.s = append(w.s, rateSample{first: at, at: at, cum: cum})
	}
	// Samples before the window's start are only needed up to the newest
	// of them: it says how much had arrived when the window began.
	drop := 0
	for drop+1 < len(w.s) && w.s[drop+1].at <= at-window {
		drop++
	}
	if drop > 0 {
		w.s = append(w.s[:0], w.s[drop:]...)
	}
}

// deadline is the client time by which more bytes must arrive: the end of
// the first window that would carry less than minRate's worth with no
// more bytes. That is a window after the oldest sample the window must
// not include, the first one by which more than cum-need had arrived
// (the body's start, with 0 bytes, counts as one).
func (w *rateWindow) deadline(window time.Duration, minRate, cum int64) time.Duration {
	need := int64(float64(minRate) * window.Seconds())
	if cum-need < 0 {
		return window // the first window, from the body's start
	}
	for _, x := range w.s {
		if x.cum > cum-need {
			return x.at + window
		}
	}
	return window // not reached: the newest sample holds cum
}

// expire is the rate rule's timer: it ends the blocked read at once (a
// read deadline in the past) rather than leaving the connection, its
// goroutine and its reservation to --read-timeout.
func (b *meteredBody) expire() {
	b.slow.Store(true)
	if err := http.NewResponseController(b.w).SetReadDeadline(time.Now()); err != nil {
		b.s.Logger.Debug("admission: cannot end a slow body's read early", "err", err)
	}
}

// refuse makes e the answer of every further read and of the request.
func (b *meteredBody) refuse(e *apierr.Error) *apierr.Error {
	b.err = e
	b.a.finish(b) // it reads no more: others need not leave it room
	return e
}

func (b *meteredBody) tooSlow() *apierr.Error {
	b.s.Metrics.SlowBodies.Inc()
	b.s.Logger.Debug("admission: body dropped, it arrived too slowly",
		"request_id", RequestIDFrom(b.ctx), "account", b.account, "route", b.pattern,
		"received_bytes", b.received, "waited_ms", b.waited.Milliseconds())
	if b.r != nil && b.r.ProtoMajor == 1 {
		// The rest of the body is never read: the connection cannot be
		// reused (its read deadline is already past), and the client
		// should know.
		b.w.Header().Set("Connection", "close")
	}
	return apierr.New(http.StatusRequestTimeout, fmt.Sprintf(
		"The request body arrived too slowly: every %s of it must carry %d bytes per second or more on average, whatever came before, "+
			"so no pause may be longer than %s. Nothing was charged.", b.a.grace, b.a.minRate, b.a.grace))
}

func (b *meteredBody) accountBusy() *apierr.Error {
	b.s.Metrics.AdmissionAccountRejected.Inc()
	b.s.Logger.Debug("admission: body turned away, its account is receiving its share",
		"request_id", RequestIDFrom(b.ctx), "account", b.account, "route", b.pattern,
		"received_bytes", b.received, "max_decoding_bytes_per_account", b.a.perAccount)
	e := apierr.WithCode(http.StatusTooManyRequests, apierr.CodeAccountBusy, fmt.Sprintf(
		"This account's other request bodies being received and decoded take its whole share (at most %d bytes at once); "+
			"this body did not fit. Nothing was charged; retry after %d s, or send fewer bodies at once.", b.a.perAccount, admissionRetryAfter))
	e.RetryAfter = admissionRetryAfter
	return e
}

func (b *meteredBody) serverBusy() *apierr.Error {
	b.s.Metrics.AdmissionRejected.Inc()
	b.s.Logger.Debug("admission: body turned away, the server is decoding its limit",
		"request_id", RequestIDFrom(b.ctx), "account", b.account, "route", b.pattern,
		"received_bytes", b.received, "max_decoding_bytes", b.a.size)
	e := apierr.WithCode(http.StatusServiceUnavailable, apierr.CodeServerBusy, fmt.Sprintf(
		"The server is busy decoding other submissions (at most %d bytes at once) and could not take this body. "+
			"Nothing was charged; retry after %d s.", b.a.size, admissionRetryAfter))
	e.RetryAfter = admissionRetryAfter
	return e
}

// release gives back everything the body reserved, when the handler is done.
func (b *meteredBody) release() {
	if b.timer != nil {
		b.timer.Stop()
	}
	if held := b.a.leave(b); held > 0 {
		b.s.Metrics.AdmissionBytes.Sub(float64(held))
	}
}
