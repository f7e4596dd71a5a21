// Package lists holds the reference lists the verifier flags addresses
// with: disposable domains, role local parts and free-mail providers, plus
// the typo suggestions that use the well-known providers.
//
// The defaults are embedded in the binary: bulkd's curated lists merged
// with maintained public lists (hack/listmerge; SOURCES.md names each
// package, version, licence and count). An operator replaces or extends any
// of the three with `bulkd admin lists sync`, which stores the list in
// Redis and announces it; every process overlays the stored lists on the
// defaults at start (LoadFromRedis) and again whenever they change (Watch).
package lists

import (
	_ "embed"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
)

// The embedded lists, as strings: parsed entries are substrings of them, so
// the 150,000 default domains cost a map entry each and no copy.
var (
	//go:embed disposable.txt
	disposableTxt string
	//go:embed role.txt
	roleTxt string
	//go:embed free.txt
	freeTxt string
)

// The kinds of list.
const (
	Disposable = "disposable"
	Role       = "role"
	Free       = "free"
)

// Modes of an operator's list.
const (
	// Replace: the operator's list is the list of its kind.
	Replace = "replace"
	// Add: the operator's list is added to the embedded one.
	Add = "add"
)

// Kinds are the list kinds, in display order.
var Kinds = []string{Disposable, Role, Free}

// Info describes one loaded list.
type Info struct {
	Kind   string `json:"kind"`
	Count  int    `json:"count"`
	Source string `json:"source"`         // "embedded" or what the operator loaded it from
	Mode   string `json:"mode,omitempty"` // an operator list's mode (replace or add)
}

type set = map[string]struct{}

// Lists is a set of the three lists. It is safe for concurrent use, and
// Load (or a reload by Watch) may replace a list while others read: a set,
// once built, is never modified, only replaced.
type Lists struct {
	mu      sync.RWMutex
	sets    map[string]set
	info    map[string]Info
	version int64 // the stored lists' version this holds (0: none read)
}

// MaxEntries bounds one list, so a wrong file (a whole mailbox export)
// cannot take the process's memory.
const MaxEntries = 1 << 20

// MaxBytes bounds the text of one list (about 64 octets an entry at
// MaxEntries).
const MaxBytes = 64 << 20

// embedded parses the embedded lists once per process; every Lists shares
// the sets.
var embedded = sync.OnceValue(func() map[string]set {
	out := map[string]set{}
	for k, txt := range map[string]string{Disposable: disposableTxt, Role: roleTxt, Free: freeTxt} {
		s, err := parseString(k, txt)
		if err != nil {
			panic(fmt.Sprintf("lists: embedded %s list: %v", k, err))
		}
		out[k] = s
	}
	return out
})

// Default returns a new Lists holding the embedded lists.
func Default() *Lists {
	l := &Lists{sets: map[string]set{}, info: map[string]Info{}}
	for k, s := range embedded() {
		l.sets[k] = s
		l.info[k] = Info{Kind: k, Count: len(s), Source: "embedded"}
	}
	return l
}

// EmbeddedCount is the entry count of the embedded list of kind.
func EmbeddedCount(kind string) int { return len(embedded()[kind]) }

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
	s, err := Parse(kind, r)
	if err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sets[kind] = s
	l.info[kind] = Info{Kind: kind, Count: len(s), Source: source}
	return len(s), nil
}

// Parse reads one list and validates its entries: domains must be
// lowercase-able host names (ASCII; convert IDNs to A-labels first), role
// entries dot-atom local parts. The first bad line is an error, so an
// operator who loads the wrong file hears about it; so is a list of more
// than MaxEntries entries or MaxBytes octets.
func Parse(kind string, r io.Reader) (map[string]struct{}, error) {
	if !ValidKind(kind) {
		return nil, fmt.Errorf("unknown list kind %q (want disposable, role or free)", kind)
	}
	b, err := io.ReadAll(io.LimitReader(r, MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s list: %w", kind, err)
	}
	if len(b) > MaxBytes {
		return nil, fmt.Errorf("%s list: larger than %d MiB", kind, MaxBytes>>20)
	}
	return parseString(kind, string(b))
}

// parseString parses a list held in s; entries already in canonical form
// are substrings of s (no copy).
func parseString(kind string, s string) (set, error) {
	if !ValidKind(kind) {
		return nil, fmt.Errorf("unknown list kind %q (want disposable, role or free)", kind)
	}
	out := set{}
	for n := 1; s != ""; n++ {
		line := s
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			line, s = s[:i], s[i+1:]
		} else {
			s = ""
		}
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		e := strings.ToLower(strings.TrimSpace(line))
		if e == "" {
			continue
		}
		if len(line) > 1024 {
			return nil, fmt.Errorf("%s list line %d: longer than 1024 octets", kind, n)
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
		out[e] = struct{}{}
		if len(out) > MaxEntries {
			return nil, fmt.Errorf("%s list: more than %d entries", kind, MaxEntries)
		}
	}
	return out, nil
}

// ValidKind reports a known list kind.
func ValidKind(kind string) bool {
	return kind == Disposable || kind == Role || kind == Free
}

func validDomain(s string) bool {
	if len(s) == 0 || len(s) > 253 || !strings.Contains(s, ".") {
		return false
	}
	// Label by label without strings.Split: the embedded lists are 150,000
	// domains, parsed at every start.
	lab := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			if lab == 0 || lab > 63 {
				return false
			}
			lab = 0
			continue
		}
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
		lab++
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

// union returns a new set with a's and b's entries.
func union(a, b set) set {
	out := make(set, len(a)+len(b))
	for e := range a {
		out[e] = struct{}{}
	}
	for e := range b {
		out[e] = struct{}{}
	}
	return out
}

// Version is the version of the stored lists l holds (0: none read).
func (l *Lists) Version() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.version
}

// adopt takes o's lists when their version differs from l's (a lower
// version is Redis restored from an older snapshot, or emptied: what Redis
// holds is what counts); it reports whether it did.
func (l *Lists) adopt(o *Lists) bool {
	o.mu.RLock()
	sets, info, v := o.sets, o.info, o.version
	o.mu.RUnlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if v == l.version {
		return false
	}
	l.sets, l.info, l.version = sets, info, v
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
