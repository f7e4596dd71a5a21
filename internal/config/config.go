// Package config reads bulkd's settings from flags, each with a BULKD_*
// environment equivalent (the flag wins when both are given). README's
// configuration table lists them all (a test checks it against Register).
package config

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/egress"
	"github.com/bulkd/bulkd/internal/outbound"
)

// Config is everything `bulkd serve` (and the other server modes) needs.
type Config struct {
	Listen    string
	RedisURL  string
	LogFormat string // json | text
	LogLevel  string // debug | info | warn | error

	// Outbound network: tests and demos point all of it at local servers.
	DNSServer string
	SMTPPort  int
	HTTPProxy string
	// OutboundAllowCIDRs are the ranges (comma-separated) that connections
	// made on a customer's behalf (redirect checks, SMTP, webhooks) may
	// reach besides public addresses: empty, the default, means public
	// addresses only (internal/outbound, docs/security.md).
	OutboundAllowCIDRs string

	ReadTimeout     time.Duration
	WriteTimeout    time.Duration
	IdleTimeout     time.Duration
	ShutdownTimeout time.Duration
	MaxBodyBytes    int64
	// MaxDecodingBytes bounds the bytes of request bodies decoded at once
	// across the process (admission control); 0: derived from the Go
	// memory limit (apiserver.DefaultMaxDecodingBytes).
	MaxDecodingBytes int64
	// Admission control per account and per body, and the metrics
	// listener (issue 18, docs/security.md).
	MaxDecodingBytesPerAccount int64         // one account's share of MaxDecodingBytes; 0: automatic
	BodyMinRate                int64         // least bytes/s a request body arrives at after BodyGrace; 0: no rule
	BodyGrace                  time.Duration // before BodyMinRate applies; also the longest pause
	MetricsListen              string        // address of /metrics; "" or "0": none

	RateLimit int // requests per second per key

	// MonthlyLookupCaps overrides the unlimited plans' monthly single-lookup
	// caps: "starter=20000,standard=60000,professional=150000".
	MonthlyLookupCaps string

	// Job engine.
	ShardSize int           // distinct inputs per shard
	MaxShards int           // shards per job at most (0: no cap); larger jobs get larger shards
	Workers   int           // in-process shard workers (standalone mode)
	BatchSize int           // distinct inputs a shard processor answers per batch
	Retention time.Duration // how long job data is kept
	// PrivacySecret keys the hashes of the suppression list and the audit
	// log (docs/privacy.md); without it nothing is suppressed and nobody
	// can be erased.
	PrivacySecret string
	// PrivacyAuditRetention is how long the audit log keeps an entry.
	PrivacyAuditRetention time.Duration
	// ResultsCacheBytes bounds the memory kept for rendered results rows of
	// completed jobs (0: no cache; every page is read from Redis).
	ResultsCacheBytes int64
	// InstanceID names this process as the holder of shard leases. Stable
	// across restarts, it lets a restarted instance resume its own shards at
	// once; empty means "hostname/listen address".
	InstanceID string
	// LeaseTTL is how long a shard stays claimed without a heartbeat; it is
	// also how often unfinished shards are looked for again. Short leases
	// are safe: answers are recorded once, so duplicated work never counts.
	LeaseTTL time.Duration
	// Fair scheduling of shards across accounts, standalone mode only
	// (jobs.Local; docs/architecture.md, "Scheduling shards across
	// accounts"). FairWeights: DRR weights by plan, "payg=1,starter=2"
	// (every plan 1 unless given); FairAccountWorkers: shards one account
	// runs at once (0: up to --workers); FairPreempt: an idle account's
	// first shard may stop the busiest account's youngest one.
	FairWeights        string
	FairAccountWorkers int
	FairPreempt        bool

	// Company enrichment.
	NetworkHosts   string // comma-separated recognised network hosts
	RedirectChecks bool   // check whether domain rows redirect elsewhere
	CompanyData    string // JSON Lines file imported at start when the company store is empty

	// Email verification.
	SMTPHelo            string        // EHLO name of SMTP checks
	SMTPMailFrom        string        // MAIL FROM of SMTP checks (default verify@<helo>)
	SMTPSessionsPerHost int           // concurrent SMTP sessions per mail server address (not MX name), across every process
	SMTPSessionRate     float64       // new SMTP sessions per second per mail server address, across every process
	SMTPCommandTimeout  time.Duration // wait for one SMTP reply
	SMTPSessionIdle     time.Duration // an SMTP session with nothing left stays open this long for the next batch to its server (verify.Config.SessionIdle); 0: never
	VerifyRetryDelays   string        // waits before the retries of a greylisted address, e.g. "2m,5m,15m"
	VerifySingleRetry   time.Duration // GET /v1/verify: wait this long and retry a greylisted address within the request's timeout (0: never)
	SMTPDenyPrivate     bool          // deprecated, no effect: non-public addresses are always refused (OutboundAllowCIDRs opens ranges)
	// SMTP egress (internal/egress, docs/egress.md): at most one of the
	// three; none is the host's own route greeting with SMTPHelo.
	SMTPEgress    string // "name=a,source=IP,helo=NAME,public_ip=IP;name=b,proxy=socks5://...,helo=NAME"
	SMTPProxy     string // socks5://[user:pass@]host:port (a secret: never logged)
	SMTPSourceIPs string // "ip[=helo],ip[=helo]"

	// Email lookup.
	LookupTimeout time.Duration // one single email lookup, end to end
	// FinderLearnFromVerification: bulk verification answers teach the
	// finder the shapes of domains' addresses (finder.VerificationTeacher).
	FinderLearnFromVerification bool
	UnlimitedLookupRPS          int // unlimited single lookups per second per account

	// Content spam check (POST /v1/content-spam-check).
	SpamdAddr           string        // SpamAssassin spamd host:port; empty: the check answers 503 engine_unavailable
	SpamdTimeout        time.Duration // one check end to end, the wait for a free connection included
	SpamdMaxConns       int           // checks sent to spamd at once (its --max-children), per process
	SpamCheckAllowances string        // daily checks per account by plan, over the defaults: "payg=100,starter=250"

	// Webhooks (internal/webhook, docs/webhooks.md).
	PublicURL            string        // the API's public base URL: webhook events carry absolute links too
	WebhookAllowLoopback bool          // tests/dev: webhook_url may be http(s) to loopback
	WebhookAllowCIDRs    string        // ranges opened on purpose (receivers in the operator's network), comma-separated
	WebhookTimeout       time.Duration // one delivery attempt, end to end
	WebhookMaxAge        time.Duration // retry an event this long, then give up
	WebhookBackoff       time.Duration // wait after the first failed attempt (doubled each time, jittered)
	WebhookBackoffMax    time.Duration // longest wait between attempts

	// Demo creates a demo account with credits and both key types on first
	// start and writes the keys to DemoKeysFile (make run uses it).
	Demo         bool
	DemoKeysFile string

	// DashboardAllowHTTP leaves the Secure attribute off the dashboard's
	// session cookie, so that it works over plain HTTP (make run); never
	// in production.
	DashboardAllowHTTP bool
	// DashboardOrigin is the dashboard's public origin (scheme://host[:port])
	// that every dashboard POST's Origin must be; empty: the request's own
	// Host (set it behind a proxy that rewrites Host).
	DashboardOrigin string
	// TrustedProxies are comma-separated CIDR ranges of the proxies in
	// front of bulkd: X-Forwarded-For is read only from a peer in them
	// (the dashboard's sign-in throttle counts the client, not the proxy).
	TrustedProxies string
	// SignInIPv6Prefix is the prefix length an IPv6 client is counted by
	// in the sign-in throttle: one subscriber gets a /64 (or more), so
	// counting /128s gave each attacker 2^64 clients.
	SignInIPv6Prefix int

	// Per-account limits (docs/security.md), defaults for every account;
	// `bulkd admin account limits` overrides them for one. 0: no limit.
	AccountMaxActiveJobs  int64 // jobs not completed yet
	AccountMaxStoredBytes int64 // bytes of retained jobs' data in Redis
	AccountMaxDrafts      int64 // dashboard uploads between their steps
	AccountMaxDraftBytes  int64 // bytes of those uploads
	AccountMaxKeys        int64 // API keys not revoked
	AccountRateLimit      int64 // requests per second of all the account's keys together
	// AccountMaxIdempotencyBytes bounds the bytes of the answers one
	// account's keys store for their Idempotency-Keys (24 h each); past
	// it a new key gets 429 idempotency_records_limited. 0: no limit.
	AccountMaxIdempotencyBytes int64
}

// AccountLimits are the default per-account limits.
func (c *Config) AccountLimits() accounts.Limits {
	return accounts.Limits{ActiveJobs: c.AccountMaxActiveJobs, StoredBytes: c.AccountMaxStoredBytes, Drafts: c.AccountMaxDrafts,
		DraftBytes: c.AccountMaxDraftBytes, Keys: c.AccountMaxKeys, RequestRate: c.AccountRateLimit,
		IdempotencyBytes: c.AccountMaxIdempotencyBytes}
}

// RegisterLimits adds the per-account limit flags (`bulkd serve`,
// `bulkd apiserver`, and `bulkd admin`, which shows and enforces the same
// defaults).
func (c *Config) RegisterLimits(fs *flag.FlagSet) {
	num64(fs, &c.AccountMaxActiveJobs, "account-max-active-jobs", "jobs of one account not completed yet; past it a submission gets 429 active_jobs_limited, nothing charged (0: no limit)")
	num64(fs, &c.AccountMaxStoredBytes, "account-max-stored-bytes", "bytes of job data (rows, inputs, answers) one account's retained jobs may hold in Redis; past it a submission gets 429 stored_bytes_limited, nothing charged (0: no limit)")
	num64(fs, &c.AccountMaxDrafts, "account-max-drafts", "dashboard uploads of one account waiting between their steps (0: no limit)")
	num64(fs, &c.AccountMaxDraftBytes, "account-max-draft-bytes", "bytes of one account's waiting dashboard uploads (0: no limit)")
	num64(fs, &c.AccountMaxKeys, "account-max-keys", "API keys of one account that are not revoked (0: no limit)")
	num64(fs, &c.AccountMaxIdempotencyBytes, "account-max-idempotency-bytes", "bytes of the answers one account's keys keep for their Idempotency-Keys (each 24 h, counted with 1 KiB of overhead); past it a request with a new key gets 429 idempotency_records_limited, nothing run or charged (0: no limit)")
	num64(fs, &c.AccountRateLimit, "account-rate-limit", "requests per second of all one account's keys together, on top of --rate-limit per key; past it 429 rate_limited (0: no limit)")
}

func (c *Config) validateLimits() error {
	for _, v := range []int64{c.AccountMaxActiveJobs, c.AccountMaxStoredBytes, c.AccountMaxDrafts, c.AccountMaxDraftBytes, c.AccountMaxKeys, c.AccountRateLimit, c.AccountMaxIdempotencyBytes} {
		if v < 0 {
			return fmt.Errorf("the --account-max-* limits and --account-rate-limit cannot be negative (0: no limit)")
		}
	}
	return nil
}

// Default returns the defaults.
func Default() Config {
	return Config{
		Listen:                "127.0.0.1:8080",
		RedisURL:              "redis://127.0.0.1:6379/0",
		LogFormat:             "json",
		LogLevel:              "info",
		SMTPPort:              25,
		ReadTimeout:           60 * time.Second,
		WriteTimeout:          60 * time.Second,
		IdleTimeout:           120 * time.Second,
		ShutdownTimeout:       30 * time.Second,
		MaxBodyBytes:          64 << 20,
		BodyMinRate:           64 << 10,
		BodyGrace:             5 * time.Second,
		MetricsListen:         "127.0.0.1:9090",
		RateLimit:             20,
		DemoKeysFile:          "var/demo-keys.env",
		ShardSize:             1000,
		Workers:               16, // shards mostly wait on mail servers (docs/benchmarks.md, "Verification speed")
		BatchSize:             500,
		Retention:             30 * 24 * time.Hour,
		PrivacyAuditRetention: 3 * 365 * 24 * time.Hour,
		ResultsCacheBytes:     256 << 20,
		LeaseTTL:              30 * time.Second,
		FairPreempt:           true,
		NetworkHosts:          "linkedin.com",
		RedirectChecks:        true,

		SMTPHelo:            "bulkd.localhost",
		SMTPSessionsPerHost: 3,
		SMTPSessionRate:     5,
		SMTPCommandTimeout:  10 * time.Second,
		SMTPSessionIdle:     2 * time.Second, // docs/benchmarks.md, "Verification speed": why 2 s
		VerifyRetryDelays:   "2m,5m,15m",

		LookupTimeout:               45 * time.Second,
		FinderLearnFromVerification: true,
		UnlimitedLookupRPS:          10,

		SpamdTimeout:  10 * time.Second,
		SpamdMaxConns: 5,

		WebhookTimeout:    10 * time.Second,
		WebhookMaxAge:     24 * time.Hour,
		WebhookBackoff:    10 * time.Second,
		WebhookBackoffMax: time.Hour,

		AccountMaxActiveJobs:  50,
		AccountMaxStoredBytes: 1 << 30,
		AccountMaxDrafts:      10,
		AccountMaxDraftBytes:  32 << 20,
		AccountMaxKeys:        20,
		AccountRateLimit:      100,

		AccountMaxIdempotencyBytes: 256 << 20,

		SignInIPv6Prefix: 64,
	}
}

// Register adds the flags to fs, with defaults taken from the environment.
func (c *Config) Register(fs *flag.FlagSet) {
	str(fs, &c.Listen, "listen", "address to serve HTTP on")
	str(fs, &c.RedisURL, "redis-url", "Redis URL (redis://[user:pass@]host:port/db, rediss:// for TLS)")
	str(fs, &c.LogFormat, "log-format", "log format: json or text")
	str(fs, &c.LogLevel, "log-level", "log level: debug, info, warn or error")
	str(fs, &c.DNSServer, "dns-server", "DNS server host:port for all outbound lookups (default: system resolver)")
	num(fs, &c.SMTPPort, "smtp-port", "TCP port for outbound SMTP checks")
	str(fs, &c.HTTPProxy, "http-proxy", "HTTP proxy URL for outbound website checks (default: from HTTP_PROXY/HTTPS_PROXY)")
	dur(fs, &c.ReadTimeout, "read-timeout", "maximum time to read a request, body included")
	dur(fs, &c.WriteTimeout, "write-timeout", "maximum time to write a response")
	dur(fs, &c.IdleTimeout, "idle-timeout", "keep-alive idle timeout")
	dur(fs, &c.ShutdownTimeout, "shutdown-timeout", "how long graceful shutdown waits for in-flight requests")
	num64(fs, &c.MaxBodyBytes, "max-body-bytes", "largest request body accepted, in bytes")
	num64(fs, &c.MaxDecodingBytes, "max-decoding-bytes", "bytes of request bodies decoded at once across the process; a body that does not fit within 2 s gets 503 server_busy (0: a quarter of the Go memory limit's worth, else 4 x --max-body-bytes)")
	num64(fs, &c.MaxDecodingBytesPerAccount, "max-decoding-bytes-per-account", "one account's share of --max-decoding-bytes; a body that does not fit within 2 s gets 429 account_busy (0: a quarter of --max-decoding-bytes, at least --max-body-bytes)")
	num64(fs, &c.BodyMinRate, "body-min-rate", "least rate in bytes per second a request body must arrive at after --body-grace; a slower body gets 408 and its connection closed (0: no such rule)")
	dur(fs, &c.BodyGrace, "body-grace", "time a request body may take before --body-min-rate applies; also the longest pause allowed while it arrives")
	str(fs, &c.MetricsListen, "metrics-listen", `address to serve /metrics (Prometheus) on, apart from the API ("0" or empty: no metrics)`)
	num(fs, &c.RateLimit, "rate-limit", "requests per second per API key (SPEC: 20)")
	str(fs, &c.MonthlyLookupCaps, "monthly-lookup-caps", "monthly single-lookup caps per unlimited plan, e.g. starter=20000,standard=60000")
	num(fs, &c.ShardSize, "shard-size", "distinct inputs per shard (the unit of work)")
	num(fs, &c.MaxShards, "max-shards", "shards per job at most, 0 for no cap: a larger job gets larger shards (Kubernetes mode: one pod per shard)")
	num(fs, &c.Workers, "workers", "in-process shard workers in standalone mode")
	num(fs, &c.BatchSize, "batch-size", "distinct inputs a shard processor answers per batch (and records at once)")
	dur(fs, &c.Retention, "retention", "how long job data (status and results) is kept after submission")
	str(fs, &c.PrivacySecret, "privacy-secret", "secret keying the suppression list's and the audit log's hashes of erased people (docs/privacy.md); unset: no suppression, no erasure")
	dur(fs, &c.PrivacyAuditRetention, "privacy-audit-retention", "how long the privacy audit log keeps an entry (erasures, job deletions)")
	num64(fs, &c.ResultsCacheBytes, "results-cache-bytes", "memory for the rendered results rows of completed jobs, in bytes (0: off; pages are then read from Redis each time)")
	dur(fs, &c.LeaseTTL, "lease-ttl", "how long a shard stays claimed without a heartbeat (and how often unfinished shards are looked for)")
	str(fs, &c.InstanceID, "instance-id", "stable id of this instance for shard leases (default: hostname/listen address)")
	str(fs, &c.FairWeights, "fair-weights", "standalone: shares of the workers by plan when accounts compete, e.g. payg=1,starter=1,standard=2,professional=4 (rows per turn; every plan 1 unless given; payg: no active unlimited plan)")
	num(fs, &c.FairAccountWorkers, "fair-account-workers", "standalone: most shards one account runs at once (0: up to --workers while no other account waits)")
	boolean(fs, &c.FairPreempt, "fair-preempt", "standalone: an account that was idle gets a worker at once, stopping the youngest shard of the account holding the most (it is queued again; its answers so far are kept)")
	str(fs, &c.NetworkHosts, "network-hosts", "comma-separated professional-network hosts recognised in network_url")
	boolean(fs, &c.RedirectChecks, "redirect-checks", "check whether a domain row's website redirects to another domain")
	str(fs, &c.CompanyData, "company-data", "JSON Lines company file to import at start when the company store is empty")
	str(fs, &c.SMTPHelo, "smtp-helo", "EHLO name of SMTP checks: a name whose A and PTR records match the egress IP")
	str(fs, &c.SMTPMailFrom, "smtp-mail-from", "MAIL FROM address of SMTP checks (default verify@<smtp-helo>)")
	num(fs, &c.SMTPSessionsPerHost, "smtp-sessions-per-host", "SMTP sessions open at once per mail server address (not per MX name; smtp-rules may set their own), shared by every process through Redis")
	float(fs, &c.SMTPSessionRate, "smtp-session-rate", "new SMTP sessions per second per mail server address, shared by every process through Redis")
	dur(fs, &c.SMTPCommandTimeout, "smtp-command-timeout", "wait for one SMTP reply (bounds tarpits)")
	dur(fs, &c.SMTPSessionIdle, "smtp-session-idle", "how long an SMTP session with nothing left to check stays open (holding its place under --smtp-sessions-per-host) for the next batch to the same server; 0: end every session at once (QUIT)")
	str(fs, &c.VerifyRetryDelays, "verify-retry-delays", "waits before each retry of a greylisted or temporarily failed address (bulk verification and bulk lookup); after the last it is unknown")
	dur(fs, &c.LookupTimeout, "lookup-timeout", "time limit of one single email lookup (POST /v1/email-lookup and the unlimited one); past it: 502, nothing charged")
	boolean(fs, &c.FinderLearnFromVerification, "finder-learn-from-verification", "bulk verification's deliverable addresses on domains that are not catch-all teach the email finder their shape (separator, initials), shared through Redis; false: verification teaches nothing")
	num(fs, &c.UnlimitedLookupRPS, "unlimited-lookup-rps", "POST /v1/unlimited/email-lookup requests per second per account (on top of the per-key rate limit)")
	str(fs, &c.SpamdAddr, "spamd-addr", "SpamAssassin spamd host:port for POST /v1/content-spam-check (empty: it answers 503 engine_unavailable)")
	dur(fs, &c.SpamdTimeout, "spamd-timeout", "time limit of one content spam check, waiting for a free spamd connection included; past it: 503 engine_unavailable")
	num(fs, &c.SpamdMaxConns, "spamd-max-conns", "content spam checks sent to spamd at once per process (match spamd --max-children; more wait, up to 4x this many)")
	str(fs, &c.SpamCheckAllowances, "spam-check-allowances", "daily content spam checks per account by plan, e.g. payg=100,starter=250,standard=500,professional=1000 (payg: no active unlimited plan)")
	dur(fs, &c.VerifySingleRetry, "verify-single-retry", "GET /v1/verify: retry a greylisted address once after this wait, within the request's timeout (0: never)")
	secretStr(fs, &c.SMTPEgress, "smtp-egress", "SMTP egresses, ';'-separated, each comma-separated key=value: name, helo, source (local address to bind), proxy (socks5://[user:pass@]host:port), public_ip (the address mail servers see, for the HELO check), mail_from; e.g. name=a,source=203.0.113.5,helo=a.example.com;name=b,proxy=socks5://10.0.0.9:1080,helo=b.example.com,public_ip=198.51.100.7 (docs/egress.md)")
	secretStr(fs, &c.SMTPProxy, "smtp-proxy", "send SMTP checks through this SOCKS5 proxy, socks5://[user:pass@]host:port, greeting with --smtp-helo (one egress; credentials are never logged)")
	str(fs, &c.SMTPSourceIPs, "smtp-source-ips", "send SMTP checks from these local addresses, comma-separated, each ip or ip=helo-name (default HELO --smtp-helo); one egress per address")
	boolean(fs, &c.SMTPDenyPrivate, "smtp-deny-private", "deprecated, no effect: addresses that are not public are always refused (open ranges with --outbound-allow-cidrs)")
	c.registerWebhooks(fs)
	boolean(fs, &c.Demo, "demo", "create a demo account and keys on first start")
	str(fs, &c.DemoKeysFile, "demo-keys-file", "where --demo writes the demo keys (mode 0600)")
	str(fs, &c.DashboardOrigin, "dashboard-origin", "the dashboard's public origin, e.g. https://bulkd.example.com, that dashboard form posts must come from (default: the request's Host)")
	boolean(fs, &c.DashboardAllowHTTP, "dashboard-allow-http", "send the dashboard's session cookie without Secure, for plain-HTTP local development (never in production)")
	num(fs, &c.SignInIPv6Prefix, "signin-ipv6-prefix", "the sign-in throttle counts an IPv6 client by this prefix of its address (one subscriber's network; 32 to 128)")
	str(fs, &c.TrustedProxies, "trusted-proxies", "comma-separated CIDR ranges of the proxies in front of bulkd (ingress, load balancer); X-Forwarded-For is believed only from a peer in them, and its right-most address outside them is the client (default: none, the TCP peer is the client)")
	c.RegisterLimits(fs)
}

// TrustedProxyPrefixes parses --trusted-proxies.
func (c *Config) TrustedProxyPrefixes() ([]netip.Prefix, error) {
	p, err := outbound.ParsePrefixes(c.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("--trusted-proxies: %w", err)
	}
	return p, nil
}

// EnvName is the environment variable of a flag: redis-url -> BULKD_REDIS_URL.
func EnvName(flagName string) string {
	return "BULKD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func env(name string) (string, bool) { return os.LookupEnv(EnvName(name)) }

func usage(u, name string) string { return u + " [" + EnvName(name) + "]" }

func str(fs *flag.FlagSet, p *string, name, u string) {
	if v, ok := env(name); ok {
		*p = v
	}
	fs.StringVar(p, name, *p, usage(u, name))
}

// secretStr is str for a setting that may carry a password (a proxy URL):
// the value from the environment is used but not shown as the default in
// --help output.
func secretStr(fs *flag.FlagSet, p *string, name, u string) {
	fs.StringVar(p, name, "", usage(u, name))
	if v, ok := env(name); ok {
		*p = v
	}
}

func num(fs *flag.FlagSet, p *int, name, u string) {
	if v, ok := env(name); ok {
		if n, err := strconv.Atoi(v); err == nil {
			*p = n
		} else {
			fmt.Fprintf(os.Stderr, "ignoring %s=%q: not an integer\n", EnvName(name), v)
		}
	}
	fs.IntVar(p, name, *p, usage(u, name))
}

func num64(fs *flag.FlagSet, p *int64, name, u string) {
	if v, ok := env(name); ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			*p = n
		} else {
			fmt.Fprintf(os.Stderr, "ignoring %s=%q: not an integer\n", EnvName(name), v)
		}
	}
	fs.Int64Var(p, name, *p, usage(u, name))
}

func dur(fs *flag.FlagSet, p *time.Duration, name, u string) {
	if v, ok := env(name); ok {
		if d, err := time.ParseDuration(v); err == nil {
			*p = d
		} else {
			fmt.Fprintf(os.Stderr, "ignoring %s=%q: not a duration\n", EnvName(name), v)
		}
	}
	fs.DurationVar(p, name, *p, usage(u, name))
}

func float(fs *flag.FlagSet, p *float64, name, u string) {
	if v, ok := env(name); ok {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			*p = f
		} else {
			fmt.Fprintf(os.Stderr, "ignoring %s=%q: not a number\n", EnvName(name), v)
		}
	}
	fs.Float64Var(p, name, *p, usage(u, name))
}

// RetryDelays parses --verify-retry-delays.
func (c *Config) RetryDelays() ([]time.Duration, error) {
	var out []time.Duration
	for _, part := range strings.Split(c.VerifyRetryDelays, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		d, err := time.ParseDuration(part)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("--verify-retry-delays: %q is not a positive duration", part)
		}
		out = append(out, d)
	}
	if len(out) > 10 {
		return nil, fmt.Errorf("--verify-retry-delays: at most 10 retries")
	}
	return out, nil
}

func boolean(fs *flag.FlagSet, p *bool, name, u string) {
	if v, ok := env(name); ok {
		if b, err := strconv.ParseBool(v); err == nil {
			*p = b
		}
	}
	fs.BoolVar(p, name, *p, usage(u, name))
}

// OutboundAllowPrefixes parses --outbound-allow-cidrs.
func (c *Config) OutboundAllowPrefixes() ([]netip.Prefix, error) {
	p, err := outbound.ParsePrefixes(c.OutboundAllowCIDRs)
	if err != nil {
		return nil, fmt.Errorf("--outbound-allow-cidrs: %w", err)
	}
	return p, nil
}

// WebhookAllowPrefixes parses --webhook-allow-cidrs.
func (c *Config) WebhookAllowPrefixes() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(c.WebhookAllowCIDRs, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("--webhook-allow-cidrs: %q is not a CIDR range: %w", f, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func (c *Config) validateWebhooks() error {
	if _, err := c.WebhookAllowPrefixes(); err != nil {
		return err
	}
	if c.PublicURL != "" {
		u, err := url.Parse(c.PublicURL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("--public-url must be an absolute http(s) URL, not %q", c.PublicURL)
		}
	}
	if c.WebhookTimeout < 100*time.Millisecond || c.WebhookTimeout > 5*time.Minute {
		return fmt.Errorf("--webhook-timeout must be 100ms..5m")
	}
	if c.WebhookMaxAge < time.Second {
		return fmt.Errorf("--webhook-max-age must be at least 1s")
	}
	if c.WebhookBackoff < 10*time.Millisecond || c.WebhookBackoffMax < c.WebhookBackoff {
		return fmt.Errorf("--webhook-backoff must be at least 10ms and --webhook-backoff-max at least --webhook-backoff")
	}
	return nil
}

// RegisterStore adds only the flags of the processes that use Redis but
// serve no API (`bulkd controller`): Redis, logging and retention.
func (c *Config) RegisterStore(fs *flag.FlagSet) {
	str(fs, &c.RedisURL, "redis-url", "Redis URL (redis://[user:pass@]host:port/db, rediss:// for TLS)")
	str(fs, &c.LogFormat, "log-format", "log format: json or text")
	str(fs, &c.LogLevel, "log-level", "log level: debug, info, warn or error")
	dur(fs, &c.Retention, "retention", "how long a job (its BulkJob and its data) is kept after submission")
	c.registerWebhooks(fs) // the controller delivers webhook events too
}

// registerWebhooks adds the webhook delivery flags (docs/webhooks.md).
func (c *Config) registerWebhooks(fs *flag.FlagSet) {
	// Every mode that opens connections for customers registers this (the
	// controller delivers webhooks), so it is registered here.
	str(fs, &c.OutboundAllowCIDRs, "outbound-allow-cidrs", "comma-separated address ranges that redirect checks, SMTP checks and webhooks may reach although they are not public (your own receivers, a test mail world: 127.0.0.0/8); default: public addresses only")
	str(fs, &c.PublicURL, "public-url", "the API's public base URL (https://api.example.com): webhook events then carry absolute status and results URLs besides the paths")
	boolean(fs, &c.WebhookAllowLoopback, "webhook-allow-loopback", "tests and development only: a webhook_url may be http:// or https:// to a loopback address or localhost")
	str(fs, &c.WebhookAllowCIDRs, "webhook-allow-cidrs", "comma-separated address ranges webhooks (only) may reach although they are not public (receivers inside your own network, e.g. 10.20.0.0/16), on top of --outbound-allow-cidrs; http:// and IP literals are accepted there")
	dur(fs, &c.WebhookTimeout, "webhook-timeout", "time limit of one webhook delivery attempt (connect, send, answer)")
	dur(fs, &c.WebhookMaxAge, "webhook-max-age", "how long a webhook event is retried before it is given up")
	dur(fs, &c.WebhookBackoff, "webhook-backoff", "wait after a webhook event's first failed attempt; doubled after each, with jitter")
	dur(fs, &c.WebhookBackoffMax, "webhook-backoff-max", "longest wait between two attempts of a webhook event")
}

// Kube is what the Kubernetes modes add: `bulkd apiserver` (the API,
// creating a BulkJob per accepted submission) and `bulkd controller` (the
// operator running BulkJobs as Indexed Jobs of processor pods).
type Kube struct {
	// Both.
	Kubeconfig string // empty: in-cluster, or $KUBECONFIG
	Namespace  string // where BulkJobs and their Jobs live; empty: the pod's own namespace

	// apiserver.
	Parallelism int // parallelism of a new BulkJob

	// controller.
	MetricsAddr          string
	HealthAddr           string
	PprofAddr            string
	LeaderElect          bool
	Concurrency          int
	ParallelismCap       int
	Image                string
	ImagePullPolicy      string
	ServiceAccount       string
	Resources            string // JSON of a container's resources: {"requests":{"cpu":"250m"},"limits":{"memory":"1Gi"}}
	RedisSecretName      string
	RedisSecretKey       string
	ProcessorConfigMap   string
	ProcessorSecret      string // Secret of BULKD_* settings for the processor pods (SMTP egress with proxy credentials)
	FamilyProfiles       string // JSON of per-family processor settings by family name (controllers.ParseFamilyProfiles)
	BackoffLimitPerShard int
	MaxFailedShards      int
	JobTTL               time.Duration
	ProcessorTimeout     time.Duration
	// Requeue is the safety-net resync of a running BulkJob: progress
	// normally wakes the controller through the processors'
	// announcements (Redis pub/sub).
	Requeue time.Duration
	// ProgressInterval is the least time between two status writes of one
	// BulkJob that only report progress; ProgressWrites caps such writes
	// over all BulkJobs per second (0: no cap). Phase changes are written
	// at once.
	ProgressInterval time.Duration
	ProgressWrites   int
	// MaxRunningShards is the global budget of processor pods running at
	// once over every BulkJob (0: none), MaxRunningShardsPerAccount one
	// account's share of it (0: the global budget); KueueQueueName, when
	// set, hands admission to Kueue instead (docs/architecture.md).
	MaxRunningShards           int
	MaxRunningShardsPerAccount int
	// NewcomerSlots is the part of the global budget only an account with
	// no shard running may take (-1: 1% of MaxRunningShards).
	NewcomerSlots  int
	KueueQueueName string
	// FairWeights weighs accounts' turns by plan, as in standalone mode
	// (the same BULKD_FAIR_WEIGHTS): "payg=1,professional=4".
	FairWeights string
}

// DefaultKube returns the defaults.
func DefaultKube() Kube {
	return Kube{
		Parallelism:          8,
		MetricsAddr:          ":8080",
		HealthAddr:           ":8081",
		LeaderElect:          true,
		Concurrency:          4,
		ParallelismCap:       32,
		Image:                "bulkd:latest",
		ImagePullPolicy:      "IfNotPresent",
		RedisSecretName:      "bulkd-redis",
		RedisSecretKey:       "redis-url",
		BackoffLimitPerShard: 3,
		JobTTL:               time.Hour,
		ProcessorTimeout:     30 * time.Minute,
		Requeue:              time.Minute,
		ProgressInterval:     10 * time.Second,
		ProgressWrites:       20,
		// 16 pods of the chart's 250m CPU request fit 4 CPUs; half of them
		// for one account leaves the other half to everyone else.
		MaxRunningShards:           16,
		MaxRunningShardsPerAccount: 8,
		NewcomerSlots:              -1,
	}
}

func (k *Kube) registerCommon(fs *flag.FlagSet) {
	str(fs, &k.Kubeconfig, "kubeconfig", "kubeconfig file (default: in-cluster configuration, or $KUBECONFIG)")
	str(fs, &k.Namespace, "namespace", "namespace of the BulkJobs and their Jobs (default: the pod's own namespace)")
}

// RegisterAPIServer adds `bulkd apiserver`'s Kubernetes flags.
func (k *Kube) RegisterAPIServer(fs *flag.FlagSet) {
	k.registerCommon(fs)
	num(fs, &k.Parallelism, "parallelism", "shards of one job processed at once (the controller may cap it)")
}

// RegisterController adds `bulkd controller`'s flags.
func (k *Kube) RegisterController(fs *flag.FlagSet) {
	k.registerCommon(fs)
	str(fs, &k.MetricsAddr, "metrics-bind-address", `metrics listen address ("0" turns metrics off)`)
	str(fs, &k.HealthAddr, "health-probe-bind-address", `health probe listen address: /healthz, /readyz ("0" turns probes off)`)
	str(fs, &k.PprofAddr, "pprof-bind-address", `Go profiling (/debug/pprof/) listen address, for profiling the controller at scale; off by default: bind it to loopback ("" or "0" turns it off)`)
	boolean(fs, &k.LeaderElect, "leader-elect", "elect one active controller among the replicas (a Lease in the namespace)")
	num(fs, &k.Concurrency, "concurrency", "BulkJobs reconciled at once")
	num(fs, &k.ParallelismCap, "parallelism-cap", "most processor pods one BulkJob runs at once (0: no cap)")
	str(fs, &k.Image, "processor-image", "container image of the processor pods")
	str(fs, &k.ImagePullPolicy, "processor-image-pull-policy", "image pull policy of the processor pods: Always, IfNotPresent or Never")
	str(fs, &k.ServiceAccount, "processor-service-account", "service account of the processor pods (default: the namespace's default)")
	str(fs, &k.Resources, "processor-resources", `resources of a processor container, JSON: {"requests":{"cpu":"250m"},"limits":{"memory":"1Gi"}}`)
	str(fs, &k.RedisSecretName, "redis-secret-name", "Secret holding the Redis URL the processor pods use")
	str(fs, &k.RedisSecretKey, "redis-secret-key", "key of the Redis URL in --redis-secret-name")
	str(fs, &k.ProcessorConfigMap, "processor-config-map", "ConfigMap of BULKD_* settings for the processor pods (optional)")
	str(fs, &k.ProcessorSecret, "processor-secret", "Secret of BULKD_* settings for the processor pods, loaded after the ConfigMaps (optional; e.g. BULKD_SMTP_EGRESS with proxy credentials)")
	str(fs, &k.FamilyProfiles, "family-profiles", `per-family processor settings, JSON by family, every field optional: {"email_verification":{"parallelismCap":4,"resources":{"requests":{"cpu":"100m"}},"configMap":"NAME","env":{"K":"V"},"nodeSelector":{"K":"V"},"tolerations":[...],"hostNetwork":true}}`)
	num(fs, &k.BackoffLimitPerShard, "backoff-limit-per-shard", "retries of a failed shard before its unanswered rows are answered as the family's error outcome")
	num(fs, &k.MaxFailedShards, "max-failed-shards", "shards of one job that may fail for good before the rest are stopped and answered as the family's error outcome (0: never stop early)")
	dur(fs, &k.JobTTL, "job-ttl", "how long a finished processor Job and its pods are kept")
	dur(fs, &k.ProcessorTimeout, "processor-timeout", "time limit of one processor run (one attempt at one shard)")
	dur(fs, &k.Requeue, "requeue", "safety-net resync of a running BulkJob (progress normally arrives as the processors announce it)")
	dur(fs, &k.ProgressInterval, "progress-interval", "least time between two status writes of one BulkJob that only report progress (phase changes are written at once; 0: no such limit)")
	num(fs, &k.ProgressWrites, "progress-writes", "status writes that only report progress, per second over all BulkJobs (0: no cap)")
	num(fs, &k.MaxRunningShards, "max-running-shards", "processor pods running at once over all BulkJobs: shards are admitted against it across accounts in turn (0: no global budget; with --max-running-shards-per-account 0 too there is no admission and pods start as their Job allows)")
	num(fs, &k.MaxRunningShardsPerAccount, "max-running-shards-per-account", "processor pods of one account running at once (0: --max-running-shards)")
	num(fs, &k.NewcomerSlots, "newcomer-slots", "slots of --max-running-shards kept for accounts with no shard running, so that a new account's job starts at once when others fill the budget (-1: 1% of --max-running-shards, none under 100; 0: none)")
	str(fs, &k.FairWeights, "fair-weights", "shares of the processor budget by plan when accounts compete, e.g. payg=1,starter=1,standard=2,professional=4 (rows per turn; every plan 1 unless given; payg: no active unlimited plan)")
	str(fs, &k.KueueQueueName, "kueue-queue-name", "hand admission to Kueue: Jobs are created suspended with label kueue.x-k8s.io/queue-name set to this, where {account}, {plan} and {family} are replaced (bulkd-{plan}); the budgets above are then Kueue's to enforce (default: bulkd admits)")
}

// Validate checks the Kubernetes settings and fills the namespace from the
// pod's service account when it is not given.
func (k *Kube) Validate() error {
	if k.Namespace == "" {
		if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
			k.Namespace = strings.TrimSpace(string(b))
		}
	}
	if k.Namespace == "" {
		return fmt.Errorf("--namespace is required outside a cluster")
	}
	if k.Parallelism < 1 || k.Parallelism > 10_000 {
		return fmt.Errorf("--parallelism must be 1..10000")
	}
	if k.ParallelismCap < 0 || k.MaxFailedShards < 0 || k.BackoffLimitPerShard < 0 {
		return fmt.Errorf("--parallelism-cap, --max-failed-shards and --backoff-limit-per-shard cannot be negative")
	}
	if k.Concurrency < 1 {
		return fmt.Errorf("--concurrency must be at least 1")
	}
	switch k.ImagePullPolicy {
	case "Always", "IfNotPresent", "Never":
	default:
		return fmt.Errorf("--processor-image-pull-policy must be Always, IfNotPresent or Never, not %q", k.ImagePullPolicy)
	}
	if strings.TrimSpace(k.FamilyProfiles) != "" {
		var profiles map[string]map[string]json.RawMessage
		if err := json.Unmarshal([]byte(k.FamilyProfiles), &profiles); err != nil {
			return fmt.Errorf("--family-profiles must be a JSON object of objects by family: %w", err)
		}
	}
	if k.Image == "" || k.RedisSecretName == "" || k.RedisSecretKey == "" {
		return fmt.Errorf("--processor-image, --redis-secret-name and --redis-secret-key are required")
	}
	// A finished Job is where the controller reads which shards failed, so
	// it must outlive at least a reconcile: no zero TTL.
	if k.JobTTL <= 0 || k.ProcessorTimeout <= 0 || k.Requeue <= 0 {
		return fmt.Errorf("--job-ttl, --processor-timeout and --requeue must be positive")
	}
	if k.ProgressInterval < 0 || k.ProgressWrites < 0 {
		return fmt.Errorf("--progress-interval and --progress-writes cannot be negative")
	}
	if k.MaxRunningShards < 0 || k.MaxRunningShards > 100_000 || k.MaxRunningShardsPerAccount < 0 || k.MaxRunningShardsPerAccount > 100_000 {
		return fmt.Errorf("--max-running-shards and --max-running-shards-per-account must be 0..100000")
	}
	if k.NewcomerSlots < -1 || k.NewcomerSlots > 0 && k.NewcomerSlots >= k.MaxRunningShards {
		return fmt.Errorf("--newcomer-slots must be -1 (1%% of --max-running-shards), 0, or less than --max-running-shards")
	}
	return nil
}

// SMTPEgresses parses the SMTP egress flags (--smtp-egress, --smtp-proxy,
// --smtp-source-ips; none: the single default egress with --smtp-helo).
func (c *Config) SMTPEgresses() ([]egress.Egress, error) {
	return egress.Parse(egress.Flags{Helo: c.SMTPHelo, MailFrom: c.SMTPMailFrom, Egress: c.SMTPEgress,
		Proxy: c.SMTPProxy, SourceIPs: c.SMTPSourceIPs})
}
