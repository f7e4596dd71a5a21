package normalize

import (
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// NetworkURL returns the canonical form of a company or showcase page URL:
// https://www.<host>/company/<slug> or https://www.<host>/showcase/<slug>.
//
// Scheme (http, https or none), "www.", "m." and two-letter country
// subdomains, userinfo, port, anything after the slug, query, fragment,
// percent-encoding and letter case do not change the result. The slug is
// percent-decoded, trimmed, lowercased, NFC-normalized and re-escaped with
// url.PathEscape, so "Soci%C3%A9t%C3%A9", "société" and "SOCIÉTÉ" are one
// input. The error is always an *Invalid.
func (n *Normalizer) NetworkURL(raw string) (string, error) {
	host, path, ip, inv := splitInput(raw)
	if inv != nil {
		return "", inv
	}
	if ip {
		return "", &Invalid{Reason: ReasonNotNetworkHost}
	}
	base, ok := n.networkHost(strings.TrimSuffix(host, "."))
	if !ok {
		return "", &Invalid{Reason: ReasonNotNetworkHost}
	}
	return networkPath(base, path)
}

// networkHost reports whether host is a recognised network host or one of its
// accepted subdomains, returning the configured base host. Accepted
// subdomains are exactly one label: "www", "m" (mobile) or two ASCII letters
// (country subdomains: uk., fr., de., ca., …). Other subdomains (e.g. a blog
// or developer portal) do not serve company pages, so they are not accepted.
func (n *Normalizer) networkHost(host string) (string, bool) {
	for _, h := range n.hosts() {
		if len(host) < len(h) || !strings.EqualFold(host[len(host)-len(h):], h) {
			continue
		}
		sub := host[:len(host)-len(h)]
		if sub == "" {
			return h, true
		}
		if !strings.HasSuffix(sub, ".") {
			continue // e.g. "notlinkedin.com"
		}
		sub = sub[:len(sub)-1]
		if strings.EqualFold(sub, "www") || strings.EqualFold(sub, "m") || isTwoLetters(sub) {
			return h, true
		}
	}
	return "", false
}

// isNetworkDomain reports whether a canonical domain is a network host or any
// subdomain of one; such values are rejected in the domain field.
func (n *Normalizer) isNetworkDomain(d string) bool {
	for _, h := range n.hosts() {
		if strings.EqualFold(d, h) || (len(d) > len(h) && d[len(d)-len(h)-1] == '.' && strings.EqualFold(d[len(d)-len(h):], h)) {
			return true
		}
	}
	return false
}

func isTwoLetters(s string) bool {
	return len(s) == 2 && isASCIILetter(s[0]) && isASCIILetter(s[1])
}

func isASCIILetter(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }

// networkPath reads /company/<slug>/… or /showcase/<slug>/… from a URL path.
func networkPath(base, path string) (string, error) {
	first, rest := nextSegment(path)
	var section string
	switch strings.ToLower(unescape(first)) {
	case "company":
		section = "company"
	case "showcase":
		section = "showcase"
	case "in", "pub":
		return "", &Invalid{Reason: ReasonPerson}
	default:
		return "", &Invalid{Reason: ReasonNoCompany}
	}
	seg, _ := nextSegment(rest)
	if seg == "" {
		return "", &Invalid{Reason: ReasonNoSlug}
	}
	slug := unescape(seg)
	// Decoding can produce bytes the raw check never saw (%FF, %0A).
	if !utf8.ValidString(slug) {
		return "", &Invalid{Reason: ReasonNotUTF8}
	}
	if strings.IndexFunc(slug, unicode.IsControl) >= 0 {
		return "", &Invalid{Reason: ReasonControl}
	}
	slug = trim(slug)
	if slug == "" {
		return "", &Invalid{Reason: ReasonNoSlug}
	}
	if isDigits(slug) {
		// /company/12345 is the internal numeric id form. We key inputs by
		// page name, so an id cannot be deduplicated against the name form
		// of the same page; SPEC 2.5 rule 4 makes it invalid.
		return "", &Invalid{Reason: ReasonNumeric}
	}
	// Lowercase, then NFC: the same name typed on different systems arrives
	// precomposed or decomposed, and both must be one input.
	slug = norm.NFC.String(strings.ToLower(slug))
	if slug == "." || slug == ".." {
		return "", &Invalid{Reason: ReasonNoSlug}
	}
	if utf8.RuneCountInString(slug) > MaxSlugLen {
		return "", &Invalid{Reason: ReasonSlugTooLong}
	}
	canonical := "https://www." + base + "/" + section + "/" + url.PathEscape(slug)
	if len(canonical) > MaxValueLen {
		// Only reachable with ~170+ four-byte characters (each escapes to
		// 12 bytes); keeps the canonical form within the field limit.
		return "", &Invalid{Reason: ReasonURLTooLong}
	}
	return canonical, nil
}

// nextSegment returns the first non-empty '/'-separated segment of p and what
// follows it. Empty segments ("//") are skipped: they are a spelling slip,
// not a different page.
func nextSegment(p string) (seg, rest string) {
	p = strings.TrimLeft(p, "/")
	if i := strings.IndexByte(p, '/'); i >= 0 {
		return p[:i], p[i:]
	}
	return p, ""
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// unescape decodes valid %XX escapes and leaves any other '%' as a literal
// character, as browsers do. url.PathUnescape would reject "100%" outright;
// being lenient makes "100%" and "100%25" the same input, which they are.
func unescape(s string) string {
	if strings.IndexByte(s, '%') < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c|0x20 && c|0x20 <= 'f'
}

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c | 0x20 - 'a' + 10
}
