package finder

import (
	"sort"
	"strings"
)

// Pattern placeholders: {first} and {last} are a form of the first and last
// name, {f} and {l} their first letter.

// prior is one address pattern and the share of companies believed to use
// it (see doc.go).
type prior struct {
	pattern string
	weight  float64
}

// priors are the patterns in the order they are tried on a domain whose
// pattern is not known.
var priors = []prior{
	{"{first}.{last}", 0.40},
	{"{f}{last}", 0.20},
	{"{first}", 0.10},
	{"{first}{last}", 0.07},
	{"{f}.{last}", 0.05},
	{"{first}{l}", 0.03},
	{"{first}_{last}", 0.025},
	{"{last}.{first}", 0.02},
	{"{last}{f}", 0.02},
	{"{first}-{last}", 0.015},
	{"{last}", 0.01},
	{"{last}{first}", 0.008},
	{"{f}_{last}", 0.006},
	{"{first}.{l}", 0.005},
	{"{last}_{first}", 0.004},
	{"{f}-{last}", 0.003},
	{"{f}{l}", 0.002},
}

// priorRank maps a pattern to its index in priors.
var priorRank = func() map[string]int {
	m := make(map[string]int, len(priors))
	for i, p := range priors {
		m[p.pattern] = i
	}
	return m
}()

// Patterns returns the known patterns in prior order. Only these are
// learned and stored.
func Patterns() []string {
	out := make([]string, len(priors))
	for i, p := range priors {
		out[i] = p.pattern
	}
	return out
}

// KnownPattern reports whether p is one of Patterns.
func KnownPattern(p string) bool {
	_, ok := priorRank[p]
	return ok
}

// Bounds on candidates per person.
const (
	// MaxCandidates is the most local parts tried for one person on a
	// domain whose pattern is not known.
	MaxCandidates = 12
	// MaxLearnedCandidates is the most local parts tried for one person
	// on a domain with a learned pattern: the pattern over the forms of
	// the person's name (see doc.go).
	MaxLearnedCandidates = 3
	// maxLocal is the longest local part (RFC 5321).
	maxLocal = 64
)

// pair is one way of writing a person's first and last name together.
type pair struct {
	first, last string
	w           float64
	nick        bool // written with the formal name of a nickname
}

// name is a person's name as the candidates need it.
type name struct {
	pairs []pair // by weight, heaviest first; empty: invalid name
}

// expandWeight is the weight of the digraph transliteration (ä -> ae)
// relative to the stripped one (ä -> a).
const expandWeight = 0.45

func parseName(first, last string) name {
	var n name
	seen := map[[2]string]bool{}
	var strip [2]string
	for _, st := range []style{styleStrip, styleExpand} {
		fn, ln := normalizeName(first, st), normalizeName(last, st)
		if st == styleExpand && fn == strip[0] && ln == strip[1] {
			break
		}
		strip = [2]string{fn, ln}
		sw := 1.0
		if st == styleExpand {
			sw = expandWeight
		}
		ff, lf := firstForms(fn), lastForms(ln)
		if len(ff) == 0 || len(lf) == 0 {
			return name{}
		}
		// When both names are compound the same way (both hyphenated,
		// both of several words), a person writes both the same way (both
		// joined, both hyphenated, ...): a pair of one kind weighs as its
		// heavier form, a mixed pair less than the product.
		both := len(ff) > 1 && len(lf) > 1 && sameKinds(ff, lf)
		for _, f := range ff {
			for _, l := range lf {
				k := [2]string{f.s, l.s}
				if seen[k] {
					continue
				}
				seen[k] = true
				w := f.w * l.w
				if both {
					if f.kind == l.kind {
						w = max(f.w, l.w)
					} else {
						w *= formWeights[1]
					}
				}
				n.pairs = append(n.pairs, pair{f.s, l.s, sw * w, false})
			}
		}
	}
	// A nickname ("Bob") adds its formal names ("robert") with the last
	// name's forms, lighter than the name as given (nicknames.go).
	fn := normalizeName(first, styleStrip)
	for k, formal := range nicknames[fn] {
		for _, l := range lastForms(normalizeName(last, styleStrip)) {
			key := [2]string{formal, l.s}
			if seen[key] {
				continue
			}
			seen[key] = true
			n.pairs = append(n.pairs, pair{formal, l.s, nicknameWeight * l.w * formWeights[min(k, len(formWeights)-1)], true})
		}
	}
	sort.SliceStable(n.pairs, func(a, b int) bool { return n.pairs[a].w > n.pairs[b].w })
	return n
}

func sameKinds(a, b []form) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].kind != b[i].kind {
			return false
		}
	}
	return true
}

// variants is how many ways the name may be written (compound names,
// particles, umlauts; a nickname's formal names are not counted, so that
// "Ben" is as good a scout as "Cal").
func (n name) variants() int {
	k := 0
	for _, p := range n.pairs {
		if !p.nick {
			k++
		}
	}
	return k
}

// initialOnly reports whether the name's usual form has a one-letter first
// or last name ("J. Smith"): its verified address is evidence for several
// patterns at once ({first} and {f} write the same), so it teaches none.
func (n name) initialOnly() bool {
	return len(n.pairs) > 0 && (len(n.pairs[0].first) == 1 || len(n.pairs[0].last) == 1)
}

// render writes pattern for one pair.
func render(pattern string, p pair) string {
	var b strings.Builder
	for i := 0; i < len(pattern); {
		switch {
		case strings.HasPrefix(pattern[i:], "{first}"):
			b.WriteString(p.first)
			i += len("{first}")
		case strings.HasPrefix(pattern[i:], "{last}"):
			b.WriteString(p.last)
			i += len("{last}")
		case strings.HasPrefix(pattern[i:], "{f}"):
			b.WriteByte(p.first[0])
			i += len("{f}")
		case strings.HasPrefix(pattern[i:], "{l}"):
			b.WriteByte(p.last[0])
			i += len("{l}")
		default:
			b.WriteByte(pattern[i])
			i++
		}
	}
	return b.String()
}

// validLocal reports whether s is a local part we send: 1..64 characters
// of [a-z0-9._-], no leading, trailing or doubled dot.
func validLocal(s string) bool {
	if s == "" || len(s) > maxLocal || s[0] == '.' || s[len(s)-1] == '.' || strings.Contains(s, "..") {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// cand is one candidate local part and the pattern that wrote it.
type cand struct {
	local   string
	pattern string
}

// priorCands are the candidates of n on a domain without a known pattern:
// every (pattern, pair) scored prior weight x pair weight, best first (ties
// in prior order, then pair order), duplicates and invalid local parts
// removed, at most MaxCandidates. The patterns of shape (the domain's
// favoured shape, see favouredShape; "" none) weigh shapeBoost times their
// prior.
func priorCands(n name, shape string) []cand {
	type scored struct {
		cand
		score float64
		order int
	}
	var all []scored
	for ti, t := range priors {
		w := t.weight
		if shape != "" && patternShapes[t.pattern] == shape {
			w *= shapeBoost
		}
		for pi, p := range n.pairs {
			all = append(all, scored{cand{render(t.pattern, p), t.pattern}, w * p.w, ti*len(n.pairs) + pi})
		}
	}
	sort.SliceStable(all, func(a, b int) bool {
		if all[a].score != all[b].score {
			return all[a].score > all[b].score
		}
		return all[a].order < all[b].order
	})
	seen := map[string]bool{}
	var out []cand
	for _, s := range all {
		if len(out) == MaxCandidates {
			break
		}
		if seen[s.local] || !validLocal(s.local) {
			continue
		}
		seen[s.local] = true
		out = append(out, s.cand)
	}
	return out
}

// learnedCands are the candidates of n on a domain whose pattern is
// learned: the pattern over n's pairs, heaviest first, at most
// MaxLearnedCandidates.
func learnedCands(n name, pattern string) []cand {
	seen := map[string]bool{}
	var out []cand
	for _, p := range n.pairs {
		if len(out) == MaxLearnedCandidates {
			break
		}
		l := render(pattern, p)
		if seen[l] || !validLocal(l) {
			continue
		}
		seen[l] = true
		out = append(out, cand{l, pattern})
	}
	return out
}

// patternsOf returns every known pattern that writes local for n (over all
// its pairs), in prior order. A verified address teaches its domain's
// pattern only when exactly one pattern writes it.
func patternsOf(n name, local string) []string {
	var out []string
	for _, t := range priors {
		for _, p := range n.pairs {
			if render(t.pattern, p) == local {
				out = append(out, t.pattern)
				break
			}
		}
	}
	return out
}

// Candidates returns the local parts tried for a person, in order: with a
// known learned pattern, that pattern over the forms of the name (at most
// MaxLearnedCandidates); otherwise the patterns by prior over the forms of
// the name (at most MaxCandidates). Nil when the name is invalid (first or
// last name empty after normalization).
func Candidates(first, last string, learned string) []string {
	n := parseName(first, last)
	if len(n.pairs) == 0 {
		return nil
	}
	var cs []cand
	if KnownPattern(learned) {
		cs = learnedCands(n, learned)
	} else {
		cs = priorCands(n, "")
	}
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.local
	}
	return out
}
