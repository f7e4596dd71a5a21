package lists

import "strings"

// wellKnown are the provider domains a typo is corrected to: the domains
// that carry most personal mail, so that a near miss of one of them is far
// more likely a typo than a real domain. Kept short on purpose: every entry
// is a chance to "correct" a legitimate company domain.
var wellKnown = []string{
	"gmail.com", "googlemail.com", "yahoo.com", "ymail.com", "rocketmail.com", "hotmail.com", "outlook.com",
	"live.com", "msn.com", "aol.com", "icloud.com", "me.com", "mac.com", "protonmail.com", "proton.me",
	"gmx.com", "gmx.de", "gmx.net", "web.de", "t-online.de", "mail.ru", "yandex.ru", "yandex.com", "zoho.com",
	"comcast.net", "verizon.net", "att.net", "sbcglobal.net", "bellsouth.net", "btinternet.com",
	"yahoo.co.uk", "hotmail.co.uk", "hotmail.fr", "yahoo.fr", "orange.fr", "wanadoo.fr", "laposte.net",
	"free.fr", "libero.it", "qq.com", "163.com", "naver.com", "mail.com", "fastmail.com", "tutanota.com",
}

// tldTypos maps misspelt top-level labels that are not real TLDs to the
// intended one. Real ccTLDs that look like typos (.co, .cm, .om, .ne) are
// deliberately absent: those domains can exist.
var tldTypos = map[string]string{
	"con": "com", "cmo": "com", "ocm": "com", "cpm": "com", "vom": "com", "xom": "com", "comm": "com",
	"coom": "com", "cim": "com", "clm": "com", "copm": "com", "cok": "com", "c0m": "com", "comn": "com",
	"nte": "net", "nett": "net", "ent": "net", "met": "net",
	"ogr": "org", "orgg": "org", "rog": "org",
}

// Suggest returns the domain the user probably meant, or "" when domain
// does not look like a typo. It answers only for a domain that is not a
// free provider (a listed provider is real by definition); a domain on the
// disposable list is still corrected, because the big disposable lists
// carry the typo domains of the big providers (gmial.com, hotmial.com are
// registered to catch misaddressed mail), and:
//   - a top-level label typo is fixed (acme.con -> acme.com);
//   - a domain within a small Damerau-Levenshtein distance of a well-known
//     provider is corrected to it: distance 1 for providers whose name is 5
//     characters or shorter (gmail, yahoo, ymail), 2 for longer ones
//     (hotmail, outlook, icloud); providers of 3 characters or fewer (aol,
//     gmx, msn, att, qq) are matched through TLD fixes only, because their
//     one-letter neighbours are real companies (aon.com, gmc.com).
func (l *Lists) Suggest(domain string) string {
	d := strings.ToLower(domain)
	if d == "" || l.IsFree(d) {
		return ""
	}
	for _, w := range wellKnown {
		if d == w {
			return ""
		}
	}
	fixed := d
	if i := strings.LastIndexByte(d, '.'); i > 0 {
		if t, ok := tldTypos[d[i+1:]]; ok {
			fixed = d[:i+1] + t
		}
	}
	best, bestDist := "", 3
	for _, w := range wellKnown {
		if w == fixed {
			best, bestDist = w, 0
			break
		}
		name := w[:strings.IndexByte(w, '.')]
		max := 2
		switch {
		case len(name) <= 3:
			continue
		case len(name) <= 5:
			max = 1
		}
		if dist := osa(fixed, w, max); dist <= max && dist < bestDist {
			best, bestDist = w, dist
		}
	}
	switch {
	case best != "" && best != d:
		return best
	case fixed != d:
		return fixed
	}
	return ""
}

// osa is the optimal-string-alignment (restricted Damerau-Levenshtein)
// distance between a and b, on bytes (domains here are ASCII). It gives up
// early and returns max+1 once the distance must exceed max.
func osa(a, b string, max int) int {
	if d := len(a) - len(b); d > max || -d > max {
		return max + 1
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		rowMin := cur[0]
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			v := min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				v = min(v, prev2[j-2]+1)
			}
			cur[j] = v
			rowMin = min(rowMin, v)
		}
		if rowMin > max {
			return max + 1
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
