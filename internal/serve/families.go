package serve

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/apiserver"
	"github.com/bulkd/bulkd/internal/company"
	"github.com/bulkd/bulkd/internal/company/normalize"
	"github.com/bulkd/bulkd/internal/company/redirect"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/egress"
	"github.com/bulkd/bulkd/internal/enrich"
	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/finder"
	"github.com/bulkd/bulkd/internal/lookup"
	"github.com/bulkd/bulkd/internal/ratelimit"
	"github.com/bulkd/bulkd/internal/verification"
	"github.com/bulkd/bulkd/internal/verify"
	"github.com/bulkd/bulkd/internal/verify/rules"
)

// builtins are the families bulkd ships, one entry each (a new family is
// one more entry). Each builds its family and its single-input mounts on
// a process's shared parts, and only what its scope asks for: a process
// that builds no email family builds no SMTP verifier, loads no address
// lists and starts no HELO check (docs/architecture.md, "Roles").
var builtins = []struct {
	name  string
	build func(p *parts) (Extra, error)
}{
	{enrich.Family, buildCompany},
	{verification.Name, buildVerification},
	{lookup.Name, buildLookup},
}

// scope is what a process builds of the families.
type scope struct {
	// declared builds every family without its answering parts: its name,
	// metering, form, error answer and how its jobs are shown (the
	// controller: failed shards and webhook events; `bulkd admin erase`:
	// the families' subjects). No single-input mount is built.
	declared bool
	// only, when set, is the one built-in family built (a processor pod
	// answers one job, of one family).
	only string
}

// families are the job families of a process and how the API mounts them.
type families struct {
	registry     *family.Registry
	bulk         []apiserver.Bulk
	singles      []apiserver.Single
	company      *enrich.CompanyFamily // nil when not built
	companies    *company.Store
	verification *verification.Family
	// helo is the egresses' HELO check (/readyz) and lists the verifier's
	// address lists: nil when the process builds no SMTP verifier.
	helo  *egress.Checker
	lists *verify.Lists
}

// parts are what the built-in families of one process share, each built
// on first need.
type parts struct {
	cfg      config.Config
	rdb      redis.UniversalClient
	log      *slog.Logger
	declared bool
	out      *families
	smtp     *verifiers
	patterns *finder.RedisPatterns
}

// buildFamilies builds the families sc asks for, each once: the registry
// the processor answers from and the bulk endpoints the API mounts; extra
// families come after the built-in ones.
func buildFamilies(cfg config.Config, rdb redis.UniversalClient, log *slog.Logger, sc scope, extra []Extra) (*families, error) {
	f := &families{}
	p := &parts{cfg: cfg, rdb: rdb, log: log, declared: sc.declared, out: f}
	var entries []Extra
	for _, b := range builtins {
		if sc.only != "" && b.name != sc.only {
			continue
		}
		x, err := b.build(p)
		if err != nil {
			return nil, err
		}
		entries = append(entries, x)
	}
	entries = append(entries, extra...)
	var all []family.Family
	for _, x := range entries {
		all = append(all, x.Family)
		b, err := bulkMounts(x.Family)
		if err != nil {
			return nil, err
		}
		f.bulk = append(f.bulk, b...)
		if !sc.declared {
			f.singles = append(f.singles, x.Singles...)
		}
	}
	f.registry = family.NewRegistry(all...)
	return f, nil
}

// buildCompany is company enrichment: the company store, and, when it
// answers, the redirect checker (--redirect-checks).
func buildCompany(p *parts) (Extra, error) {
	companies := company.NewStore(p.rdb, "bulkd:")
	ans := &enrich.Answerer{Store: companies}
	if p.cfg.RedirectChecks && !p.declared {
		out, err := outboundConfig(p.cfg)
		if err != nil {
			return Extra{}, err
		}
		ans.Redirects = redirect.NewChecker(out, redirect.Options{})
	}
	co := enrich.NewFamily(normalize.New(strings.Split(p.cfg.NetworkHosts, ",")), ans) // it trims, lowercases and defaults
	p.out.company, p.out.companies = co, companies
	return Extra{Family: co,
		Singles: []apiserver.Single{{Method: "GET", Path: "/company-enrichment", Family: co, Keys: apiserver.Metered, ChargePrefix: "single-"}}}, nil
}

// buildVerification is email verification on the process's SMTP
// verifiers.
func buildVerification(p *parts) (Extra, error) {
	delays, err := p.cfg.RetryDelays()
	if err != nil {
		return Extra{}, err
	}
	if p.declared {
		ver := verification.New(nil, delays)
		p.out.verification = ver
		return Extra{Family: ver}, nil
	}
	vs, err := p.verifiers()
	if err != nil {
		return Extra{}, err
	}
	ver := verification.New(vs.bulk, delays)
	if vs.single != vs.bulk {
		ver.Single = vs.single
	}
	if p.cfg.FinderLearnFromVerification {
		// Deliverable addresses of verification jobs teach the finder
		// their domains' address shapes (finder/shape.go).
		ver.Teacher = &finder.VerificationTeacher{Store: p.finderPatterns()}
	}
	p.out.verification = ver
	return Extra{Family: ver,
		Singles: []apiserver.Single{{Method: "GET", Path: "/verify", Family: ver, Keys: apiserver.Metered, ChargePrefix: "verify-"}}}, nil
}

// buildLookup is email lookup: lookups check candidates with the
// verification family's verifiers (one politeness budget per MX host for
// both families); learned patterns are shared through Redis by every
// process.
func buildLookup(p *parts) (Extra, error) {
	delays, err := p.cfg.RetryDelays()
	if err != nil {
		return Extra{}, err
	}
	if p.declared {
		return Extra{Family: lookup.New(nil, delays)}, nil
	}
	vs, err := p.verifiers()
	if err != nil {
		return Extra{}, err
	}
	patterns := p.finderPatterns()
	return Extra{Family: lookup.New(finder.New(vs.bulk, patterns), delays),
		Singles: LookupSingles(&lookup.Single{Finder: finder.New(vs.single, patterns), Timeout: p.cfg.LookupTimeout},
			ratelimit.New(p.rdb, p.cfg.UnlimitedLookupRPS))}, nil
}

// finderPatterns are the finder's learned patterns, shared by the families
// that use them.
func (p *parts) finderPatterns() *finder.RedisPatterns {
	if p.patterns == nil {
		p.patterns = finder.NewRedisPatterns(p.rdb)
	}
	return p.patterns
}

// bulkMounts are the API's mounts of the bulk endpoints fam's form lists:
// its paths, under /v1, and its keys (an Unlimited endpoint takes
// unlimited-plan keys and is paid for with the family's quota, the
// apiserver's metering of unlimited mounts).
func bulkMounts(fam family.Family) ([]apiserver.Bulk, error) {
	fm := fam.Form()
	if len(fm.Bulk) == 0 {
		return nil, fmt.Errorf("family %s: its form lists no bulk endpoint", fam.Name())
	}
	var out []apiserver.Bulk
	for _, m := range fm.Bulk {
		path, ok := strings.CutPrefix(m.Path, "/v1/")
		if !ok {
			return nil, fmt.Errorf("family %s: bulk endpoint %q is not under /v1/", fam.Name(), m.Path)
		}
		keys := apiserver.Metered
		if m.Unlimited {
			keys = apiserver.UnlimitedPlan
		}
		out = append(out, apiserver.Bulk{Path: "/" + path, Family: fam, Keys: keys})
	}
	return out, nil
}

// LookupSingles are the single email lookup mounts (POST /v1/email-lookup
// and /v1/unlimited/email-lookup, docs/api.md) of one lookup.Single; the
// single lookup's Timeout bounds one lookup (DNS, the catch-all probe and
// every candidate's RCPT), past it the answer is 502 and nothing is
// charged. perAccount is the per-account requests-per-second limit of the
// unlimited one (SPEC section 8, quota rule 6), on top of the per-key
// limit every endpoint has. Exported for the apiserver tests, which mount
// the lookups as bulkd does.
func LookupSingles(one *lookup.Single, perAccount *ratelimit.Limiter) []apiserver.Single {
	return []apiserver.Single{
		{Method: "POST", Path: "/email-lookup", Family: one, Keys: apiserver.Metered, ChargePrefix: "lookup-", MaxBody: lookup.MaxSingleBody},
		{Method: "POST", Path: "/unlimited/email-lookup", Family: one, Keys: apiserver.UnlimitedPlan, ChargePrefix: "ulookup-", MaxBody: lookup.MaxSingleBody,
			AccountLimiter: perAccount, AccountLimitKey: "lookup-acct:", AccountLimitWhat: "single lookups per second per account"},
	}
}

// verifiers are the SMTP verifiers of a process: bulk (no waiting) and
// single (waits out a short greylist within the request; the bulk one when
// --verify-single-retry is 0).
type verifiers struct {
	bulk, single *verify.Verifier
}

// verifiers builds the process's SMTP verifiers once (politeness shared
// through Redis, lists overlaid with what an operator loaded) and starts
// the check of each egress's HELO name (p.out.helo, shown on /readyz).
func (p *parts) verifiers() (*verifiers, error) {
	if p.smtp != nil {
		return p.smtp, nil
	}
	cfg, log := p.cfg, p.log
	if cfg.SMTPDenyPrivate {
		log.Warn("--smtp-deny-private is deprecated and has no effect: addresses that are not public are always refused; open ranges with --outbound-allow-cidrs")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lists, err := verify.LoadListsFromRedis(ctx, p.rdb)
	if err != nil {
		log.Warn("operator-loaded address lists unavailable; using the built-in ones", "err", err)
		lists = verify.DefaultLists()
	}
	probes := verify.NewRedisProbes(p.rdb)
	// The per-server rules (defaults and `bulkd admin smtp-rules`), read
	// again every 10 s while verifying: a change needs no restart.
	smtpRules := rules.NewRedisHolder(ctx, p.rdb, 0, log)
	lim := verify.NewRedisLimiter(p.rdb, verify.LimiterOptions{SessionsPerHost: cfg.SMTPSessionsPerHost, SessionsPerSecond: cfg.SMTPSessionRate})
	out, err := outboundConfig(cfg)
	if err != nil {
		return nil, err
	}
	egs, err := cfg.SMTPEgresses()
	if err != nil {
		return nil, err
	}
	vcfg := verify.Config{DNSServer: cfg.DNSServer, SMTPPort: cfg.SMTPPort, HeloName: cfg.SMTPHelo, MailFrom: cfg.SMTPMailFrom,
		CommandTimeout: cfg.SMTPCommandTimeout, SessionIdle: sessionIdle(cfg), Policy: out.Policy(), Probes: probes, Rules: smtpRules, Egresses: egs, Logger: log}
	v, err := verify.New(vcfg, lists, lim)
	if err != nil {
		return nil, fmt.Errorf("email verifier: %w", err)
	}
	vs := &verifiers{bulk: v, single: v}
	if cfg.VerifySingleRetry > 0 {
		// The single check may wait out a short greylist within its own
		// timeout: a second verifier with the same parts and that setting.
		scfg := vcfg
		scfg.GreylistRetry = cfg.VerifySingleRetry
		if vs.single, err = verify.New(scfg, lists, lim); err != nil {
			return nil, fmt.Errorf("email verifier: %w", err)
		}
	}
	p.out.lists, p.out.helo = lists, startHeloCheck(cfg, egs, log)
	p.smtp = vs
	return vs, nil
}

// sessionIdle is --smtp-session-idle for verify.Config, where 0 means the
// default and a negative wait disables parking.
func sessionIdle(cfg config.Config) time.Duration {
	if cfg.SMTPSessionIdle <= 0 {
		return -1
	}
	return cfg.SMTPSessionIdle
}

// heloCheckTimeout bounds the start-up HELO check of all egresses.
const heloCheckTimeout = 30 * time.Second

// startHeloCheck checks each egress's HELO name in the background (DNS may
// be slow at start; serving does not wait for it) and logs the outcome: a
// mismatch is a warning, not a reason to refuse to start or to be
// unready, since verification still works, only with more refusals and
// blocks from the servers that check (docs/egress.md).
func startHeloCheck(cfg config.Config, egs []egress.Egress, log *slog.Logger) *egress.Checker {
	chk := egress.NewChecker(cfg.DNSServer, 2*time.Second, egs)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), heloCheckTimeout)
		defer cancel()
		chk.Run(ctx, egs, log)
	}()
	return chk
}
