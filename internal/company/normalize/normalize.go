// Package normalize classifies and canonicalizes the rows of a bulk company
// enrichment submission (SPEC 2.1, 2.5).
//
// A row carries a network_url (a company or showcase page on the professional
// network) and/or a domain (a company website). SPEC 2.5 rule 3 says two rows
// are the same input "even when written differently", and rule 4 lists the
// rows that are skipped as invalid. Both rules need one canonical spelling per
// input, which is what this package computes: every accepted row gets an
// Input with a canonical form and a dedupe Key, every rejected row gets an
// *Invalid error whose Reason is the one-line text shown to the client.
//
// Everything here is pure (no I/O, no global state beyond read-only tables)
// so it can be fuzzed and run on 100,000-row submissions inside the request.
package normalize

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// DefaultHosts are the recognised network hosts used when none are configured.
var DefaultHosts = []string{"linkedin.com"}

const (
	// MaxValueLen is the longest value accepted, in characters (SPEC 2.1 caps
	// both fields at 2,048). The API layer rejects longer values with a 422
	// before they reach us; the check here keeps the functions bounded when
	// called from elsewhere, and also bounds every canonical form.
	MaxValueLen = 2048
	// MaxSlugLen is the longest company page name, in characters
	// (SPEC 2.5 rule 4: "a company name over 200 characters").
	MaxSlugLen = 200
)

// Kind says which field an Input came from.
type Kind int

const (
	// KindNetwork is a row identified by its network company/showcase URL.
	KindNetwork Kind = iota + 1
	// KindDomain is a row identified by a website domain.
	KindDomain
)

// String returns "network" or "domain".
func (k Kind) String() string {
	switch k {
	case KindNetwork:
		return "network"
	case KindDomain:
		return "domain"
	}
	return "unknown"
}

// Input is one classified, valid row.
type Input struct {
	Kind Kind
	// Canonical is the canonical network URL
	// (https://www.<host>/company/<slug>) or the canonical domain.
	Canonical string
	// Key is the dedupe key: "n:"+Canonical or "d:"+Canonical. The prefix
	// keeps a network URL and a domain of the same company apart, because
	// SPEC 2.5 rule 3 charges them as two inputs.
	Key string
}

// Invalid is the error for a row that is skipped as invalid (SPEC 2.5 rule 4).
type Invalid struct {
	// Reason is a one-line human explanation, returned to the client as the
	// row's reason field.
	Reason string
}

// Error implements error. Use Reason, not Error(), for the client-facing text.
func (e *Invalid) Error() string { return "invalid input: " + e.Reason }

// Reasons. They are part of the API response, so they are kept stable and
// short; tests pin each of them.
const (
	ReasonBlank          = "blank value"
	ReasonControl        = "contains control characters"
	ReasonNotUTF8        = "not valid UTF-8 text"
	ReasonTooLong        = "value over 2,048 characters"
	ReasonScheme         = "not an http or https URL"
	ReasonPort           = "invalid port in URL"
	ReasonPerson         = "a person profile URL, not a company page"
	ReasonNumeric        = "a numeric company URL; use the company page URL with its name"
	ReasonSlugTooLong    = "company name over 200 characters"
	ReasonURLTooLong     = "company page URL over 2,048 characters once encoded"
	ReasonNotNetworkHost = "not a URL of a recognised network host"
	ReasonNoCompany      = "not a company or showcase page URL"
	ReasonNoSlug         = "no company name in the company page URL"
	ReasonNetworkDomain  = "a network URL in the domain field"
	ReasonIP             = "an IP address, not a domain"
	ReasonNoDot          = "not a domain: no dot"
	ReasonEmptyLabel     = "not a domain: empty label"
	ReasonLongLabel      = "not a domain: label over 63 characters"
	ReasonLongDomain     = "not a domain: over 253 characters"
	ReasonDomainChars    = "not a domain: invalid characters"
	ReasonHyphen         = "not a domain: label starts or ends with a hyphen"
	ReasonNumericTLD     = "not a domain: top-level label must start with a letter"
	ReasonSpaces         = "not a domain: contains spaces"
	ReasonPublicSuffix   = "not a domain: a public suffix such as co.uk, not a registrable domain"
)

// Normalizer holds the configuration the rules depend on. It is immutable
// after New and safe for concurrent use.
type Normalizer struct {
	// Hosts are the recognised network hosts, lowercase, without "www.",
	// e.g. "linkedin.com". Build with New so they are in that form.
	Hosts []string
}

// New returns a Normalizer for the given network hosts; nil or empty means
// DefaultHosts. Hosts are lowercased and stripped of "www." and a trailing dot
// so configuration spelled like a URL host still matches.
func New(hosts []string) *Normalizer {
	if len(hosts) == 0 {
		hosts = DefaultHosts
	}
	out := make([]string, 0, len(hosts))
	seen := make(map[string]bool, len(hosts))
	for _, h := range hosts {
		h = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
		h = strings.TrimPrefix(h, "www.")
		if h == "" || seen[h] {
			continue
		}
		seen[h] = true
		out = append(out, h)
	}
	if len(out) == 0 {
		out = DefaultHosts
	}
	return &Normalizer{Hosts: out}
}

func (n *Normalizer) hosts() []string {
	if n == nil || len(n.Hosts) == 0 {
		return DefaultHosts
	}
	return n.Hosts
}

// Row classifies one submission row per SPEC 2.1: a non-blank network_url is
// used even when domain is also set (and an invalid network_url makes the row
// invalid; we do not fall back to the domain, because the client's preferred
// identifier was wrong and silently using the other one would hide that);
// otherwise the domain is used; both blank is Invalid "blank value".
// An invalid row still says which field it used (Kind), 0 when both were
// blank.
func (n *Normalizer) Row(networkURL, domain string) (Input, error) {
	if !isBlank(networkURL) {
		c, err := n.NetworkURL(networkURL)
		if err != nil {
			return Input{Kind: KindNetwork}, err
		}
		return Input{Kind: KindNetwork, Canonical: c, Key: KeyNetwork + c}, nil
	}
	if !isBlank(domain) {
		c, err := n.Domain(domain)
		if err != nil {
			return Input{Kind: KindDomain}, err
		}
		return Input{Kind: KindDomain, Canonical: c, Key: KeyDomain + c}, nil
	}
	return Input{}, &Invalid{Reason: ReasonBlank}
}

// Key prefixes: an Input's Key is its kind's prefix and its canonical form.
const (
	KeyNetwork = "n:"
	KeyDomain  = "d:"
)

// isTrimmed reports the runes stripped from both ends of a value: Unicode
// white space plus the zero-width space and byte-order mark, which arrive
// invisibly with values pasted from spreadsheets.
func isTrimmed(r rune) bool {
	return unicode.IsSpace(r) || r == '\u200b' || r == '\ufeff'
}

func trim(s string) string {
	// Fast path: most values have nothing to trim and are ASCII.
	if s == "" || (s[0] > ' ' && s[0] < utf8.RuneSelf && s[len(s)-1] > ' ' && s[len(s)-1] < utf8.RuneSelf) {
		return s
	}
	return strings.TrimFunc(s, isTrimmed)
}

func isBlank(s string) bool { return trim(s) == "" }

// prepare trims s and applies the checks shared by both fields: blank,
// encoding, control characters, length.
func prepare(raw string) (string, *Invalid) {
	s := trim(raw)
	if s == "" {
		return "", &Invalid{Reason: ReasonBlank}
	}
	runes := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return "", &Invalid{Reason: ReasonControl}
			}
			i++
			runes++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return "", &Invalid{Reason: ReasonNotUTF8}
		}
		if unicode.IsControl(r) { // C1 controls U+0080..U+009F
			return "", &Invalid{Reason: ReasonControl}
		}
		i += size
		runes++
	}
	if runes > MaxValueLen {
		return "", &Invalid{Reason: ReasonTooLong}
	}
	return s, nil
}

// splitURL takes a trimmed value that may or may not carry a scheme and
// returns its authority (host[:port], userinfo removed) and the path (query
// and fragment removed). Only http and https are accepted as schemes: anything
// else (ftp://, javascript:) is not a web address for a company.
func splitURL(s string) (authority, path string, inv *Invalid) {
	rest := s
	// A scheme is [A-Za-z][A-Za-z0-9+.-]* followed by ':'. Only treat it as
	// one when "://" follows or when it is literally http/https, so that
	// "acme.com:8080" is read as host:port.
	i := 0
	for i < len(rest) && isSchemeChar(rest[i], i == 0) {
		i++
	}
	if i > 0 && i < len(rest) && rest[i] == ':' {
		scheme := rest[:i]
		isWeb := strings.EqualFold(scheme, "http") || strings.EqualFold(scheme, "https")
		switch {
		case strings.HasPrefix(rest[i:], "://"):
			if !isWeb {
				return "", "", &Invalid{Reason: ReasonScheme}
			}
			rest = strings.TrimLeft(rest[i+1:], "/")
		case isWeb:
			// Tolerate "https:/host" and "https:host" typos.
			rest = strings.TrimLeft(rest[i+1:], "/")
		}
	} else if strings.HasPrefix(rest, "//") {
		rest = strings.TrimLeft(rest, "/") // protocol-relative
	}
	end := indexAny(rest, '/', '?', '#')
	if end < 0 {
		authority = rest
	} else {
		authority = rest[:end]
		path = rest[end:]
		if q := indexAny(path, '?', '#', '#'); q >= 0 {
			path = path[:q]
		}
	}
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		authority = authority[at+1:]
	}
	return authority, path, nil
}

// indexAny is strings.IndexAny for three ASCII bytes, without building the
// ASCII set on every call (this runs on every row).
func indexAny(s string, a, b, c byte) int {
	for i := 0; i < len(s); i++ {
		if ch := s[i]; ch == a || ch == b || ch == c {
			return i
		}
	}
	return -1
}

func isSchemeChar(c byte, first bool) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		return true
	case '0' <= c && c <= '9', c == '+', c == '-', c == '.':
		return !first
	}
	return false
}

// splitHostPort removes a port from an authority. ipLiteral is set for a
// bracketed host or a bare host with several colons (an unbracketed IPv6
// address): those are never domains or network hosts.
func splitHostPort(auth string) (host string, ipLiteral bool, inv *Invalid) {
	if strings.HasPrefix(auth, "[") {
		end := strings.IndexByte(auth, ']')
		if end < 0 {
			return auth, true, nil
		}
		if rest := auth[end+1:]; rest != "" && !(rest[0] == ':' && isPort(rest[1:])) {
			return "", true, &Invalid{Reason: ReasonPort}
		}
		return auth[1:end], true, nil
	}
	switch strings.Count(auth, ":") {
	case 0:
		return auth, false, nil
	case 1:
		i := strings.IndexByte(auth, ':')
		if !isPort(auth[i+1:]) {
			return "", false, &Invalid{Reason: ReasonPort}
		}
		return auth[:i], false, nil
	default:
		return auth, true, nil
	}
}

// isPort accepts an empty port (as browsers do for "host:") or 1-5 digits.
func isPort(p string) bool {
	if len(p) > 5 {
		return false
	}
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
	}
	return true
}

// splitInput cleans a raw value and splits it into host and path; ip
// reports a host that looks like an IP literal.
func splitInput(raw string) (host, path string, ip bool, inv *Invalid) {
	s, inv := prepare(raw)
	if inv != nil {
		return "", "", false, inv
	}
	auth, path, inv := splitURL(s)
	if inv != nil {
		return "", "", false, inv
	}
	host, ip, inv = splitHostPort(auth)
	if inv != nil {
		return "", "", false, inv
	}
	return host, path, ip, nil
}
