package normalize

import (
	"fmt"
	"net/netip"
	"strings"
	"unicode"

	"golang.org/x/net/idna"
	"golang.org/x/net/publicsuffix"
)

// idnaProfile is idna.Lookup (UTS 46 lookup mapping, STD3 ASCII rules, Bidi
// and joiner checks) with CheckHyphens off. CheckHyphens would reject real
// host names such as "r3--sn-abc.example" (hyphens in positions 3-4); browsers
// turn it off for the same reason. Leading/trailing hyphens are still
// rejected by checkLabels.
var idnaProfile = idna.New(
	idna.MapForLookup(),
	idna.BidiRule(),
	idna.Transitional(false),
	idna.CheckHyphens(false),
)

// Domain returns the canonical form of a website domain: lowercase ASCII
// (IDN converted to punycode), no "www." prefix, no trailing dot. Scheme,
// userinfo, port, path, query and fragment are ignored. Other subdomains are
// kept: "blog.acme.com" is its own input. A network URL or network host
// (or any subdomain of one) is rejected with "a network URL in the domain
// field". The error is always an *Invalid.
func (n *Normalizer) Domain(raw string) (string, error) {
	d, err := CanonicalDomain(raw)
	if err != nil {
		return "", err
	}
	if n.isNetworkDomain(d) {
		return "", &Invalid{Reason: ReasonNetworkDomain}
	}
	return d, nil
}

// CanonicalDomain is Domain without the network-host rule: it canonicalizes
// any website host. The redirect checker uses it for hosts a website
// redirects to, which may legitimately be the network itself. The error is
// always an *Invalid.
func CanonicalDomain(raw string) (string, error) {
	host, _, ip, inv := splitInput(raw)
	if inv != nil {
		return "", inv
	}
	if ip {
		if _, err := netip.ParseAddr(host); err == nil {
			return "", &Invalid{Reason: ReasonIP}
		}
		return "", &Invalid{Reason: ReasonDomainChars}
	}
	host = strings.TrimSuffix(host, ".")
	if host == "" {
		return "", &Invalid{Reason: ReasonBlank}
	}
	if strings.IndexFunc(host, unicode.IsSpace) >= 0 {
		return "", &Invalid{Reason: ReasonSpaces}
	}
	if isIP(host) {
		return "", &Invalid{Reason: ReasonIP}
	}
	a, ok := asciiFast(host)
	if !ok {
		var err error
		if a, err = idnaProfile.ToASCII(host); err != nil {
			return "", &Invalid{Reason: ReasonDomainChars}
		}
		// The profile validates some rules (Bidi) before mapping, so a
		// character that maps into another script can yield an A-label the
		// same profile then rejects (U+2135 ALEF SYMBOL → Hebrew alef). Such
		// a name cannot be looked up; requiring the A-label to survive a
		// second pass also keeps the canonical form idempotent.
		if again, err := idnaProfile.ToASCII(a); err != nil || again != a {
			return "", &Invalid{Reason: ReasonDomainChars}
		}
		// IDNA maps look-alikes such as U+3002 (ideographic full stop) to
		// '.', and full-width digits to ASCII, so repeat the checks that
		// depend on those characters.
		a = strings.TrimSuffix(a, ".")
		if isIP(a) {
			return "", &Invalid{Reason: ReasonIP}
		}
	}
	if inv := checkLabels(a); inv != nil {
		return "", inv
	}
	// "www." is a spelling of the site, not another site. Strip it (even
	// repeated) only while what remains is still a registrable domain, so
	// "www.co.uk" stays itself instead of becoming the bare suffix "co.uk".
	checked := false // a is known to be registrable
	for strings.HasPrefix(a, "www.") {
		if _, err := RegistrableDomain(a[4:]); err != nil {
			break
		}
		a, checked = a[4:], true
	}
	if !checked {
		if _, err := RegistrableDomain(a); err != nil {
			return "", &Invalid{Reason: ReasonPublicSuffix}
		}
	}
	return a, nil
}

// isIP reports whether s is an IP address. Every IP address ends in a hex
// digit (IPv4 in a decimal one) or contains ':', so the parse is skipped for
// ordinary names, which end in a letter.
func isIP(s string) bool {
	if s == "" {
		return false
	}
	if c := s[len(s)-1]; !isHex(c) && strings.IndexByte(s, ':') < 0 {
		return false
	}
	_, err := netip.ParseAddr(s)
	return err == nil
}

// asciiFast lowercases host when it is plain LDH ASCII with no punycode
// label, in which case IDNA processing would only lowercase it. This skips
// the IDNA tables for nearly every real input.
func asciiFast(host string) (string, bool) {
	upper := false
	for i := 0; i < len(host); i++ {
		c := host[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '.':
		case 'A' <= c && c <= 'Z':
			upper = true
		default:
			return "", false
		}
	}
	if upper {
		host = strings.ToLower(host)
	}
	// xn-- labels must be decoded and validated by IDNA.
	if strings.HasPrefix(host, "xn--") || strings.Contains(host, ".xn--") {
		return "", false
	}
	return host, true
}

// checkLabels validates an ASCII host name (RFC 1034/1123 syntax).
func checkLabels(a string) *Invalid {
	if len(a) > 253 {
		return &Invalid{Reason: ReasonLongDomain}
	}
	if !strings.Contains(a, ".") {
		return &Invalid{Reason: ReasonNoDot}
	}
	var last string
	for rest := a; ; {
		label := rest
		i := strings.IndexByte(rest, '.')
		if i >= 0 {
			label, rest = rest[:i], rest[i+1:]
		}
		switch {
		case label == "":
			return &Invalid{Reason: ReasonEmptyLabel}
		case len(label) > 63:
			return &Invalid{Reason: ReasonLongLabel}
		case label[0] == '-' || label[len(label)-1] == '-':
			return &Invalid{Reason: ReasonHyphen}
		}
		for j := 0; j < len(label); j++ {
			c := label[j]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
				return &Invalid{Reason: ReasonDomainChars}
			}
		}
		if i < 0 {
			last = label
			break
		}
	}
	// Top-level labels are alphabetic (or xn--); "acme.123" is a
	// mistyped IP address or a number, never a website.
	if !isASCIILetter(last[0]) {
		return &Invalid{Reason: ReasonNumericTLD}
	}
	return nil
}

// RegistrableDomain returns the registrable domain (eTLD+1, from the public
// suffix list including its private section) of a canonical domain:
// "blog.acme.co.uk" → "acme.co.uk", "acme.github.io" → "acme.github.io".
// A domain that is itself a private-section suffix ("github.io",
// "blogspot.com") is returned as is: it was registered by someone under an
// ICANN suffix, so it is a website of its own. Unknown TLDs (.example, .test)
// follow the default "*" rule: "acme.example" → "acme.example".
func RegistrableDomain(canonical string) (string, error) {
	d := strings.TrimSuffix(strings.ToLower(canonical), ".")
	if d == "" {
		return "", fmt.Errorf("registrable domain: empty domain")
	}
	if isIP(d) {
		return "", fmt.Errorf("registrable domain of %q: an IP address has none", d)
	}
	r, err := publicsuffix.EffectiveTLDPlusOne(d)
	if err == nil {
		return r, nil
	}
	if ps, icann := publicsuffix.PublicSuffix(d); ps == d && !icann && strings.Contains(d, ".") &&
		!strings.HasPrefix(d, ".") && !strings.Contains(d, "..") {
		return d, nil
	}
	return "", fmt.Errorf("registrable domain of %q: %w", d, err)
}
