// Package config reads bulkd's settings from flags, each with a BULKD_*
// environment equivalent (the flag wins when both are given). README's
// configuration table is generated from the same definitions by
// `bulkd serve --help`.
package config

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
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

	ReadTimeout     time.Duration
	WriteTimeout    time.Duration
	IdleTimeout     time.Duration
	ShutdownTimeout time.Duration
	MaxBodyBytes    int64

	RateLimit int // requests per second per key

	// MonthlyLookupCaps overrides the unlimited plans' monthly single-lookup
	// caps: "starter=20000,standard=60000,professional=150000".
	MonthlyLookupCaps string

	// Job engine.
	ShardSize int           // distinct inputs per shard
	Workers   int           // in-process shard workers (standalone mode)
	Retention time.Duration // how long job data is kept
	// InstanceID names this process as the holder of shard leases. Stable
	// across restarts, it lets a restarted instance resume its own shards at
	// once; empty means "hostname/listen address".
	InstanceID string

	// Company enrichment.
	NetworkHosts   string // comma-separated recognised network hosts
	RedirectChecks bool   // check whether domain rows redirect elsewhere
	CompanyData    string // JSON Lines file imported at start when the company store is empty

	// Demo creates a demo account with credits and both key types on first
	// start and writes the keys to DemoKeysFile (make run uses it).
	Demo         bool
	DemoKeysFile string
}

// Default returns the defaults.
func Default() Config {
	return Config{
		Listen:          "127.0.0.1:8080",
		RedisURL:        "redis://127.0.0.1:6379/0",
		LogFormat:       "json",
		LogLevel:        "info",
		SMTPPort:        25,
		ReadTimeout:     60 * time.Second,
		WriteTimeout:    60 * time.Second,
		IdleTimeout:     120 * time.Second,
		ShutdownTimeout: 30 * time.Second,
		MaxBodyBytes:    64 << 20,
		RateLimit:       20,
		DemoKeysFile:    "var/demo-keys.env",
		ShardSize:       1000,
		Workers:         4,
		Retention:       30 * 24 * time.Hour,
		NetworkHosts:    "linkedin.com",
		RedirectChecks:  true,
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
	num(fs, &c.RateLimit, "rate-limit", "requests per second per API key (SPEC: 20)")
	str(fs, &c.MonthlyLookupCaps, "monthly-lookup-caps", "monthly single-lookup caps per unlimited plan, e.g. starter=20000,standard=60000")
	num(fs, &c.ShardSize, "shard-size", "distinct inputs per shard (the unit of work)")
	num(fs, &c.Workers, "workers", "in-process shard workers in standalone mode")
	dur(fs, &c.Retention, "retention", "how long job data (status and results) is kept after submission")
	str(fs, &c.InstanceID, "instance-id", "stable id of this instance for shard leases (default: hostname/listen address)")
	str(fs, &c.NetworkHosts, "network-hosts", "comma-separated professional-network hosts recognised in network_url")
	boolean(fs, &c.RedirectChecks, "redirect-checks", "check whether a domain row's website redirects to another domain")
	str(fs, &c.CompanyData, "company-data", "JSON Lines company file to import at start when the company store is empty")
	boolean(fs, &c.Demo, "demo", "create a demo account and keys on first start")
	str(fs, &c.DemoKeysFile, "demo-keys-file", "where --demo writes the demo keys (mode 0600)")
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

func boolean(fs *flag.FlagSet, p *bool, name, u string) {
	if v, ok := env(name); ok {
		if b, err := strconv.ParseBool(v); err == nil {
			*p = b
		}
	}
	fs.BoolVar(p, name, *p, usage(u, name))
}

// Validate checks values that flag parsing cannot, and fills derived
// defaults.
func (c *Config) Validate() error {
	if c.InstanceID == "" {
		host, _ := os.Hostname()
		c.InstanceID = host + "/" + c.Listen
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		return fmt.Errorf("--log-format must be json or text, not %q", c.LogFormat)
	}
	if c.RateLimit < 1 {
		return fmt.Errorf("--rate-limit must be at least 1")
	}
	if c.MaxBodyBytes < 1024 {
		return fmt.Errorf("--max-body-bytes must be at least 1024")
	}
	if c.ShardSize < 1 || c.ShardSize > 100_000 {
		return fmt.Errorf("--shard-size must be 1..100000")
	}
	if c.Workers < 1 || c.Workers > 1024 {
		return fmt.Errorf("--workers must be 1..1024")
	}
	if c.Retention < time.Hour {
		return fmt.Errorf("--retention must be at least 1h")
	}
	if c.SMTPPort < 1 || c.SMTPPort > 65535 {
		return fmt.Errorf("--smtp-port must be 1..65535")
	}
	return nil
}
