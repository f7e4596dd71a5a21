package config

import (
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// README's configuration table lists every flag of `bulkd serve` with its
// environment variable; this keeps the two from drifting apart.
func TestREADMEListsEveryFlag(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)` \\| `([A-Z0-9_]+)` \\|").FindAllStringSubmatch(string(readme), -1) {
		rows[m[1]] = m[2]
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c := Default()
	c.Register(fs)
	fs.VisitAll(func(f *flag.Flag) {
		env, ok := rows[f.Name]
		switch {
		case !ok:
			t.Errorf("README's configuration table lacks --%s", f.Name)
		case env != EnvName(f.Name):
			t.Errorf("README names --%s's variable %s, not %s", f.Name, env, EnvName(f.Name))
		}
	})
}

// TestOutboundAllowCIDRs: the allowance is empty by default (public
// addresses only), parsed as CIDR ranges (a bare address is its own range),
// and a value that is not a range fails validation, naming the flag.
func TestOutboundAllowCIDRs(t *testing.T) {
	c := Default()
	if p, err := c.OutboundAllowPrefixes(); err != nil || len(p) != 0 {
		t.Fatalf("default allowance %v, %v; want none", p, err)
	}
	c.OutboundAllowCIDRs = "127.0.0.0/8, 10.20.0.5,fd00:1::/64"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if p, _ := c.OutboundAllowPrefixes(); len(p) != 3 || p[1].String() != "10.20.0.5/32" {
		t.Fatalf("parsed %v", p)
	}
	c.OutboundAllowCIDRs = "10.0.0.0/8,intranet"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--outbound-allow-cidrs") {
		t.Fatalf("bad range: %v", err)
	}
}

func TestFairAccountWorkersBounds(t *testing.T) {
	for _, tc := range []struct {
		workers, per int
		ok           bool
	}{{4, 0, true}, {4, 4, true}, {4, 2, true}, {4, 5, false}, {4, -1, false}} {
		c := Default()
		c.Workers, c.FairAccountWorkers = tc.workers, tc.per
		if err := c.Validate(); (err == nil) != tc.ok {
			t.Errorf("--workers %d --fair-account-workers %d: %v", tc.workers, tc.per, err)
		}
	}
}

// A proxy URL from the environment is used, and --help does not show it
// (it may carry a password); a flag still wins over it.
func TestSMTPProxyFromEnvironmentNotShown(t *testing.T) {
	t.Setenv("BULKD_SMTP_PROXY", "socks5://bulkd:hunter2@10.0.0.9:1080")
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c := Default()
	c.Register(fs)
	var help strings.Builder
	fs.SetOutput(&help)
	fs.PrintDefaults()
	if strings.Contains(help.String(), "hunter2") {
		t.Errorf("--help shows the proxy password:\n%s", help.String())
	}
	egs, err := c.SMTPEgresses()
	if err != nil || len(egs) != 1 || egs[0].ProxyAddr() != "10.0.0.9:1080" {
		t.Fatalf("egresses %v, %v", egs, err)
	}
	if err := fs.Parse([]string{"--smtp-proxy", "socks5://10.0.0.10:1080"}); err != nil {
		t.Fatal(err)
	}
	if egs, _ := c.SMTPEgresses(); egs[0].ProxyAddr() != "10.0.0.10:1080" {
		t.Errorf("the flag did not win: %v", egs)
	}
}

// --smtp-session-idle: 2s by default, 0 allowed (parking off), negative
// and over a minute refused naming the flag.
func TestSMTPSessionIdleBounds(t *testing.T) {
	if d := Default().SMTPSessionIdle; d != 2*time.Second {
		t.Errorf("default %v, want 2s", d)
	}
	for _, tc := range []struct {
		v  time.Duration
		ok bool
	}{{0, true}, {500 * time.Millisecond, true}, {time.Minute, true}, {-time.Second, false}, {61 * time.Second, false}} {
		c := Default()
		c.SMTPSessionIdle = tc.v
		err := c.Validate()
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "--smtp-session-idle")) {
			t.Errorf("%v: %v", tc.v, err)
		}
	}
}
