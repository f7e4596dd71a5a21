// Package companytest holds test helpers for code that uses package
// company. It does not import company, so company's own tests can use it.
package companytest

import (
	"errors"
	"strings"
)

// Normalizer is a deliberately simple stand-in for the real normalizer in
// internal/company/normalize, which is being written separately. It trims,
// lowercases and strips the obvious decorations (scheme, "www.", path),
// which is enough for tests of storage and import; it knows none of the
// real rules (country subdomains, showcase pages, numeric ids, ...).
type Normalizer struct{}

// NetworkURL canonicalizes to https://www.<host>/company/<slug>.
func (Normalizer) NetworkURL(raw string) (string, error) {
	s := strings.ToLower(strings.TrimSpace(raw))
	s = strings.TrimPrefix(strings.TrimPrefix(s, "https://"), "http://")
	s = strings.TrimPrefix(s, "www.")
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		s = s[:i]
	}
	s = strings.TrimRight(s, "/")
	host, path, ok := strings.Cut(s, "/")
	slug, isCompany := strings.CutPrefix(path, "company/")
	if !ok || host == "" || !isCompany || slug == "" || strings.ContainsAny(slug, "/ ") {
		return "", errors.New("not a company page URL")
	}
	return "https://www." + host + "/company/" + slug, nil
}

// Domain reduces a domain or website URL to its bare lowercase host
// without "www.".
func (Normalizer) Domain(raw string) (string, error) {
	s := strings.ToLower(strings.TrimSpace(raw))
	s = strings.TrimPrefix(strings.TrimPrefix(s, "https://"), "http://")
	if i := strings.IndexAny(s, "/?#:"); i >= 0 {
		s = s[:i]
	}
	s = strings.TrimPrefix(s, "www.")
	if !strings.Contains(s, ".") || strings.ContainsAny(s, " \t@") || strings.HasPrefix(s, ".") || strings.HasSuffix(s, ".") {
		return "", errors.New("not a domain")
	}
	return s, nil
}
