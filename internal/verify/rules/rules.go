// Package rules is the verifier's table of per-server rules, matched by
// the suffix of an MX host name: which provider runs the server, how long
// to wait for a reply, how many sessions per server address and per
// provider, how many RCPTs per session, and whether a catch-all probe is
// needed. Defaults are compiled in (Default); an operator overrides or adds
// rules with `bulkd admin smtp-rules`, stored in Redis (Store) and picked up
// by every process without a restart (NewRedisHolder).
//
// A rule is one line: the suffix, then key=value settings.
//
//	# suffix                     settings
//	protection.outlook.com       provider=microsoft provider_sessions=30 rcpts=50
//	pphosted.com                 provider=proofpoint sessions=2 provider_sessions=10 timeout=30s
//	gmail-smtp-in.l.google.com   provider=google probe=no
//
// Keys (absent or 0: the verifier's own setting):
//
//	provider           a name for the operator of the servers; sessions to
//	                   all its servers are capped together (provider_sessions),
//	                   and a block from one of them backs off all of them
//	sessions           concurrent sessions per server address (1..100);
//	                   default --smtp-sessions-per-host
//	provider_sessions  concurrent sessions over all the provider's server
//	                   addresses (1..10000; needs provider); default no cap
//	rcpts              RCPTs per session, probe included (2..1000); the
//	                   lower of this and the verifier's MaxRcptsPerSession (50)
//	timeout            wait for one SMTP reply (1s..5m); default
//	                   --smtp-command-timeout
//	probe              yes (default) or no: no trusts a 250 as deliverable
//	                   without a catch-all probe; only for servers known to
//	                   refuse unknown recipients at RCPT and never to accept
//	                   everything
//
// A host name matches a rule when it is the suffix or ends with "." and the
// suffix; the longest matching suffix wins.
package rules

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Rule is one line of the table.
type Rule struct {
	Suffix           string        `json:"suffix"`
	Provider         string        `json:"provider,omitempty"`
	Sessions         int           `json:"sessions,omitempty"`
	ProviderSessions int           `json:"provider_sessions,omitempty"`
	Rcpts            int           `json:"rcpts,omitempty"`
	Timeout          time.Duration `json:"-"`
	NoProbe          bool          `json:"-"`
}

// String is the rule's line.
func (r Rule) String() string {
	b := []string{r.Suffix}
	if r.Provider != "" {
		b = append(b, "provider="+r.Provider)
	}
	if r.Sessions > 0 {
		b = append(b, "sessions="+strconv.Itoa(r.Sessions))
	}
	if r.ProviderSessions > 0 {
		b = append(b, "provider_sessions="+strconv.Itoa(r.ProviderSessions))
	}
	if r.Rcpts > 0 {
		b = append(b, "rcpts="+strconv.Itoa(r.Rcpts))
	}
	if r.Timeout > 0 {
		b = append(b, "timeout="+r.Timeout.String())
	}
	if r.NoProbe {
		b = append(b, "probe=no")
	}
	return strings.Join(b, " ")
}

// Settings is the rule's line without its suffix.
func (r Rule) Settings() string {
	s := r.String()
	return strings.TrimSpace(strings.TrimPrefix(s, r.Suffix))
}

// Limits of the settings.
const (
	MaxSessions         = 100
	MaxProviderSessions = 10000
	MaxRcpts            = 1000
	MinTimeout          = time.Second
	MaxTimeout          = 5 * time.Minute
)

// ParseLine parses one rule: "SUFFIX key=value ...".
func ParseLine(line string) (Rule, error) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return Rule{}, fmt.Errorf("empty rule")
	}
	return ParseRule(f[0], f[1:])
}

// ParseRule parses the settings of suffix.
func ParseRule(suffix string, settings []string) (Rule, error) {
	r := Rule{Suffix: canon(suffix)}
	if err := checkSuffix(r.Suffix); err != nil {
		return Rule{}, err
	}
	seen := map[string]bool{}
	for _, kv := range settings {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || v == "" {
			return Rule{}, fmt.Errorf("%s: %q is not key=value", r.Suffix, kv)
		}
		k = strings.ToLower(k)
		if seen[k] {
			return Rule{}, fmt.Errorf("%s: %s given twice", r.Suffix, k)
		}
		seen[k] = true
		num := func(lo, hi int) (int, error) {
			n, err := strconv.Atoi(v)
			if err != nil || n < lo || n > hi {
				return 0, fmt.Errorf("%s: %s must be %d..%d, not %q", r.Suffix, k, lo, hi, v)
			}
			return n, nil
		}
		var err error
		switch k {
		case "provider":
			v = strings.ToLower(v)
			if !validName(v) {
				return Rule{}, fmt.Errorf("%s: provider %q: use letters, digits, '-', '_' and '.'", r.Suffix, v)
			}
			r.Provider = v
		case "sessions":
			r.Sessions, err = num(1, MaxSessions)
		case "provider_sessions":
			r.ProviderSessions, err = num(1, MaxProviderSessions)
		case "rcpts":
			r.Rcpts, err = num(2, MaxRcpts)
		case "timeout":
			d, perr := time.ParseDuration(v)
			if perr != nil || d < MinTimeout || d > MaxTimeout {
				return Rule{}, fmt.Errorf("%s: timeout must be a duration of %v..%v, not %q", r.Suffix, MinTimeout, MaxTimeout, v)
			}
			r.Timeout = d
		case "probe":
			switch strings.ToLower(v) {
			case "yes", "true":
			case "no", "false":
				r.NoProbe = true
			default:
				return Rule{}, fmt.Errorf("%s: probe must be yes or no, not %q", r.Suffix, v)
			}
		default:
			return Rule{}, fmt.Errorf("%s: unknown setting %q (provider, sessions, provider_sessions, rcpts, timeout, probe)", r.Suffix, k)
		}
		if err != nil {
			return Rule{}, err
		}
	}
	if r.ProviderSessions > 0 && r.Provider == "" {
		return Rule{}, fmt.Errorf("%s: provider_sessions needs a provider", r.Suffix)
	}
	return r, nil
}

// maxRules bounds a table (and a file).
const maxRules = 10000

// Parse reads rules, one a line; blank lines and # comments are skipped.
// A suffix given twice is an error.
func Parse(r io.Reader) ([]Rule, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64*1024)
	var out []Rule
	seen := map[string]int{}
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		rule, err := ParseLine(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if prev, ok := seen[rule.Suffix]; ok {
			return nil, fmt.Errorf("line %d: %s already given on line %d", n, rule.Suffix, prev)
		}
		seen[rule.Suffix] = n
		out = append(out, rule)
		if len(out) > maxRules {
			return nil, fmt.Errorf("more than %d rules", maxRules)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read rules: %w", err)
	}
	return out, nil
}

func canon(s string) string {
	return strings.ToLower(strings.TrimSuffix(strings.TrimSpace(s), "."))
}

func checkSuffix(s string) error {
	if s == "" || len(s) > 253 {
		return fmt.Errorf("suffix %q: a host name suffix of 1..253 characters", s)
	}
	for _, l := range strings.Split(s, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("suffix %q: not a host name suffix", s)
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("suffix %q: not a host name suffix", s)
			}
		}
	}
	return nil
}

func validName(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// Source says where a rule of a Table comes from.
const (
	SourceDefault  = "default"
	SourceOperator = "operator"
)

// Table is a set of rules by suffix; it is read-only once built.
type Table struct {
	rules  map[string]Rule
	source map[string]string
}

// NewTable builds a table of the defaults overlaid with the operator's
// rules (an operator rule replaces the default of the same suffix).
func NewTable(defaults, operator []Rule) *Table {
	t := &Table{rules: map[string]Rule{}, source: map[string]string{}}
	for _, r := range defaults {
		t.rules[r.Suffix], t.source[r.Suffix] = r, SourceDefault
	}
	for _, r := range operator {
		t.rules[r.Suffix], t.source[r.Suffix] = r, SourceOperator
	}
	return t
}

// Match returns the rule of the longest suffix of host, if any.
func (t *Table) Match(host string) (Rule, bool) {
	if t == nil {
		return Rule{}, false
	}
	h := canon(host)
	if strings.HasPrefix(h, "[") {
		return Rule{}, false // an address literal has no name
	}
	for h != "" {
		if r, ok := t.rules[h]; ok {
			return r, true
		}
		i := strings.IndexByte(h, '.')
		if i < 0 {
			break
		}
		h = h[i+1:]
	}
	return Rule{}, false
}

// Entry is a rule with its source, for listing.
type Entry struct {
	Rule
	Timeout string `json:"timeout,omitempty"`
	Probe   bool   `json:"probe"`
	Source  string `json:"source"`
}

// Entries lists the table's rules by suffix.
func (t *Table) Entries() []Entry {
	var out []Entry
	for s, r := range t.rules {
		e := Entry{Rule: r, Probe: !r.NoProbe, Source: t.source[s]}
		if r.Timeout > 0 {
			e.Timeout = r.Timeout.String()
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Suffix, b.Suffix) })
	return out
}

// Len is the number of rules.
func (t *Table) Len() int { return len(t.rules) }
