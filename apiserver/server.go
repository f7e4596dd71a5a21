// Package apiserver is bulkd's HTTP API (SPEC section 4): routing,
// authentication, rate limiting, errors, and the handlers. Both run modes
// (standalone and Kubernetes) serve this same API; they differ only in the
// job executor behind it.
package apiserver

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/idempotency"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/privacy"
	"github.com/bulkd/bulkd/internal/ratelimit"
	"github.com/bulkd/bulkd/internal/webhook"
)

// Deps are the parts the API is built from.
type Deps struct {
	Redis        redis.UniversalClient
	Accounts     *accounts.Store
	Billing      *billing.Billing
	Limiter      *ratelimit.Limiter
	Plans        billing.Plans
	Logger       *slog.Logger
	Metrics      *Metrics
	MaxBodyBytes int64
	// MaxDecodingBytes bounds the bytes of request bodies being decoded at
	// once across the process (admission.go); 0 is DefaultMaxDecodingBytes.
	MaxDecodingBytes int64
	// AdmissionWait is how long a body waits for room under
	// MaxDecodingBytes before it is answered 503 server_busy (0: 2 s).
	AdmissionWait time.Duration
	Now           func() time.Time

	// MaxDecodingBytesPerAccount is one account's share of
	// MaxDecodingBytes (a 429 account_busy past it); 0 is
	// DefaultMaxDecodingBytesPerAccount.
	MaxDecodingBytesPerAccount int64
	// BodyMinRate is the least rate, in bytes a second, a request body
	// must arrive at after BodyGrace (a 408 below it); 0: no such rule,
	// only the HTTP server's read timeout.
	BodyMinRate int64
	BodyGrace   time.Duration // 0: 5 s

	Jobs *jobs.Engine
	// Bulk are the families' bulk endpoints, mounted in order.
	Bulk []Bulk
	// Singles are the families' single-input endpoints (single.go), in
	// order: the API names no family, so internal/serve lists every
	// family's single mounts here as it lists their bulk ones above.
	Singles []Single
	// Spam answers POST /v1/content-spam-check (spamcheck.go); without it
	// (or without its engine) the route answers 503 engine_unavailable.
	Spam *SpamCheck
	// Idempotency tunes the Idempotency-Key store of the charging
	// requests (zero: 24 h answers, 30 s leases).
	Idempotency IdempotencyOptions
	// Dashboard, when set, builds the handler served under /dashboard
	// (internal/dashboard: its own session sign-in; it never
	// authenticates /v1/*). It is given the API it submits through: the
	// dashboard uses the API and the API mounts the dashboard, and a
	// constructor called once, here, closes that loop where a field set
	// after both were built used to.
	Dashboard func(api *Server) http.Handler
	// Suppress is the suppression list of erased people (docs/privacy.md):
	// a submission's inputs naming one are answered suppressed, not
	// charged, never processed. Nil: nothing is suppressed.
	Suppress *privacy.Suppressions
	// Webhooks is the policy a submission's webhook_url must pass
	// (webhook.go); nil: https to public addresses only.
	Webhooks *webhook.Policy
	// Limits are the default per-account limits (limits.go): the API
	// enforces RequestRate across an account's keys; the engine, the
	// account store and the dashboard the others. Zero: no limit.
	Limits accounts.Limits
	// ReadyDetails, when set, adds its map as "details" to /readyz's 200
	// answer: warnings an operator should see that do not make the
	// process unready (the SMTP egresses' HELO check, docs/egress.md).
	ReadyDetails func() map[string]any
}

// Server holds the API's state.
type Server struct {
	Deps
	router    chi.Router
	admission *admission
	idem      *idemMetrics
	idemStore *idempotency.Store
	// spamChecks counts spam checks by outcome (spamcheck.go).
	spamChecks *prometheus.CounterVec
}

// New builds the API.
func New(d Deps) *Server {
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.Metrics == nil {
		d.Metrics = NewMetrics()
	}
	if d.Plans == nil {
		d.Plans = billing.DefaultPlans()
	}
	if d.MaxBodyBytes == 0 {
		d.MaxBodyBytes = 64 << 20
	}
	if d.MaxDecodingBytes == 0 {
		d.MaxDecodingBytes = DefaultMaxDecodingBytes(d.MaxBodyBytes)
	}
	// A body of the largest size must fit, or it could never be admitted.
	d.MaxDecodingBytes = max(d.MaxDecodingBytes, d.MaxBodyBytes)
	if d.AdmissionWait <= 0 {
		d.AdmissionWait = defaultAdmissionWait
	}
	if d.MaxDecodingBytesPerAccount == 0 {
		d.MaxDecodingBytesPerAccount = DefaultMaxDecodingBytesPerAccount(d.MaxDecodingBytes, d.MaxBodyBytes)
	}
	// At least one body of the largest size, at most the whole bound.
	d.MaxDecodingBytesPerAccount = min(max(d.MaxDecodingBytesPerAccount, d.MaxBodyBytes), d.MaxDecodingBytes)
	if d.BodyGrace <= 0 {
		d.BodyGrace = defaultBodyGrace
	}
	d.Idempotency = d.Idempotency.WithDefaults()
	s := &Server{Deps: d, idem: newIdemMetrics(d.Metrics.Registry)}
	// The store reads the API's clock through s, as the handlers do.
	s.idemStore = idempotency.New(d.Redis, d.Idempotency, func() time.Time { return s.Now() })
	s.spamChecks = newSpamMetrics(d.Metrics.Registry)
	if d.Jobs != nil && d.Jobs.RowCache != nil {
		d.Metrics.Registry.MustRegister(rowCacheCollector{d.Jobs.RowCache})
	}
	s.admission = newAdmission(d.MaxDecodingBytes, d.MaxDecodingBytesPerAccount, d.AdmissionWait, d.BodyMinRate, d.BodyGrace)
	d.Metrics.AdmissionMax.Set(float64(d.MaxDecodingBytes))
	d.Metrics.AdmissionAccountMax.Set(float64(d.MaxDecodingBytesPerAccount))
	if d.MaxDecodingBytesPerAccount >= d.MaxDecodingBytes {
		d.Logger.Warn("admission: one account's share of --max-decoding-bytes is all of it, so one account's bodies can turn every other account away; "+
			"give --max-decoding-bytes more than --max-decoding-bytes-per-account",
			"max_decoding_bytes", d.MaxDecodingBytes, "max_decoding_bytes_per_account", d.MaxDecodingBytesPerAccount)
	}
	s.router = s.routes()
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.router.ServeHTTP(w, r) }

// MetricsHandler serves GET /metrics (Prometheus) and nothing else. It is
// not on the API's router: bulkd serves it on a listener of its own
// (--metrics-listen, internal/serve), so that the API's address, and the
// chart's API Service, never expose the process's internals.
func (s *Server) MetricsHandler() http.Handler {
	prom := promhttp.HandlerFor(s.Metrics.Registry, promhttp.HandlerOpts{})
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		prom.ServeHTTP(w, r)
	})
	return mux
}

// Routes is the router, for walking its routes (tests sweep every route).
func (s *Server) Routes() chi.Routes { return s.router }

// KeyKind is which kind of key a route accepts (SPEC section 5 calls it
// the key's family; a family, in this code, is a kind of work:
// internal/family).
type KeyKind int

const (
	// Metered routes take pay-as-you-go keys.
	Metered KeyKind = iota
	// UnlimitedPlan routes take unlimited keys with an active plan.
	UnlimitedPlan
	// AnyKey routes take both (POST /v1/content-spam-check).
	AnyKey
)

func (s *Server) routes() chi.Router {
	r := chi.NewRouter()
	r.Use(s.requestID, s.observe, s.recoverer)
	r.NotFound(func(w http.ResponseWriter, req *http.Request) { s.unmatched(w, req, apierr.ErrNotFound) })
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Allow", allowedMethods(r, req.URL.Path))
		s.unmatched(w, req, apierr.New(http.StatusMethodNotAllowed, "Method "+req.Method+" is not allowed on "+req.URL.Path))
	})

	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", s.readyz)
	r.Get("/openapi.json", serveOpenAPI)
	if s.Dashboard != nil {
		// Everything but the router is built: the dashboard may keep s.
		r.Mount("/dashboard", s.Dashboard(s))
	}

	// Every route that charges (credits or quota) takes an Idempotency-Key
	// (s.idempotent, idempotency.go): the bulk submissions (mountBulk),
	// the single requests (mountSingles), and the content spam
	// check (its daily allowance).
	r.Route("/v1", func(v1 chi.Router) {
		v1.Group(func(g chi.Router) {
			g.Use(s.authenticate(Metered), s.admit)
			g.Get("/credits", s.getCredits)
			s.mountSingles(g, Metered)
			s.mountBulks(g, Metered)
		})
		v1.Group(func(g chi.Router) {
			g.Use(s.authenticate(AnyKey), s.admit)
			// It takes one check from the daily allowance: a retry with the
			// same Idempotency-Key gets the first answer, not a second check.
			g.With(s.idempotent).Post("/content-spam-check", s.contentSpamCheck)
		})
		// A group, not a sub-router: a sub-router's middleware would also
		// guard its 404 and 405 answers, which need no key (unmatched gives
		// them the rate-limit headers when a valid key comes anyway).
		v1.Group(func(g chi.Router) {
			g.Use(s.authenticate(UnlimitedPlan), s.admit)
			g.Get("/unlimited/usage", s.getUsage)
			s.mountSingles(g, UnlimitedPlan)
			s.mountBulks(g, UnlimitedPlan)
		})
	})
	return r
}

// mountBulks mounts the bulk endpoints that take keys of kind k.
func (s *Server) mountBulks(g chi.Router, k KeyKind) {
	for _, b := range s.Bulk {
		if b.Keys == k {
			s.mountBulk(g, b)
		}
	}
}

// routedMethods are the methods allowedMethods asks the router about.
var routedMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions}

// allowedMethods lists the methods routes answers on path, for the Allow
// header a 405 must carry (RFC 9110 section 15.5.6). 405s are rare, so asking
// the router once per method costs nothing that matters.
func allowedMethods(routes chi.Routes, path string) string {
	var ms []string
	for _, m := range routedMethods {
		if routes.Match(chi.NewRouteContext(), m, path) {
			ms = append(ms, m)
		}
	}
	return strings.Join(ms, ", ")
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.Redis.Ping(ctx).Err(); err != nil {
		s.Logger.Warn("readiness: redis unreachable", "err", err)
		apierr.Write(w, apierr.New(http.StatusServiceUnavailable, "Redis is unreachable"))
		return
	}
	body := map[string]any{"status": "ready"}
	if s.ReadyDetails != nil {
		body["details"] = s.ReadyDetails()
	}
	writeJSON(w, http.StatusOK, body)
}
