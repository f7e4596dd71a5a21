package apiserver

// Idempotency-Key (docs/api.md, "Idempotent requests"): a client that retries
// a charging request after a timeout or a dropped connection sends the same
// key and gets the first answer back instead of paying again.
//
// The records and their transitions (claim, record, renew, store,
// release) are internal/idempotency's; this file is the HTTP side: the
// header, the request's fingerprint, replaying a stored answer, the errors.
// Only an answer worth replaying is stored: a 2xx whose request kept what
// it took (a charge, a quota unit, a job: markKept). Every other answer of
// the charging endpoints (400, 403, 422, 429, 5xx) means nothing stayed
// charged, so running the request again is safe and lets the retry succeed
// (after a top-up, a quota reset, a transient 500); and a 2xx that kept
// nothing (an invalid row's free answer, a refunded one) costs nothing to
// run again and answers the same. Storing those made the records free
// storage: a single GET of a 2,040-character invalid domain with a new key
// each time stored 2.7 KB for 24 h per request, about 5 GB a day per API
// key, in a Redis that runs noeviction (issue 26, item 3). Every stored
// record now costs its account what its request kept.
//
// The request's fingerprint (method, path, query, body) is hashed as the
// handler streams the body, so a 64 MiB submission is never held twice;
// a retry's body is hashed the same way (streamed, bounded) before it is
// compared with the stored one.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/idempotency"
	"github.com/bulkd/bulkd/internal/jobs"
)

// Idempotency-Key error codes and the replay header.
const (
	// CodeIdempotencyKeyReused: the key was used with another request (422).
	CodeIdempotencyKeyReused = "idempotency_key_reused"
	// CodeIdempotencyInProgress: a request with the key is still running (409).
	CodeIdempotencyInProgress = "idempotency_in_progress"
	// CodeIdempotencyRecordsLimited: the account's stored answers are at
	// --account-max-idempotency-bytes; a new key is refused (429).
	CodeIdempotencyRecordsLimited = "idempotency_records_limited"

	idempotencyHeader = "Idempotency-Key"
	replayedHeader    = "Idempotent-Replayed"
	// maxIdempotencyKey is the longest key accepted, in characters.
	maxIdempotencyKey = 255
	// maxStoredAnswer bounds a stored answer; the charging endpoints answer
	// with well under 4 KiB.
	maxStoredAnswer = 1 << 20
	// idemRedisTimeout bounds each Redis call of the idempotency layer.
	idemRedisTimeout = 3 * time.Second
)

// IdempotencyOptions tune the Idempotency-Key store (TTL of a stored
// answer, lease of a running claim).
type IdempotencyOptions = idempotency.Options

// idemMetrics counts Idempotency-Key outcomes.
type idemMetrics struct {
	outcomes *prometheus.CounterVec
}

func newIdemMetrics(reg *prometheus.Registry) *idemMetrics {
	m := &idemMetrics{outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bulkd_idempotency_requests_total",
		Help: "Requests with an Idempotency-Key by outcome: executed (first request), stored (its 2xx answer kept), released (an answer that kept nothing: non-2xx, or a 2xx that charged nothing; not stored), replayed, recovered (a dead process's committed job answered), limited (429: the account's stored answers at their limit), in_progress (409), reused (422 another request), invalid (422 bad key), error (Redis).",
	}, []string{"outcome"})}
	reg.MustRegister(m.outcomes)
	return m
}

func (m *idemMetrics) inc(outcome string) { m.outcomes.WithLabelValues(outcome).Inc() }

// idempotencyKeyFrom reads and checks the header: absent ("", nil), one
// value of 1..255 printable ASCII characters (the draft standard's quoted
// form "..." is accepted and its quotes dropped), or a 422.
func idempotencyKeyFrom(h http.Header) (string, *apierr.Error) {
	vals := h.Values(idempotencyHeader)
	if len(vals) == 0 {
		return "", nil
	}
	const loc = "header." + idempotencyHeader
	if len(vals) > 1 {
		return "", apierr.Unprocessable(apierr.Item{Loc: loc, Type: apierr.TypeValueError,
			Msg: "Send one Idempotency-Key header, not several."})
	}
	k := vals[0]
	if len(k) >= 2 && k[0] == '"' && k[len(k)-1] == '"' {
		k = k[1 : len(k)-1]
	}
	if k == "" {
		return "", apierr.Unprocessable(apierr.Item{Loc: loc, Type: apierr.TypeStringTooShort,
			Msg: "String should have at least 1 character"})
	}
	if len(k) > maxIdempotencyKey {
		return "", apierr.Unprocessable(apierr.Item{Loc: loc, Type: apierr.TypeStringTooLong,
			Msg: fmt.Sprintf("String should have at most %d characters", maxIdempotencyKey)})
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return "", apierr.Unprocessable(apierr.Item{Loc: loc, Type: apierr.TypeValueError,
				Msg: "Idempotency-Key must be printable ASCII (space to tilde); a UUID is a good choice."})
		}
	}
	return k, nil
}

// idempotent is the middleware of every charging route. It runs after
// authentication (the key's scope is the API key) and before the handler.
func (s *Server) idempotent(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, e := idempotencyKeyFrom(r.Header)
		if e != nil {
			s.idem.inc("invalid")
			apierr.Write(w, e)
			return
		}
		if key == "" {
			next.ServeHTTP(w, r)
			return
		}
		p := PrincipalFrom(r.Context())
		rk := idempotency.Key(p.Key.ID, key)
		var tok [16]byte
		_, _ = rand.Read(tok[:])
		owner := hex.EncodeToString(tok[:])

		ctx, cancel := context.WithTimeout(r.Context(), idemRedisTimeout)
		rec, err := s.idemStore.Claim(ctx, rk, owner)
		cancel()
		if err != nil {
			s.idem.inc("error")
			s.internalError(w, r, fmt.Errorf("idempotency claim: %w", err))
			return
		}
		switch rec.State {
		case idempotency.StateRun:
			s.idem.inc("in_progress")
			apierr.Write(w, errIdemInProgress("A request with this Idempotency-Key is still being processed."))
			return
		case idempotency.StateDone:
			s.replay(w, r, rec)
			return
		}
		c := &idemClaim{rk: rk, owner: owner, priorJob: rec.PriorJob, priorFP: rec.PriorFP, priorCharge: rec.PriorCharge}
		if !s.admitRecord(w, r, c, p.Account.ID) {
			return
		}
		s.idem.inc("executed")
		s.runClaimed(w, r, next, c)
	})
}

// admitRecord refuses a new key when the account's stored answers are at
// their limit (internal/idempotency, account.go): 429
// idempotency_records_limited, Retry-After until the oldest expires, the
// claim released (a dead request's job or charge stays on it for the
// next retry) and nothing run or charged. A key with a stored answer was
// replayed before this, and a request without a key never gets here. On
// false the answer is written.
func (s *Server) admitRecord(w http.ResponseWriter, r *http.Request, c *idemClaim, accountID string) bool {
	ctx, cancel := context.WithTimeout(r.Context(), idemRedisTimeout)
	defer cancel()
	full, err := s.idemStore.Admit(ctx, accountID)
	if err == nil && full == nil {
		return true
	}
	if rerr := s.idemStore.Release(ctx, c.rk, c.owner, c.keep()); rerr != nil {
		s.Logger.Error("idempotency: release failed; the key stays in progress until its lease ends",
			"request_id", RequestIDFrom(r.Context()), "err", rerr)
	}
	if err != nil {
		s.idem.inc("error")
		s.internalError(w, r, fmt.Errorf("idempotency: account usage: %w", err))
		return false
	}
	s.idem.inc("limited")
	e := apierr.WithCode(http.StatusTooManyRequests, CodeIdempotencyRecordsLimited, fmt.Sprintf(
		"Account limit idempotency_bytes reached: the answers this account's keys stored for their Idempotency-Keys hold %d bytes, and the limit is %d. "+
			"Nothing was run or charged. Retry after Retry-After, when the oldest stored answers expire (24 hours after their request), "+
			"or send this request without an Idempotency-Key; a key that already has an answer is still replayed.", full.Used, full.Max))
	e.RetryAfter = int((full.RetryAfter + time.Second - 1) / time.Second)
	apierr.Write(w, e)
	return false
}

// replay answers a request whose key has a stored answer: the same answer
// when the request is the same, else 422.
func (s *Server) replay(w http.ResponseWriter, r *http.Request, rec idempotency.Claimed) {
	fp, err := fingerprintRequest(r, s.MaxBodyBytes)
	if err != nil {
		apierr.Write(w, readError(err))
		return
	}
	if fp != rec.FP {
		s.idem.inc("reused")
		apierr.Write(w, errIdemReused())
		return
	}
	code, err := strconv.Atoi(rec.Code)
	if err != nil || code < 200 || code > 599 {
		s.idem.inc("error")
		s.internalError(w, r, fmt.Errorf("idempotency: stored status %q", rec.Code))
		return
	}
	s.idem.inc("replayed")
	h := w.Header()
	if rec.ContentType != "" {
		h.Set("Content-Type", rec.ContentType)
	}
	h.Set(replayedHeader, "true")
	h.Set("Content-Length", strconv.Itoa(len(rec.Body)))
	w.WriteHeader(code)
	_, _ = io.WriteString(w, rec.Body)
}

// runClaimed runs the handler under a claim: the lease is renewed while it
// runs, the body is hashed as it is read, the answer is recorded as it is
// written, and afterwards a 2xx answer is stored and anything else (or a
// panic) releases the claim.
func (s *Server) runClaimed(w http.ResponseWriter, r *http.Request, next http.Handler, c *idemClaim) {
	rk, owner := c.rk, c.owner
	hb := &hashingBody{rc: r.Body, h: newFingerprint(r)}
	r.Body = hb
	c.hb = hb
	r = r.WithContext(context.WithValue(r.Context(), idemClaimKey{}, c))
	rw := &recordingWriter{ResponseWriter: w, status: http.StatusOK}

	stop := make(chan struct{})
	renewed := make(chan struct{})
	go s.renewLease(r.Context(), rk, owner, stop, renewed)
	done := false
	defer func() {
		close(stop)
		<-renewed
		// Detached: a client that hung up must not leave the claim to
		// expire (or the answer unstored) because its context ended.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), idemRedisTimeout)
		defer cancel()
		if !done || rw.status < 200 || rw.status > 299 || !c.kept {
			// A panic (the recoverer answers 500), or an answer that
			// kept no charge, quota unit or job: the next request with
			// the key runs anew, at no cost.
			s.idem.inc("released")
			if err := s.idemStore.Release(ctx, rk, owner, c.keep()); err != nil {
				s.Logger.Error("idempotency: release failed; the key stays in progress until its lease ends",
					"request_id", RequestIDFrom(r.Context()), "err", err)
			}
			return
		}
		if rw.overflow {
			s.Logger.Error("idempotency: answer too large to store; a retry with this key will run again",
				"request_id", RequestIDFrom(r.Context()), "bytes", rw.size)
			_ = s.idemStore.Release(ctx, rk, owner, c.keep())
			return
		}
		fp, _ := hb.drainSum(s.MaxBodyBytes)
		ok, err := s.idemStore.Save(ctx, PrincipalFrom(r.Context()).Account.ID, rk, owner, fp, rw.status, rw.Header().Get("Content-Type"), rw.buf)
		switch {
		case ok && err != nil:
			s.Logger.Error("idempotency: answer stored but not counted against the account's limit",
				"request_id", RequestIDFrom(r.Context()), "err", err)
		case err != nil:
			s.Logger.Error("idempotency: storing the answer failed; a retry with this key will run again after the lease",
				"request_id", RequestIDFrom(r.Context()), "err", err)
		case !ok:
			s.Logger.Error("idempotency: claim lost before the answer was stored (lease expired)",
				"request_id", RequestIDFrom(r.Context()))
		default:
			s.idem.inc("stored")
		}
	}()
	next.ServeHTTP(rw, r)
	done = true
}

// idemClaim is a request's claim on its Idempotency-Key, in its context.
type idemClaim struct {
	rk, owner string
	hb        *hashingBody
	// priorJob and priorFP: the job a request with this key recorded
	// before it charged, and that request's fingerprint, when that
	// request's process stopped before storing its answer.
	priorJob, priorFP string
	// priorCharge: the charge a single request with this key recorded
	// before taking it, when that request's process stopped before
	// storing its answer.
	priorCharge string
	// settled: the prior job or charge was dealt with (a job committed:
	// answered with it; not: rolled back; a charge: reversed), and this
	// request's own recorded instead.
	settled bool
	// kept: the request kept what it took (markKept); only then is its
	// 2xx answer stored.
	kept bool
}

// markKept says r's request kept a charge, a quota unit or a job, so its
// answer is worth replaying under its Idempotency-Key (if it has one).
func markKept(r *http.Request) {
	if c, _ := r.Context().Value(idemClaimKey{}).(*idemClaim); c != nil {
		c.kept = true
	}
}

// keep is Release's flag: true while the record holds a dead request's
// job or charge nobody has dealt with yet.
func (c *idemClaim) keep() bool {
	return (c.priorJob != "" || c.priorCharge != "") && !c.settled
}

// newChargeID names the charge (or quota consumption) a single request is
// about to take. Under an Idempotency-Key it first reverses the charge of
// a request with the key whose process died before answering (the client
// never got what that charge paid for; a charge still on its way finds the
// reversal's tombstone), then records the new id on the claim before it is
// taken. On false the answer is written.
func (s *Server) newChargeID(w http.ResponseWriter, r *http.Request, accountID, prefix string) (string, bool) {
	id := prefix + uuid.NewString()
	c, _ := r.Context().Value(idemClaimKey{}).(*idemClaim)
	if c == nil {
		return id, true
	}
	if c.priorCharge != "" && !c.settled {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
		_, err := s.Billing.Reverse(rctx, accountID, c.priorCharge, "request taken over by a retry with its Idempotency-Key")
		cancel()
		if err != nil && !errors.Is(err, billing.ErrChargeNotFound) {
			s.internalError(w, r, fmt.Errorf("idempotency: reverse the dead request's charge %s: %w", c.priorCharge, err))
			return "", false
		}
		s.idem.inc("recovered")
	}
	c.settled = true
	if !s.record(w, r, c, "charge", id) {
		return "", false
	}
	return id, true
}

// record notes field-value pairs on c's record (idempotency.Store.Record);
// on false the answer (500/503, or 409 when the claim was lost) is written.
func (s *Server) record(w http.ResponseWriter, r *http.Request, c *idemClaim, fieldValues ...any) bool {
	ctx, cancel := context.WithTimeout(r.Context(), idemRedisTimeout)
	defer cancel()
	ok, err := s.idemStore.Record(ctx, c.rk, c.owner, fieldValues...)
	switch {
	case err != nil:
		s.internalError(w, r, fmt.Errorf("idempotency: record %v: %w", fieldValues[0], err))
		return false
	case !ok:
		apierr.Write(w, errIdemInProgress("Another request with this Idempotency-Key took over while this one was read."))
		return false
	}
	return true
}

// errIdemInProgress is the 409 of a key another request holds.
func errIdemInProgress(why string) *apierr.Error {
	e := apierr.WithCode(http.StatusConflict, CodeIdempotencyInProgress, why+" Retry after a second to get its answer.")
	e.RetryAfter = 1
	return e
}

type idemClaimKey struct{}

// idemSubmission prepares a bulk submission under an Idempotency-Key, after
// its body is decoded and before anything is charged. Without a key it
// returns ("", nil, true). When a request with the key died before storing
// its answer and had committed its job, it returns that job (answer with
// it; nothing is charged again); another body than that request's is the
// 422. Otherwise it records a new job id on the claim and returns it: the
// submission must use it, so that a retry after a crash finds the job. On
// false the answer is written.
func (s *Server) idemSubmission(w http.ResponseWriter, r *http.Request, accountID, keyID string) (string, *jobs.Job, bool) {
	c, _ := r.Context().Value(idemClaimKey{}).(*idemClaim)
	if c == nil {
		return "", nil, true
	}
	fp, _ := c.hb.drainSum(s.MaxBodyBytes) // a read error here: the decoder already saw the whole body
	if c.priorJob != "" {
		if c.priorFP != "" && c.priorFP != fp {
			s.idem.inc("reused")
			apierr.Write(w, errIdemReused())
			return "", nil, false
		}
		j, err := s.Jobs.Takeover(r.Context(), accountID, keyID, c.priorJob)
		if err != nil {
			s.internalError(w, r, fmt.Errorf("idempotency: take over job %s: %w", c.priorJob, err))
			return "", nil, false
		}
		c.settled = true
		if j != nil {
			s.idem.inc("recovered")
			return "", j, true
		}
	}
	id := uuid.NewString()
	if !s.record(w, r, c, "job", id, "fp", fp) {
		return "", nil, false
	}
	return id, nil, true
}

func errIdemReused() *apierr.Error {
	e := apierr.Unprocessable(apierr.Item{Loc: "header." + idempotencyHeader, Type: CodeIdempotencyKeyReused,
		Msg: "This Idempotency-Key was already used with a different request (method, path, query or body) in the last 24 hours; use a new key for a new request."})
	e.Code = CodeIdempotencyKeyReused
	return e
}

// renewLease renews a claim every Lease/3 until stop is closed.
func (s *Server) renewLease(ctx context.Context, rk, owner string, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	ctx = context.WithoutCancel(ctx)
	t := time.NewTicker(s.Idempotency.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			rctx, cancel := context.WithTimeout(ctx, idemRedisTimeout)
			ok, err := s.idemStore.Renew(rctx, rk, owner)
			cancel()
			if err != nil {
				s.Logger.Warn("idempotency: lease renewal failed", "err", err)
			} else if !ok {
				s.Logger.Error("idempotency: claim lost while the request runs (lease expired)")
				return
			}
		}
	}
}

// newFingerprint starts a request's fingerprint: method, path and query
// (GET /v1/verify and GET /v1/company-enrichment carry their input there).
// The body follows.
func newFingerprint(r *http.Request) hash.Hash {
	h := sha256.New()
	_, _ = fmt.Fprintf(h, "%s\n%s\n%s\n", r.Method, r.URL.Path, r.URL.Query().Encode())
	return h
}

// fingerprintRequest hashes a whole request (a retry's), reading at most
// maxBody+1 bytes of its body: as many as the first request's fingerprint
// covers.
func fingerprintRequest(r *http.Request, maxBody int64) (string, error) {
	return (&hashingBody{rc: r.Body, h: newFingerprint(r)}).drainSum(maxBody)
}

// hashingBody hashes a request body as it is read.
type hashingBody struct {
	rc io.ReadCloser
	h  hash.Hash
	n  int64
}

func (b *hashingBody) Read(p []byte) (int, error) {
	if b.rc == nil {
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	b.h.Write(p[:n])
	b.n += int64(n)
	return n, err
}

func (b *hashingBody) Close() error {
	if b.rc == nil {
		return nil
	}
	return b.rc.Close()
}

// drainSum hashes what is left of the body, up to maxBody+1 bytes in all
// (what a request's fingerprint covers, however far the handler read), and
// returns the fingerprint.
func (b *hashingBody) drainSum(maxBody int64) (string, error) {
	_, err := io.Copy(io.Discard, io.LimitReader(b, max(0, maxBody+1-b.n)))
	return hex.EncodeToString(b.h.Sum(nil)), err
}

// recordingWriter passes an answer through and keeps a copy of it (status
// and up to maxStoredAnswer bytes).
type recordingWriter struct {
	http.ResponseWriter
	status   int
	wrote    bool
	buf      []byte
	size     int
	overflow bool
}

func (w *recordingWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	w.size += len(p)
	if !w.overflow {
		if len(w.buf)+len(p) > maxStoredAnswer {
			w.overflow, w.buf = true, nil
		} else {
			w.buf = append(w.buf, p...)
		}
	}
	return w.ResponseWriter.Write(p)
}

func (w *recordingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
