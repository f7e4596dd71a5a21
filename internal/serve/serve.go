// Package serve wires a configured bulkd API server together and runs it
// until its context ends, shutting down gracefully.
package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/apiserver"
	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/company"
	"github.com/bulkd/bulkd/internal/company/normalize"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/dashboard"
	"github.com/bulkd/bulkd/internal/egress"
	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/privacy"
	"github.com/bulkd/bulkd/internal/ratelimit"
	"github.com/bulkd/bulkd/internal/redisconn"
	"github.com/bulkd/bulkd/internal/rowcache"
	"github.com/bulkd/bulkd/internal/spamc"
	"github.com/bulkd/bulkd/internal/spamcheck"
	"github.com/bulkd/bulkd/internal/verify"
	"github.com/bulkd/bulkd/internal/webhook"
)

// Components are the parts of a configured bulkd, for `serve`, the
// processor and tests.
type Components struct {
	API *apiserver.Server
	// Dashboard is the account dashboard the API serves under /dashboard.
	Dashboard *dashboard.Dashboard
	Engine    *jobs.Engine
	Processor *jobs.Processor
	Local     *jobs.Local // nil when Options.Executor replaces it
	Companies *company.Store
	Normalize *normalize.Normalizer
	// Webhooks sweeps jobs for the events they owe and delivers them
	// (webhooks.go); Run starts it.
	Webhooks *webhook.Service
	// Lists are the verifier's address lists; Run keeps them in step with
	// what `bulkd admin lists sync` stores (verify.WatchLists).
	Lists *verify.Lists
}

// Options are what the modes other than standalone wire differently.
type Options struct {
	// Executor runs the engine's jobs instead of the in-process Local
	// executor (Kubernetes mode: a BulkJob per job). Components.Local is
	// then nil and no shard runs in this process.
	Executor jobs.Executor
	// Mode names the mode in the start log line (default "standalone").
	Mode string
	// Plans are the unlimited plans' limits (default billing.DefaultPlans
	// with --monthly-lookup-caps applied).
	Plans billing.Plans
	// Now is the clock of the API, billing and the engine (tests move it
	// across a UTC midnight); nil is time.Now.
	Now func() time.Time
	// MetricsReady, if not nil, receives the bound address of the
	// metrics listener (--metrics-listen) once it is up.
	MetricsReady chan<- string
	// Families are families beyond the built-in ones (a test's): each is
	// registered, answered by the processor, mounted on the API, and shown
	// by the dashboard and the webhooks exactly like a built-in one.
	Families []Extra
}

// Extra is a family beyond the built-in ones (a test's: test/fourthfamily)
// and its single-input mounts. The built-in families are not listed this
// way: families.go builds them, each only in the processes whose role needs
// it. The API mounts the bulk endpoints the family's form lists
// (form.Form.Bulk, bulkMounts): the paths bulkctl submits to are the same
// declaration.
type Extra struct {
	Family family.Family
	// Singles are its single-input mounts, if it has any.
	Singles []apiserver.Single
}

// Build assembles the standalone components on rdb. Nothing starts running.
func Build(cfg config.Config, rdb redis.UniversalClient, log *slog.Logger) (*Components, error) {
	return BuildWith(cfg, rdb, log, Options{})
}

// BuildWith assembles the components on rdb with another executor.
func BuildWith(cfg config.Config, rdb redis.UniversalClient, log *slog.Logger, o Options) (*Components, error) {
	fams, err := buildFamilies(cfg, rdb, log, scope{}, o.Families)
	if err != nil {
		return nil, err
	}
	if o.Plans == nil {
		o.Plans = billing.DefaultPlans()
		if err := ParseCaps(o.Plans, cfg.MonthlyLookupCaps); err != nil {
			return nil, err
		}
	}
	st := accounts.NewStore(rdb, o.Now)
	st.Limits = cfg.AccountLimits() // the key limit; the engine and API take the others below
	bl := billing.New(rdb, o.Now)
	proc := newProcessor(cfg, rdb, bl, fams.registry, log)
	var local *jobs.Local
	var ex jobs.Executor
	if o.Executor != nil {
		ex = o.Executor
	} else {
		local = jobs.NewLocal(proc, cfg.Workers, log)
		if cfg.LeaseTTL > 0 {
			local.ResumeEvery = cfg.LeaseTTL
		}
		if err := configureFairness(local, cfg, st, o.Now); err != nil {
			return nil, err
		}
		ex = local
	}
	eng := jobs.NewEngine(proc.Store, bl, ex, log)
	eng.ShardSize = cfg.ShardSize
	if o.Now != nil {
		eng.Now = o.Now
	}
	eng.MaxShards = cfg.MaxShards
	eng.Retention = cfg.Retention
	eng.Limits = cfg.AccountLimits()
	if cfg.ResultsCacheBytes > 0 {
		eng.RowCache = rowcache.New(cfg.ResultsCacheBytes)
	}
	bl.ChargeTTL = cfg.Retention + 24*time.Hour
	spam, err := SpamCheck(cfg, log)
	if err != nil {
		return nil, err
	}
	whPolicy := webhookPolicy(cfg)
	var suppress *privacy.Suppressions
	if cfg.PrivacySecret != "" {
		h, err := privacy.NewHasher(cfg.PrivacySecret)
		if err != nil {
			return nil, err
		}
		suppress = privacy.NewSuppressions(rdb, h)
	}
	var dash *dashboard.Dashboard
	api := apiserver.New(apiserver.Deps{
		Redis: rdb, Accounts: st, Billing: bl, Limiter: ratelimit.New(rdb, cfg.RateLimit),
		Logger: log, MaxBodyBytes: cfg.MaxBodyBytes, MaxDecodingBytes: cfg.MaxDecodingBytes, Jobs: eng,
		Bulk: fams.bulk, Singles: fams.singles,
		Plans: o.Plans, Now: o.Now, Spam: spam, Webhooks: whPolicy, Suppress: suppress,
		MaxDecodingBytesPerAccount: cfg.MaxDecodingBytesPerAccount, BodyMinRate: cfg.BodyMinRate, BodyGrace: cfg.BodyGrace,
		Limits:       cfg.AccountLimits(),
		Idempotency:  apiserver.IdempotencyOptions{MaxAccountBytes: cfg.AccountMaxIdempotencyBytes},
		ReadyDetails: func() map[string]any { return map[string]any{"smtp_egress": fams.helo.Results()} }, // serve builds every family
		Dashboard: func(api *apiserver.Server) http.Handler {
			dash = newDashboard(cfg, api, log)
			return dash
		},
	})
	// The SMTP verifier's counters (bulkd_smtp_blocks_total) on /metrics.
	api.Metrics.Registry.MustRegister(verify.Collectors()...)
	api.Metrics.Registry.MustRegister(egress.Collectors()...) // bulkd_smtp_egress_helo_check
	wh := newWebhooks(cfg, rdb, log, fams, whPolicy, api.Metrics.Registry)
	audit := privacy.NewAudit(rdb, cfg.PrivacyAuditRetention)
	eng.Deleted = func(ctx context.Context, d *jobs.Deletion) {
		wh.JobDeleted(ctx, d) // job.deleted
		// Who deleted what, and what it cost: no row of it.
		actor := d.By
		if actor == "" {
			actor = "key:bkd_" + d.Job.KeyID
		}
		if err := audit.Record(ctx, privacy.Entry{Actor: actor, Action: "delete_job", Job: d.Job.ID, Account: d.Job.AccountID,
			Counts: map[string]int64{"rows": d.Job.TotalRows, "unprocessed": d.Unprocessed, "refunded_milli": int64(d.Refunded), "keys": d.Keys}}); err != nil {
			log.Error("privacy audit log", "job", d.Job.ID, "err", err)
		}
	}
	return &Components{API: api, Dashboard: dash, Engine: eng, Processor: proc, Local: local, Companies: fams.companies, Normalize: fams.company.Normalizer,
		Webhooks: wh, Lists: fams.lists}, nil
}

// SpamCheck builds the content spam check: the daily allowances (defaults
// with --spam-check-allowances applied) and, when --spamd-addr is set, the
// spamd client. Without an address the route answers 503
// engine_unavailable, as SPEC 4.6 allows, and the rest of the API is
// unaffected.
func SpamCheck(cfg config.Config, log *slog.Logger) (*apiserver.SpamCheck, error) {
	al := spamcheck.DefaultAllowances()
	if err := spamcheck.ParseAllowances(al, cfg.SpamCheckAllowances); err != nil {
		return nil, err
	}
	sc := &apiserver.SpamCheck{Allowances: al}
	if cfg.SpamdAddr == "" {
		log.Info("no --spamd-addr: POST /v1/content-spam-check answers 503 engine_unavailable")
		return sc, nil
	}
	sc.Engine = &spamc.Client{Addr: cfg.SpamdAddr, Timeout: cfg.SpamdTimeout, MaxConns: cfg.SpamdMaxConns}
	return sc, nil
}

// NewProcessor builds the shard processor alone, with every family's
// answerer (and the extra families'). Its completion refunds are dated by
// the wall clock (no clock is injected in those processes).
func NewProcessor(cfg config.Config, rdb redis.UniversalClient, log *slog.Logger, extra ...Extra) (*jobs.Processor, error) {
	fams, err := buildFamilies(cfg, rdb, log, scope{}, extra)
	if err != nil {
		return nil, err
	}
	return newProcessor(cfg, rdb, billing.New(rdb, nil), fams.registry, log), nil
}

// NewJobProcessor builds what `bulkd processor` needs for one job: the
// shard processor with the answerer of the job's family alone (a company
// enrichment pod builds no SMTP verifier, loads no address lists and
// starts no HELO check). The verifier's address lists, when built, follow
// `bulkd admin lists sync` until ctx ends (a processor pod may run a shard
// for a long time). A job that is gone is jobs.ErrJobNotFound.
func NewJobProcessor(ctx context.Context, cfg config.Config, rdb redis.UniversalClient, log *slog.Logger, jobID string) (*jobs.Processor, error) {
	j, err := jobs.NewStore(rdb, nil).Get(ctx, jobID)
	if err != nil {
		return nil, err
	}
	fams, err := buildFamilies(cfg, rdb, log, scope{only: j.Family}, nil)
	if err != nil {
		return nil, err
	}
	if _, ok := fams.registry.Get(j.Family); !ok {
		return nil, fmt.Errorf("job %s: %w %q (this build knows %v)", jobID, jobs.ErrUnknownFamily, j.Family, builtinNames())
	}
	if fams.lists != nil {
		go verify.WatchLists(ctx, rdb, fams.lists, log)
	}
	return newProcessor(cfg, rdb, billing.New(rdb, nil), fams.registry, log), nil
}

// builtinNames lists the built-in families' names.
func builtinNames() []string {
	var out []string
	for _, b := range builtins {
		out = append(out, b.name)
	}
	return out
}

// newProcessor builds the shard processor; bl pays the refunds of the jobs
// it completes (BuildWith passes the engine's, with its clock).
func newProcessor(cfg config.Config, rdb redis.UniversalClient, bl *billing.Billing, reg *family.Registry, log *slog.Logger) *jobs.Processor {
	proc := jobs.NewProcessor(jobs.NewStore(rdb, bl), reg.Answerers(), log)
	proc.BatchSizes = reg.BatchSizes()
	if cfg.InstanceID != "" {
		proc.Owner = cfg.InstanceID
	}
	if cfg.LeaseTTL > 0 {
		proc.LeaseTTL = cfg.LeaseTTL
	}
	if cfg.BatchSize > 0 {
		proc.BatchSize = cfg.BatchSize
	}
	return proc
}

// janitor rolls back submissions whose process died between charge and
// commit. A submission takes well under a second; two minutes is far past
// any live one (request timeouts end them sooner).
func janitor(ctx context.Context, e *jobs.Engine, log *slog.Logger) {
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		if n, err := e.ReclaimAbandoned(ctx, 2*time.Minute); err != nil && ctx.Err() == nil {
			log.Error("janitor", "err", err)
		} else if n > 0 {
			log.Warn("janitor reclaimed abandoned submissions", "count", n)
		}
		// Completions whose refund or set updates a dead process cut short.
		if n, err := e.Store.SettleActive(ctx); err != nil && ctx.Err() == nil {
			log.Error("janitor: settle active jobs", "err", err)
		} else if n > 0 {
			log.Warn("janitor settled active jobs", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func importIfEmpty(ctx context.Context, c *Components, path string, log *slog.Logger) error {
	n, err := c.Companies.Count(ctx)
	if err != nil {
		return err
	}
	if n > 0 {
		log.Info("company store already loaded", "companies", n)
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--company-data: %w", err)
	}
	defer f.Close()
	stats, err := company.Import(ctx, f, company.Format("jsonl"), c.Companies, c.Normalize, func(s company.ImportStats) {
		log.Info("importing companies", "read", s.Read, "imported", s.Imported, "skipped", s.Skipped)
	})
	if err != nil {
		return fmt.Errorf("import %s: %w", path, err)
	}
	log.Info("company data imported", "file", path, "imported", stats.Imported, "skipped", stats.Skipped, "elapsed", stats.Elapsed.String())
	return nil
}

// NewLogger builds the process logger: JSON in production, text for people.
func NewLogger(w io.Writer, format, level string) *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		lvl = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lvl}
	var log *slog.Logger
	if format == "text" {
		log = slog.New(slog.NewTextHandler(w, opts))
	} else {
		log = slog.New(slog.NewJSONHandler(w, opts))
	}
	redis.SetLogger(redisLogger{log}) // go-redis's own messages, in the same format
	return log
}

// NewRedis connects to the configured Redis (a server, a Cluster or a
// Sentinel-managed master: internal/redisconn) with bounded timeouts on
// every call, and checks it answers.
func NewRedis(ctx context.Context, url string) (redis.UniversalClient, error) {
	return redisconn.Open(ctx, url)
}

// ParseCaps reads --monthly-lookup-caps into plans.
func ParseCaps(plans billing.Plans, s string) error {
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, val, ok := strings.Cut(part, "=")
		p, err := accounts.ParsePlan(name)
		if !ok || err != nil || p == accounts.PlanNone {
			return fmt.Errorf("--monthly-lookup-caps: bad entry %q", part)
		}
		var n int64
		if _, err := fmt.Sscan(val, &n); err != nil || n < 0 {
			return fmt.Errorf("--monthly-lookup-caps: bad number in %q", part)
		}
		l := plans[p]
		l.MonthlySingleLookups = n
		plans[p] = l
	}
	return nil
}

// Run serves the API on cfg.Listen until ctx is cancelled. ready, if not
// nil, receives the bound address once the listener is up.
func Run(ctx context.Context, cfg config.Config, log *slog.Logger, stdout io.Writer, ready chan<- string) error {
	return RunWith(ctx, cfg, log, stdout, ready, Options{})
}

// RunWith is Run with another executor (`bulkd apiserver`): no in-process
// workers, the janitor still rolls back abandoned submissions.
func RunWith(ctx context.Context, cfg config.Config, log *slog.Logger, stdout io.Writer, ready chan<- string, o Options) error {
	rdb, err := NewRedis(ctx, cfg.RedisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	warnIfNotDurable(ctx, rdb, log)
	c, err := BuildWith(cfg, rdb, log, o)
	if err != nil {
		return err
	}
	if cfg.Demo {
		if err := Demo(ctx, c.API.Accounts, c.API.Billing, cfg.DemoKeysFile, stdout, log); err != nil {
			return fmt.Errorf("demo account: %w", err)
		}
	}
	if cfg.CompanyData != "" {
		if err := importIfEmpty(ctx, c, cfg.CompanyData, log); err != nil {
			return err
		}
	}
	// The executor and janitor outlive the listener a little: shutdown stops
	// new requests first, then the workers (an interrupted shard resumes on
	// the next start).
	workCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		stopWork()
		if c.Local != nil {
			c.Local.Wait()
		}
	}()
	if c.Local != nil {
		c.Local.Start(workCtx)
	}
	go janitor(workCtx, c.Engine, log)
	go c.Webhooks.Run(workCtx) // webhook events: every replica sweeps and delivers
	go verify.WatchLists(workCtx, rdb, c.Lists, log)

	srv := &http.Server{
		Handler:           c.API,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	mode := o.Mode
	if mode == "" {
		mode = "standalone"
	}
	log.Info("bulkd serving", "addr", ln.Addr().String(), "mode", mode)
	if ready != nil {
		ready <- ln.Addr().String()
	}
	if cfg.Demo {
		demoDashboard(ctx, c, cfg, ln.Addr().String(), stdout, log)
	}
	msrv, err := serveMetrics(cfg, c.API, log, o.MetricsReady)
	if err != nil {
		_ = ln.Close()
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing in-flight requests", "timeout", cfg.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if msrv != nil {
		// Scrapes are short: no need to let one finish.
		_ = msrv.Close()
	}
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("graceful shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	// Parked SMTP sessions give their politeness slots back now, not when
	// their leases expire (other replicas share them through Redis).
	if c.Processor != nil {
		c.Processor.Close()
	}
	return nil
}

// serveMetrics serves the API's /metrics on --metrics-listen, a listener
// of its own (issue 18, item 4): the API's address, which customers reach,
// never exposes it, and the chart publishes it on a Service of its own.
// nil when --metrics-listen is "" or "0".
func serveMetrics(cfg config.Config, api *apiserver.Server, log *slog.Logger, ready chan<- string) (*http.Server, error) {
	if cfg.MetricsListen == "" || cfg.MetricsListen == "0" {
		log.Info("no --metrics-listen: /metrics is not served")
		return nil, nil
	}
	ln, err := net.Listen("tcp", cfg.MetricsListen)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	srv := &http.Server{
		Handler:           api.MetricsHandler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("bulkd serving metrics", "addr", ln.Addr().String())
	if ready != nil {
		ready <- ln.Addr().String()
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener stopped", "err", err)
		}
	}()
	return srv, nil
}

// Demo makes sure a demo account with credits, an active starter plan and
// one key of each type exists, and that its keys are in keysFile (mode
// 0600). Keys are shown once, when they are created: a later start finds the
// file, checks the keys still work, and only says where they are.
func Demo(ctx context.Context, st *accounts.Store, bl *billing.Billing, keysFile string, stdout io.Writer, log *slog.Logger) error {
	if b, err := os.ReadFile(keysFile); err == nil {
		vals := parseEnvFile(string(b))
		if _, err := st.Authenticate(ctx, vals["BULKD_PAYG_KEY"]); err == nil {
			if _, err := st.Authenticate(ctx, vals["BULKD_UNLIMITED_KEY"]); err == nil {
				log.Info("demo account ready; its keys are in the keys file", "file", keysFile, "account", vals["BULKD_ACCOUNT"])
				return nil
			}
		}
	}
	a, err := st.CreateAccount(ctx, "Demo", 0)
	if err != nil {
		return err
	}
	if _, err := bl.Adjust(ctx, a.ID, 1_000_000*1000, "demo opening balance"); err != nil {
		return err
	}
	if err := st.SetPlan(ctx, a.ID, accounts.PlanStarter, accounts.StateActive, time.Now().UTC().AddDate(0, 1, 0).Truncate(time.Second)); err != nil {
		return err
	}
	payg, _, err := st.CreateKey(ctx, a.ID, accounts.PayAsYouGo)
	if err != nil {
		return err
	}
	unl, _, err := st.CreateKey(ctx, a.ID, accounts.Unlimited)
	if err != nil {
		return err
	}
	content := fmt.Sprintf("BULKD_ACCOUNT=%s\nBULKD_PAYG_KEY=%s\nBULKD_UNLIMITED_KEY=%s\n", a.ID, payg, unl)
	if i := strings.LastIndexByte(keysFile, '/'); i > 0 {
		if err := os.MkdirAll(keysFile[:i], 0o700); err != nil {
			return err
		}
	}
	if err := os.WriteFile(keysFile, []byte(content), 0o600); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nDemo account %s created with 1,000,000 credits and an active starter plan.\n"+
		"These keys are shown once (also saved to %s):\n  pay-as-you-go: %s\n  unlimited:     %s\n\n", a.ID, keysFile, payg, unl)
	return nil
}

func parseEnvFile(s string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			m[k] = v
		}
	}
	return m
}
