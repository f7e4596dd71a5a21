package apiserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/ratelimit"
)

type ctxKey int

const (
	principalKey ctxKey = iota
	requestIDKey
	routeInfoKey
)

// PrincipalFrom returns the authenticated key and account of a request.
func PrincipalFrom(ctx context.Context) *accounts.Principal {
	p, _ := ctx.Value(principalKey).(*accounts.Principal)
	return p
}

// RequestIDFrom returns the request id.
func RequestIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

var safeRequestID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// requestID takes a caller's X-Request-ID when it is short and plain (so it
// cannot inject anything into logs), otherwise makes one, and echoes it.
func (s *Server) requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-ID")
		if !safeRequestID.MatchString(id) {
			var b [8]byte
			_, _ = rand.Read(b[:])
			id = hex.EncodeToString(b[:])
		}
		h := w.Header()
		h.Set("X-Request-ID", id)
		// Answers are per key (and /metrics, /readyz are live): no cache
		// may keep any of them.
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey, id)))
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// observe logs each request and feeds the request metrics. Their labels
// take only values bulkd chooses, never what a client sends, so that the
// series stay a fixed set however many requests invent methods or paths
// (issue 18, item 4: 100 requests with made-up methods grew /metrics from
// 262 to 2,080 lines): the route is the chi route pattern (never the raw
// path, which would carry job ids), "unmatched" for whatever no route took
// (404, 405), and the method is one of the standard ones or OTHER.
func (s *Server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		info := &routeInfo{}
		r = r.WithContext(context.WithValue(r.Context(), routeInfoKey, info))
		next.ServeHTTP(sw, r)
		route := "unmatched"
		if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" && !info.unmatched {
			route = rc.RoutePattern()
		}
		method := methodLabel(r.Method)
		d := time.Since(start)
		s.Metrics.Requests.WithLabelValues(route, method, strconv.Itoa(sw.status)).Inc()
		s.Metrics.Latency.WithLabelValues(route, method).Observe(d.Seconds())
		attrs := []any{"request_id", RequestIDFrom(r.Context()), "method", method, "route", route,
			"status", sw.status, "duration_ms", float64(d.Microseconds()) / 1000}
		if p := PrincipalFrom(r.Context()); p != nil {
			attrs = append(attrs, "key", p.Key.Prefix, "account", p.Account.ID)
		}
		switch {
		case sw.status == http.StatusServiceUnavailable:
			// Load shed (server_busy) or an engine that is down: the
			// server works as designed, and a burst must not flood the
			// error log.
			s.Logger.Warn("request", attrs...)
		case sw.status >= 500:
			s.Logger.Error("request", attrs...)
		default:
			s.Logger.Debug("request", attrs...)
		}
	})
}

// routeInfo is what observe learns from further down the chain: whether
// the request was answered by no route (unmatched), whatever partial
// pattern chi matched on the way (a 404 under /v1 has "/v1/*").
type routeInfo struct{ unmatched bool }

// methodLabel is the method label of the request metrics: the methods of
// RFC 9110 and PATCH as they are, anything else OTHER.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "OTHER"
}

// recoverer turns a panic into a plain 500; the stack goes to the log only.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.Logger.Error("panic serving request", "request_id", RequestIDFrom(r.Context()),
					"panic", v, "stack", string(debug.Stack()))
				apierr.Write(w, apierr.ErrInternal)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// authenticate applies SPEC section 5 in this order: a valid key (401), the
// key's rate limit (429; every response after this point carries the
// X-RateLimit-* headers), the key's kind (403 wrong_key_plan), and for an
// unlimited-plan key an active plan (402 subscription_inactive).
//
// The header name is matched case-insensitively: HTTP field names are
// case-insensitive and HTTP/2 lowercases them, so "case-sensitive" in the
// spec can only sensibly mean the exact name X-API-Key, not its letter case.
func (s *Server) authenticate(k KeyKind) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r, p, rl, per, err := s.keyAndLimit(w, r)
			switch {
			case err != nil:
				s.internalError(w, r, err)
				return
			case p == nil:
				s.Metrics.AuthFailures.Inc()
				apierr.Write(w, apierr.ErrAPIKeyRequired)
				return
			case !rl.Allowed:
				s.rateLimited(w, rl, per)
				return
			}

			if e := s.keyKindError(k, p); e != nil {
				apierr.Write(w, e)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// keyKindError is SPEC 5's last two steps for an authenticated
// principal: the key's kind against the route's (403 wrong_key_plan)
// and, for an unlimited-plan route, an active plan (402
// subscription_inactive); nil when p may use a route taking keys of kind k.
func (s *Server) keyKindError(k KeyKind, p *accounts.Principal) *apierr.Error {
	switch {
	case k == Metered && p.Key.Type != accounts.PayAsYouGo:
		return apierr.WithCode(http.StatusForbidden, apierr.CodeWrongKeyPlan,
			"This endpoint takes a pay-as-you-go API key; unlimited-plan keys work only on /v1/unlimited/* endpoints.")
	case k == UnlimitedPlan && p.Key.Type != accounts.Unlimited:
		return apierr.WithCode(http.StatusForbidden, apierr.CodeWrongKeyPlan,
			"This endpoint takes an unlimited-plan API key; pay-as-you-go keys work only on the credit-metered /v1 endpoints.")
	case k == UnlimitedPlan && !p.Account.PlanActive(s.Now()):
		return apierr.WithCode(http.StatusPaymentRequired, apierr.CodeSubscriptionInactive,
			"The unlimited plan of this account is not active. Renew the subscription to use /v1/unlimited/* endpoints.")
	}
	return nil
}

// keyAndLimit is SPEC 5's first two steps: it authenticates the request's
// X-API-Key and, for a valid key, spends one request of the key's rate
// limit and sets the X-RateLimit-* headers on w, so that every answer from
// here on carries them. p is nil when there is no single valid key (nothing
// is counted then); rl.Allowed is false when the key is over its limit, or
// its account over its request-rate ceiling (all its keys together,
// limits.go), and per then says which, for the 429's detail. The request
// returned carries the principal.
func (s *Server) keyAndLimit(w http.ResponseWriter, r *http.Request) (_ *http.Request, p *accounts.Principal, rl ratelimit.Result, per string, err error) {
	per = "requests per second per API key"
	vals := r.Header.Values("X-API-Key")
	if len(vals) != 1 {
		return r, nil, rl, per, nil
	}
	p, err = s.Accounts.Authenticate(r.Context(), vals[0])
	if errors.Is(err, accounts.ErrInvalidKey) {
		return r, nil, rl, per, nil
	}
	if err != nil {
		return r, nil, rl, per, fmt.Errorf("authenticate key: %w", err)
	}
	r = r.WithContext(context.WithValue(r.Context(), principalKey, p))
	// The key's limit and its account's ceiling (limits.go: many keys
	// must not multiply an account's rate), in one round trip. The
	// headers are the key's (SPEC 8), with nothing remaining when the
	// account refuses.
	pr, err := s.Limiter.KeyAndAccount(r.Context(), p.Key.ID, p.Account.ID, s.accountRate(p))
	if err != nil {
		return r, nil, rl, per, fmt.Errorf("rate limit of key %s: %w", p.Key.Prefix, err)
	}
	rl = pr.Key
	// Set by map key, not Header.Set, so the names go out spelled as in
	// the spec rather than canonicalised to X-Ratelimit-*.
	h := w.Header()
	h["X-RateLimit-Limit"] = []string{strconv.Itoa(rl.Limit)}
	h["X-RateLimit-Remaining"] = []string{strconv.Itoa(rl.Remaining)}
	h["X-RateLimit-Reset"] = []string{strconv.FormatInt(rl.Reset.Unix(), 10)}
	if pr.ByAccount {
		return r, p, pr.Account, "requests per second per account (all its API keys together)", nil
	}
	return r, p, rl, per, nil
}

// unmatched answers a request no route takes (404) or whose method its
// route does not take (405). No key is needed to learn that; but a /v1
// request that carries a valid key is an authenticated request like any
// other (SPEC 8): it counts against the key's limit, which applies across
// all of /v1/*, and its answer carries the rate-limit headers (or is the
// 429 when the key is over its limit). Unknown paths outside /v1 are not
// the API's, and stay keyless.
func (s *Server) unmatched(w http.ResponseWriter, r *http.Request, e *apierr.Error) {
	if info, _ := r.Context().Value(routeInfoKey).(*routeInfo); info != nil {
		info.unmatched = true
	}
	if p := r.URL.Path; (p == "/v1" || strings.HasPrefix(p, "/v1/")) && r.Header.Get("X-API-Key") != "" {
		_, pr, rl, per, err := s.keyAndLimit(w, r)
		switch {
		case err != nil:
			// The route does not exist whatever the key: answer that
			// rather than a 500, without the headers (nothing was counted).
			s.Logger.Warn("rate limit of an unmatched request", "request_id", RequestIDFrom(r.Context()), "err", err)
		case pr != nil && !rl.Allowed:
			s.rateLimited(w, rl, per)
			return
		}
	}
	apierr.Write(w, e)
}

// internalError logs err and answers a generic 500: nothing internal leaks.
// When Redis is what failed (restarting, loading its append-only file), the
// answer is 503 temporarily_unavailable with Retry-After instead
// (unavailable.go): the request was fine, and a retry shortly after works.
func (s *Server) internalError(w http.ResponseWriter, r *http.Request, err error) {
	apierr.Write(w, s.internalAPIError(r.Context(), err))
}

// internalAPIError logs err and returns the error internalError answers:
// for callers that answer it themselves (the dashboard, dashboard.go).
func (s *Server) internalAPIError(ctx context.Context, err error) *apierr.Error {
	if s.redisUnavailable(ctx, err) {
		s.Logger.Warn("redis unavailable", "request_id", RequestIDFrom(ctx), "err", err)
		return errTemporarilyUnavailable()
	}
	s.Logger.Error("internal error", "request_id", RequestIDFrom(ctx), "err", err)
	return apierr.ErrInternal
}

// serverError logs err and answers the generic 500, whatever failed: for
// failures that are not the service's own Redis (a downstream store), where
// temporarily_unavailable would be the wrong answer.
func (s *Server) serverError(w http.ResponseWriter, r *http.Request, err error) {
	s.Logger.Error("internal error", "request_id", RequestIDFrom(r.Context()), "err", err)
	apierr.Write(w, apierr.ErrInternal)
}

// rateLimited answers a request over a rate limit: 429 rate_limited with
// Retry-After; per says what the limit counts.
func (s *Server) rateLimited(w http.ResponseWriter, rl ratelimit.Result, per string) {
	s.Metrics.RateLimited.Inc()
	e := apierr.WithCode(http.StatusTooManyRequests, apierr.CodeRateLimited,
		"Rate limit exceeded: at most "+strconv.Itoa(rl.Limit)+" "+per+". Retry after "+strconv.Itoa(rl.RetryAfter)+" s.")
	e.RetryAfter = rl.RetryAfter
	apierr.Write(w, e)
}
