// Package lists holds the reference lists the verifier flags addresses
// with: disposable domains, role local parts and free-mail providers, plus
// the typo suggestions that use the well-known providers.
//
// The defaults are curated text files embedded in the binary (no module on
// the Go module proxy ships maintained lists under a permissive licence that
// we can reach; see internal/verify/doc.go). An operator replaces any of the
// three with `bulkd admin lists load`, which stores the list in Redis; every
// process overlays those on the defaults at start (LoadFromRedis).
package lists

import (
	"bufio"
	"embed"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
)

//go:embed disposable.txt role.txt free.txt
var files embed.FS

// The kinds of list.
const (
	Disposable = "disposable"
	Role       = "role"
	Free       = "free"
)

// Kinds are the list kinds, in display order.
var Kinds = []string{Disposable, Role, Free}

// Info describes one loaded list.
type Info struct {
	Kind   string `json:"kind"`
	Count  int    `json:"count"`
	Source string `json:"source"` // "embedded" or what the operator loaded it from
}

// Lists is a set of the three lists. It is safe for concurrent use, and
// Load may replace a list while others read.
type Lists struct {
	mu   sync.RWMutex
	sets map[string]map[string]struct{}
	info map[string]Info
}

// MaxEntries bounds one list, so a wrong file (a whole mailbox export)
// cannot take the process's memory.
const MaxEntries = 1 << 20

// Default returns a new Lists holding the embedded lists.
func Default() *Lists {
	l := &Lists{sets: map[string]map[string]struct{}{}, info: map[string]Info{}}
	for _, k := range Kinds {
		f, err := files.Open(k + ".txt")
		if err != nil {
			panic(fmt.Sprintf("lists: embedded %s list: %v", k, err))
		}
		if _, err := l.load(k, f, "embedded"); err != nil {
			panic(fmt.Sprintf("lists: embedded %s list: %v", k, err))
		}
		f.Close()
	}
	return l
}

// Load replaces the list of kind with the entries read from r (one a line,
// '#' starts a comment, blank lines ignored) and returns how many it holds.
// On error the previous list is kept.
func (l *Lists) Load(kind string, r io.Reader) (int, error) {
	return l.load(kind, r, "loaded")
}

// LoadSource is Load with a description of where the list came from, shown
// by Infos.
func (l *Lists) LoadSource(kind string, r io.Reader, source string) (int, error) {
	return l.load(kind, r, source)
}

func (l *Lists) load(kind string, r io.Reader, source string) (int, error) {
	set, err := Parse(kind, r)
	if err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sets[kind] = set
	l.info[kind] = Info{Kind: kind, Count: len(set), Source: source}
	return len(set), nil
}

// Parse reads one list and validates its entries: domains must be
// lowercase-able host names (ASCII; convert IDNs to A-labels first), role
// entries dot-atom local parts. The first bad line is an error, so an
// operator who loads the wrong file hears about it.
func Parse(kind string, r io.Reader) (map[string]struct{}, error) {
	if !ValidKind(kind) {
		return nil, fmt.Errorf("unknown list kind %q (want disposable, role or free)", kind)
	}
	set := map[string]struct{}{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64*1024)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		e := strings.ToLower(strings.TrimSpace(line))
		if e == "" {
			continue
		}
		if kind == Role {
			if !validLocal(e) {
				return nil, fmt.Errorf("%s list line %d: %q is not a local part", kind, n, e)
			}
		} else {
			e = strings.TrimSuffix(e, ".")
			if !validDomain(e) {
				return nil, fmt.Errorf("%s list line %d: %q is not a domain", kind, n, e)
			}
		}
		set[e] = struct{}{}
		if len(set) > MaxEntries {
			return nil, fmt.Errorf("%s list: more than %d entries", kind, MaxEntries)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s list: %w", kind, err)
	}
	return set, nil
}

// ValidKind reports a known list kind.
func ValidKind(kind string) bool {
	return kind == Disposable || kind == Role || kind == Free
}

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
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),:;<>@[\]`, c) >= 0 {
			return false
		}
	}
	return true
}

func (l *Lists) has(kind, e string) bool {
	l.mu.RLock()
	_, ok := l.sets[kind][e]
	l.mu.RUnlock()
	return ok
}

// IsDisposable reports a disposable domain: the domain or one of its parent
// domains is listed (services hand out random subdomains).
func (l *Lists) IsDisposable(domain string) bool {
	d := strings.ToLower(domain)
	for {
		if l.has(Disposable, d) {
			return true
		}
		i := strings.IndexByte(d, '.')
		if i < 0 {
			return false
		}
		d = d[i+1:]
		if !strings.Contains(d, ".") {
			return false // never match a bare TLD
		}
	}
}

// IsFree reports a free-mail provider domain (exact match: a company's
// subdomain of a free provider does not exist, and a parent match would make
// e.g. every *.ru domain free if someone listed "ru").
func (l *Lists) IsFree(domain string) bool {
	return l.has(Free, strings.ToLower(domain))
}

// IsRole reports a role local part. A "+tag" subaddress and the quotes of a
// simple quoted local part are ignored: "Sales+eu" is the sales mailbox.
func (l *Lists) IsRole(local string) bool {
	s := strings.ToLower(local)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' && !strings.ContainsAny(s[1:len(s)-1], `"\`) {
		s = s[1 : len(s)-1]
	}
	if i := strings.IndexByte(s, '+'); i > 0 {
		s = s[:i]
	}
	return l.has(Role, s)
}

// Infos returns the count and source of each list, in Kinds order.
func (l *Lists) Infos() []Info {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]Info, 0, len(Kinds))
	for _, k := range Kinds {
		out = append(out, l.info[k])
	}
	return out
}

// Entries returns a sorted copy of one list.
func (l *Lists) Entries(kind string) []string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := make([]string, 0, len(l.sets[kind]))
	for e := range l.sets[kind] {
		out = append(out, e)
	}
	sort.Strings(out)
	return out
}
