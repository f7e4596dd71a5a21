package config

import (
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"
)

// README's configuration table lists every flag of `bulkd serve` with its
// environment variable; this keeps the two from drifting apart.
func TestREADMEListsEveryFlag(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `--([a-z-]+)` \\| `([A-Z_]+)` \\|").FindAllStringSubmatch(string(readme), -1) {
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
