package apiserver

// Admission control: a process-wide bound on the bytes of request bodies
// being decoded (and held decoded) at once. Without it, twenty concurrent
// 64 MiB submissions would each stream into their own row slices and
// dedupe maps at the same time and take the process past its memory limit;
// with it, a body that does not fit within a short wait is answered 503
// server_busy with Retry-After before a byte of it is read.
//
// A request reserves its weight from the headers alone: its Content-Length,
// or the route's body limit when the length is unknown (chunked), since
// that is the most it can make us read. The reservation is held until the
// handler returns, not only while the body streams in: the decoded rows
// live until the job is stored, and they are what the bound is for.

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/go-chi/chi/v5"
	"golang.org/x/sync/semaphore"

	"github.com/bulkd/bulkd/internal/apierr"
)

const (
	// defaultAdmissionWait is how long a body waits for room before it is
	// turned away: long enough to ride out a burst of small bodies behind
	// a large one, short enough that a client is not left hanging on a
	// server that is full.
	defaultAdmissionWait = 2 * time.Second
	// admissionRetryAfter is the Retry-After of a 503 server_busy, in
	// seconds: about the time a 64 MiB submission takes to decode and store
	// on one core (docs/reliability.md).
	admissionRetryAfter = 2
	// decodedPerBodyByte is how many bytes of heap one byte of a
	// submission body costs while it is decoded and stored, at the worst
	// measured (hack/loadgen admission: company rows of long network URLs);
	// the automatic bound keeps that product under a quarter of the Go
	// memory limit.
	decodedPerBodyByte = 4
)

// DefaultMaxDecodingBytes is the bound --max-decoding-bytes 0 stands for:
// with a Go memory limit (GOMEMLIMIT, or memlimit's share of the cgroup
// limit), what fits in a quarter of it at decodedPerBodyByte heap bytes a
// body byte (the rest is for the results cache, Redis replies and the
// runtime); without one, four bodies of the largest size. Never less than
// one body of the largest size, or such a body could never be admitted.
func DefaultMaxDecodingBytes(maxBodyBytes int64) int64 {
	n := 4 * maxBodyBytes
	if lim := debug.SetMemoryLimit(-1); lim > 0 && lim != math.MaxInt64 {
		n = lim / 4 / decodedPerBodyByte
	}
	return max(n, maxBodyBytes)
}

// admission is the semaphore and its settings.
type admission struct {
	sem  *semaphore.Weighted
	size int64
	wait time.Duration
}

func newAdmission(size int64, wait time.Duration) *admission {
	return &admission{sem: semaphore.NewWeighted(size), size: size, wait: wait}
}

// bodyLimit is the largest body the route with this pattern reads: what a
// body of unknown length is weighed at, and past which a declared length is
// refused at once. It must agree with the limits the handlers read with.
func (s *Server) bodyLimit(pattern string) int64 {
	switch pattern {
	case "/v1/email-lookup", "/v1/unlimited/email-lookup":
		return min(s.MaxBodyBytes, maxLookupBody)
	case "/v1/content-spam-check":
		return min(s.MaxBodyBytes, maxSpamBody)
	}
	return s.MaxBodyBytes
}

// admit is the admission middleware of the authenticated routes (after
// authentication, so a request without a valid key reserves nothing and
// every answer here carries the rate-limit headers; before any middleware
// or handler that reads the body). Requests without a body pass untouched.
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
		n := limit
		if r.ContentLength > 0 {
			n = r.ContentLength
		}
		n = min(n, s.admission.size)
		ctx, cancel := context.WithTimeout(r.Context(), s.admission.wait)
		err := s.admission.sem.Acquire(ctx, n)
		cancel()
		if err != nil {
			if r.Context().Err() != nil {
				return // the client went away while it waited
			}
			s.Metrics.AdmissionRejected.Inc()
			s.Logger.Debug("admission: body turned away, the server is decoding its limit",
				"request_id", RequestIDFrom(r.Context()), "route", pattern, "bytes", n, "max_decoding_bytes", s.admission.size)
			e := apierr.WithCode(http.StatusServiceUnavailable, apierr.CodeServerBusy, fmt.Sprintf(
				"The server is busy decoding other submissions (at most %d bytes at once) and could not take this %d-byte body. "+
					"Nothing was read or charged; retry after %d s.", s.admission.size, n, admissionRetryAfter))
			e.RetryAfter = admissionRetryAfter
			apierr.Write(w, e)
			return
		}
		s.Metrics.AdmissionBytes.Add(float64(n))
		defer func() {
			s.admission.sem.Release(n)
			s.Metrics.AdmissionBytes.Sub(float64(n))
		}()
		next.ServeHTTP(w, r)
	})
}
