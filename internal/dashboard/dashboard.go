// Package dashboard is the account dashboard served under /dashboard by
// the same binary as the API (both `bulkd serve` and `bulkd apiserver`):
// server-rendered pages (html/template) with one small stylesheet and one
// small progressive script, both embedded; no build step, nothing fetched
// from elsewhere.
//
// Dashboard users sign in with a password or a one-time link
// (internal/dashboard/users); a session is a random id in the HttpOnly
// cookie bulkd_session, scoped to /dashboard, stored hashed in Redis. Every
// POST is checked twice against cross-site requests: its Origin (or
// Referer) must be this host, and a signed-in form must carry the
// session's CSRF token. A dashboard session never authenticates /v1/*:
// the API reads only X-API-Key.
//
// Jobs made here go through the API's own submission path (API.SubmitAs,
// which *apiserver.Server implements) with the account's pseudo key "dashboard",
// so they are charged, quota-checked and refused exactly like the API's,
// and the ledger says where they came from.
package dashboard

import (
	"context"
	"embed"
	"errors"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/apiserver"
	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/dashboard/users"
	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/jobs"
)

// Base is where the dashboard is mounted.
const Base = "/dashboard"

// CookieName is the session cookie.
const CookieName = "bulkd_session"

// DashboardKeyID is the pseudo key id of jobs made in the dashboard (the
// ledger's key of their charges).
const DashboardKeyID = "dashboard"

//go:embed templates/*.html static/*
var assets embed.FS

// API is what the dashboard needs from the HTTP API (*apiserver.Server
// implements it): a submission is quoted, charged, quota-checked and
// refused, and a job's results and an account's usage are read, exactly
// as the API's own endpoints do, so the two never disagree.
type API interface {
	// Mounts are the bulk endpoints a job can be submitted to.
	Mounts() []apiserver.Bulk
	// QuoteAs says what a submission of body to m by p would cost,
	// charging nothing; SubmitAs makes it (POST /v1{m.Path} without
	// HTTP). Their errors are the API's.
	QuoteAs(ctx context.Context, p *accounts.Principal, m apiserver.Bulk, body io.Reader) (*apiserver.Quote, *apierr.Error)
	SubmitAs(ctx context.Context, p *accounts.Principal, m apiserver.Bulk, body io.Reader) (*jobs.Job, *apierr.Error)
	// Usage is GET /v1/unlimited/usage's answer for a.
	Usage(ctx context.Context, a *accounts.Account) (apiserver.UsageResponse, error)
	// FamilyOf is the family of a job (false: none this build mounts).
	FamilyOf(j *jobs.Job) (family.Family, bool)
	// ResultCells are rows [offset, offset+limit) of a job as its CSV
	// download's cells; WriteJobCSV writes the whole download.
	ResultCells(ctx context.Context, j *jobs.Job, offset, limit int) ([]string, [][]string, *apierr.Error)
	WriteJobCSV(w http.ResponseWriter, r *http.Request, j *jobs.Job) *apierr.Error
}

// Deps are what the dashboard is built from.
type Deps struct {
	// API is what the dashboard submits through and reads results from.
	API API
	// Accounts, Jobs and Billing are the stores the API reads too: the
	// account and its keys, its jobs, its ledger.
	Accounts *accounts.Store
	Jobs     *jobs.Engine
	Billing  *billing.Billing
	// Redis holds the dashboard's drafts (uploads being mapped), bounded
	// per account by Limits (the API's per-account limits).
	Redis  redis.UniversalClient
	Limits accounts.Limits
	Users  *users.Store
	// AllowHTTP leaves the session cookie's Secure attribute off, for
	// plain-HTTP local development (make run); never in production.
	AllowHTTP bool
	// Origin, when set, is the only Origin (scheme://host[:port]) a POST
	// may come from; empty: one whose host is the request's Host.
	Origin string
	// TrustedProxies are the ranges of the proxies in front of bulkd
	// (--trusted-proxies): only from a peer in them is X-Forwarded-For
	// read for the client's address (clientIP). Empty: the TCP peer is
	// the client.
	TrustedProxies []netip.Prefix
	// IPv6Prefix is the prefix length an IPv6 client is counted by in the
	// sign-in throttle (--signin-ipv6-prefix; 0: 64).
	IPv6Prefix int
	// MaxUploadBytes bounds an uploaded or pasted list (default 16 MiB).
	MaxUploadBytes int64
	Logger         *slog.Logger
	Now            func() time.Time
}

// Dashboard is the /dashboard handler.
type Dashboard struct {
	Deps
	router http.Handler
	pages  map[string]*template.Template
	steps  *stepLimiter
}

// New builds the dashboard.
func New(d Deps) *Dashboard {
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.MaxUploadBytes <= 0 {
		d.MaxUploadBytes = 16 << 20
	}
	db := &Dashboard{Deps: d, pages: parsePages(), steps: newStepLimiter()}
	db.router = db.routes()
	return db
}

// ServeHTTP implements http.Handler. It routes on the full path
// (/dashboard/...) with a routing context of its own, so it works mounted
// in the API's chi router or anywhere else.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r = r.WithContext(context.WithValue(r.Context(), chi.RouteCtxKey, chi.NewRouteContext()))
	d.router.ServeHTTP(w, r)
}

func (d *Dashboard) routes() http.Handler {
	r := chi.NewRouter()
	r.Use(d.headers, d.loadSession, d.checkOrigin)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		d.errorPage(w, r, http.StatusNotFound, "Page not found", "There is nothing at this address.")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		d.errorPage(w, r, http.StatusMethodNotAllowed, "Method not allowed", "This page does not take "+r.Method+".")
	})
	static, _ := fs.Sub(assets, "static")
	r.Handle(Base+"/static/*", http.StripPrefix(Base+"/static/", staticHandler(static)))

	r.Get(Base+"/login", d.loginForm)
	r.Post(Base+"/login", d.login)
	r.Get(users.LinkPath, d.linkForm) // Base+"/login/link"
	r.Post(users.LinkPath, d.linkLogin)

	r.Group(func(g chi.Router) {
		g.Use(d.requireSession)
		g.Get(Base, d.overview)
		g.Get(Base+"/", d.overview)
		g.Post(Base+"/logout", d.logout)
		g.Get(Base+"/keys", d.keys)
		g.Post(Base+"/keys", d.createKey)
		g.Get(Base+"/keys/{id}/revoke", d.revokeForm)
		g.Post(Base+"/keys/{id}/revoke", d.revokeKey)
		g.Get(Base+"/jobs", d.jobsPage)
		g.Get(Base+"/jobs/new", d.newJobForm)
		g.Post(Base+"/jobs/new", d.upload)
		g.Get(Base+"/jobs/new/{draft}", d.mapForm)
		g.Post(Base+"/jobs/new/{draft}", d.review)
		g.Post(Base+"/jobs/new/{draft}/confirm", d.confirm)
		g.Get(Base+"/jobs/{id}", d.jobPage)
		g.Get(Base+"/jobs/{id}/results.csv", d.jobCSV)
		g.Get(Base+"/jobs/{id}/delete", d.deleteJobForm)
		g.Post(Base+"/jobs/{id}/delete", d.deleteJob)
		g.Get(Base+"/api/jobs", d.apiJobs)
		g.Get(Base+"/api/jobs/{id}", d.apiJob)
		g.Get(Base+"/ledger", d.ledger)
		g.Get(Base+"/settings", d.settings)
		g.Post(Base+"/settings/retention", d.setRetention)
	})
	return r
}

// staticHandler serves the embedded assets. The pages link them with the
// assets' digest (?v=...): such a URL never changes content, so it is
// cached for a year; any other for five minutes.
func staticHandler(f fs.FS) http.Handler {
	fsrv := http.FileServerFS(f)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "" || strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r)
			return
		}
		if r.URL.Query().Get("v") == assetVersion {
			w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
		} else {
			w.Header().Set("Cache-Control", "public, max-age=300")
		}
		fsrv.ServeHTTP(w, r)
	})
}

// headers sets the security headers of every dashboard answer.
func (d *Dashboard) headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
			"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

type ctxKey int

const sessionKey ctxKey = 0

func sessionFrom(ctx context.Context) *users.Session {
	s, _ := ctx.Value(sessionKey).(*users.Session)
	return s
}

// loadSession reads the session cookie, if any.
func (d *Dashboard) loadSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie(CookieName)
		if err == nil && c.Value != "" {
			ss, err := d.Users.Session(r.Context(), c.Value)
			switch {
			case err == nil:
				r = r.WithContext(context.WithValue(r.Context(), sessionKey, ss))
			case errors.Is(err, users.ErrNotFound):
				d.clearCookie(w)
			default:
				d.serverError(w, r, err)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// requireSession sends a visitor without a session to the sign-in page
// (the JSON endpoints answer 401), and checks the CSRF token of every
// POST.
func (d *Dashboard) requireSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ss := sessionFrom(r.Context())
		if ss == nil {
			if strings.HasPrefix(r.URL.Path, Base+"/api/") {
				writeJSON(w, http.StatusUnauthorized, map[string]string{"detail": "Sign in to the dashboard first."})
				return
			}
			if r.Method != http.MethodGet {
				d.errorPage(w, r, http.StatusForbidden, "Signed out", "Your session has ended. Sign in again and retry.")
				return
			}
			next := r.URL.Path
			if r.URL.RawQuery != "" {
				next += "?" + r.URL.RawQuery
			}
			http.Redirect(w, r, Base+"/login?next="+url.QueryEscape(next), http.StatusSeeOther)
			return
		}
		if isDraftStep(r) { // before the upload is read (steps.go)
			release, ok := d.stepTurn(w, r, ss.User.AccountID)
			if !ok {
				return
			}
			defer release()
		}
		if r.Method == http.MethodPost {
			if err := parseForm(w, r, d.MaxUploadBytes); err != nil {
				d.errorPage(w, r, http.StatusRequestEntityTooLarge, "Upload too large", err.Error())
				return
			}
			if !users.VerifySecret(ss.CSRF, r.PostFormValue("csrf_token")) {
				d.forbidden(w, r)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// parseForm reads a form body (multipart or urlencoded) within max bytes.
func parseForm(w http.ResponseWriter, r *http.Request, max int64) error {
	r.Body = http.MaxBytesReader(w, r.Body, max+1<<20)
	var err error
	if strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/form-data") {
		err = r.ParseMultipartForm(8 << 20)
	} else {
		err = r.ParseForm()
	}
	// Only an oversized body is answered; any other malformed form reads
	// as empty, and the handler says what is missing.
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return errors.New("The upload is larger than the dashboard takes; split the list or use the API.")
	}
	return nil
}

// checkOrigin refuses a POST whose Origin (or, without one, Referer) is
// not this host: a cross-site form cannot post here, signed in or not
// (sign-in included: no login CSRF).
func (d *Dashboard) checkOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !sameOrigin(r, d.Origin) {
			d.forbidden(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func sameOrigin(r *http.Request, origin string) bool {
	src := r.Header.Get("Origin")
	if src == "" || src == "null" {
		src = r.Header.Get("Referer")
	}
	if src == "" {
		return false
	}
	u, err := url.Parse(src)
	if err != nil || u.Host == "" {
		return false
	}
	if origin != "" {
		return strings.EqualFold(u.Scheme+"://"+u.Host, strings.TrimRight(origin, "/"))
	}
	return strings.EqualFold(u.Host, r.Host)
}

func (d *Dashboard) forbidden(w http.ResponseWriter, r *http.Request) {
	d.errorPage(w, r, http.StatusForbidden, "Request refused",
		"This form was not sent from this dashboard, or it is out of date. Go back, reload the page and try again.")
}

func (d *Dashboard) setSessionCookie(w http.ResponseWriter, id string) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: id, Path: Base, HttpOnly: true, Secure: !d.AllowHTTP,
		SameSite: http.SameSiteLaxMode, MaxAge: int(d.Users.Opts.AbsoluteTTL / time.Second)})
}

func (d *Dashboard) clearCookie(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: Base, HttpOnly: true, Secure: !d.AllowHTTP,
		SameSite: http.SameSiteLaxMode, MaxAge: -1})
}

// account reads the signed-in account fresh (balance, plan).
func (d *Dashboard) account(r *http.Request) (*accounts.Account, error) {
	return d.Accounts.Account(r.Context(), sessionFrom(r.Context()).User.AccountID)
}

// principal is the account's dashboard pseudo key of type t.
func (d *Dashboard) principal(a *accounts.Account, t accounts.KeyType) *accounts.Principal {
	return &accounts.Principal{Key: accounts.Key{ID: DashboardKeyID, AccountID: a.ID, Type: t, Prefix: DashboardKeyID}, Account: *a}
}

func (d *Dashboard) serverError(w http.ResponseWriter, r *http.Request, err error) {
	d.Logger.Error("dashboard", "path", r.URL.Path, "request_id", apiserver.RequestIDFrom(r.Context()), "err", err)
	d.errorPage(w, r, http.StatusInternalServerError, "Something went wrong",
		"The dashboard could not answer this request. Try again in a moment.")
}
