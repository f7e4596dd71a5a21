package config

import (
	"fmt"
	"net"
	"os"
	"time"
)

// Validate checks values that flag parsing cannot, and fills derived
// defaults.
func (c *Config) Validate() error {
	if c.InstanceID == "" {
		host, _ := os.Hostname()
		c.InstanceID = host + "/" + c.Listen
	}
	for _, check := range []func() error{c.validateServer, c.validateJobs, c.validateSMTP} {
		if err := check(); err != nil {
			return err
		}
	}
	if _, err := c.TrustedProxyPrefixes(); err != nil {
		return err
	}
	if c.LookupTimeout < time.Second || c.LookupTimeout > 5*time.Minute {
		return fmt.Errorf("--lookup-timeout must be 1s..5m")
	}
	if c.UnlimitedLookupRPS < 1 {
		return fmt.Errorf("--unlimited-lookup-rps must be at least 1")
	}
	if c.SpamdTimeout < 100*time.Millisecond || c.SpamdTimeout > 5*time.Minute {
		return fmt.Errorf("--spamd-timeout must be 100ms..5m")
	}
	if c.SpamdMaxConns < 1 || c.SpamdMaxConns > 1000 {
		return fmt.Errorf("--spamd-max-conns must be 1..1000")
	}
	if c.SpamdAddr != "" {
		if _, _, err := net.SplitHostPort(c.SpamdAddr); err != nil {
			return fmt.Errorf("--spamd-addr must be host:port: %w", err)
		}
	}
	if _, err := c.OutboundAllowPrefixes(); err != nil {
		return err
	}
	if err := c.validateLimits(); err != nil {
		return err
	}
	return c.validateWebhooks()
}

// validateServer checks the HTTP server's flags: logs, limits on
// requests and bodies, the metrics listener.
func (c *Config) validateServer() error {
	if c.LogFormat != "json" && c.LogFormat != "text" {
		return fmt.Errorf("--log-format must be json or text, not %q", c.LogFormat)
	}
	if c.RateLimit < 1 {
		return fmt.Errorf("--rate-limit must be at least 1")
	}
	if c.SignInIPv6Prefix < 32 || c.SignInIPv6Prefix > 128 {
		return fmt.Errorf("--signin-ipv6-prefix must be from 32 to 128, not %d", c.SignInIPv6Prefix)
	}
	if c.MaxBodyBytes < 1024 {
		return fmt.Errorf("--max-body-bytes must be at least 1024")
	}
	if c.MaxDecodingBytes != 0 && c.MaxDecodingBytes < c.MaxBodyBytes {
		return fmt.Errorf("--max-decoding-bytes must be 0 (automatic) or at least --max-body-bytes (%d), or a body of the largest size could never be admitted", c.MaxBodyBytes)
	}
	if c.MaxDecodingBytesPerAccount != 0 && (c.MaxDecodingBytesPerAccount < c.MaxBodyBytes ||
		(c.MaxDecodingBytes != 0 && c.MaxDecodingBytesPerAccount > c.MaxDecodingBytes)) {
		return fmt.Errorf("--max-decoding-bytes-per-account must be 0 (automatic) or from --max-body-bytes (%d) to --max-decoding-bytes", c.MaxBodyBytes)
	}
	if c.BodyMinRate < 0 || c.BodyGrace < 100*time.Millisecond || c.BodyGrace > 5*time.Minute {
		return fmt.Errorf("--body-min-rate must not be negative and --body-grace must be 100ms..5m")
	}
	if m := c.MetricsListen; m != "" && m != "0" {
		if _, _, err := net.SplitHostPort(m); err != nil {
			return fmt.Errorf("--metrics-listen must be host:port, :port, or 0 for none: %w", err)
		}
	}
	return nil
}

// validateJobs checks the engine's and the processor's flags.
func (c *Config) validateJobs() error {
	if c.ShardSize < 1 || c.ShardSize > 100_000 {
		return fmt.Errorf("--shard-size must be 1..100000")
	}
	if c.ResultsCacheBytes < 0 {
		return fmt.Errorf("--results-cache-bytes must not be negative")
	}
	if c.MaxShards < 0 {
		return fmt.Errorf("--max-shards must not be negative")
	}
	if c.Workers < 1 || c.Workers > 1024 {
		return fmt.Errorf("--workers must be 1..1024")
	}
	if c.FairAccountWorkers < 0 || c.FairAccountWorkers > c.Workers {
		return fmt.Errorf("--fair-account-workers must be 0..--workers (%d)", c.Workers)
	}
	if c.BatchSize < 1 || c.BatchSize > 10_000 {
		return fmt.Errorf("--batch-size must be 1..10000")
	}
	if c.LeaseTTL < time.Second {
		return fmt.Errorf("--lease-ttl must be at least 1s")
	}
	if c.Retention < time.Hour {
		return fmt.Errorf("--retention must be at least 1h")
	}
	return nil
}

// validateSMTP checks the verifier's flags.
func (c *Config) validateSMTP() error {
	if c.SMTPPort < 1 || c.SMTPPort > 65535 {
		return fmt.Errorf("--smtp-port must be 1..65535")
	}
	if c.SMTPSessionsPerHost < 1 || c.SMTPSessionsPerHost > 100 {
		return fmt.Errorf("--smtp-sessions-per-host must be 1..100")
	}
	if c.SMTPSessionRate <= 0 {
		return fmt.Errorf("--smtp-session-rate must be positive")
	}
	if c.SMTPCommandTimeout < 100*time.Millisecond {
		return fmt.Errorf("--smtp-command-timeout must be at least 100ms")
	}
	if c.SMTPSessionIdle < 0 || c.SMTPSessionIdle > time.Minute {
		// A parked session holds a slot other processes may be waiting
		// for, and servers end idle clients on their own (often 30-60 s).
		return fmt.Errorf("--smtp-session-idle must be 0..1m")
	}
	if _, err := c.SMTPEgresses(); err != nil {
		return err
	}
	if _, err := c.RetryDelays(); err != nil {
		return err
	}
	return nil
}
