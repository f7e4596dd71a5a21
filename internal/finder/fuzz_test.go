package finder

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func onlyLocalChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// FuzzNormalizeName: never panics, output only [a-z0-9._-] with no leading,
// trailing or doubled separator, idempotent; the candidates of any name are
// distinct valid local parts within the bounds.
func FuzzNormalizeName(f *testing.F) {
	for _, s := range []string{"José", "Ñúñez", "Anne-Marie", "O'Neil", "van der Berg", "Zoë", "Ødegård", "J.", "McDonald",
		"Straße", "Ольга", "Σωκράτης", "李 Wei", "ＪＯＨＮ", "O´Neil", "Dr. John Michael", "Smith Jr.", "a . - b", "\xff",
		"İlker", "x\u200dy", "Paral·lel", "ǅemal", "Æsir", "--", ""} {
		f.Add(s, "Smith")
	}
	f.Fuzz(func(t *testing.T, first, last string) {
		for _, s := range []string{first, last} {
			n := NormalizeName(s)
			if !onlyLocalChars(n) {
				t.Fatalf("NormalizeName(%q) = %q: characters outside [a-z0-9._-]", s, n)
			}
			if strings.HasPrefix(n, ".") || strings.HasPrefix(n, "-") || strings.HasSuffix(n, ".") || strings.HasSuffix(n, "-") ||
				strings.Contains(n, "..") || strings.Contains(n, "--") || strings.Contains(n, ".-") || strings.Contains(n, "-.") {
				t.Fatalf("NormalizeName(%q) = %q: stray separators", s, n)
			}
			if again := NormalizeName(n); again != n {
				t.Fatalf("NormalizeName not idempotent: %q -> %q -> %q", s, n, again)
			}
			if e := normalizeName(s, styleExpand); !onlyLocalChars(e) || normalizeName(e, styleExpand) != e {
				t.Fatalf("expanded style of %q: %q", s, e)
			}
		}
		for _, learned := range []string{"", "{first}.{last}", "{f}{l}"} {
			cs := Candidates(first, last, learned)
			limit := MaxCandidates
			if learned != "" {
				limit = MaxLearnedCandidates
			}
			if len(cs) > limit {
				t.Fatalf("%d candidates", len(cs))
			}
			seen := map[string]bool{}
			for _, c := range cs {
				if !validLocal(c) || !utf8.ValidString(c) || seen[c] {
					t.Fatalf("Candidates(%q, %q, %q): bad or repeated %q in %v", first, last, learned, c, cs)
				}
				seen[c] = true
			}
			if learned == "" && (len(cs) == 0) != (NormalizeName(first) == "" || NormalizeName(last) == "") {
				t.Fatalf("Candidates(%q, %q) = %v but names normalize to %q, %q", first, last, cs, NormalizeName(first), NormalizeName(last))
			}
		}
	})
}
