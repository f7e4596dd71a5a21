package normalize

import (
	"testing"
	"unicode/utf8"
)

// TestAllRunesIdempotent feeds every Unicode scalar value through both
// normalizers and checks that each accepted canonical form maps to itself.
// It found the U+2135..U+2138 IDNA case (see CanonicalDomain) that 20 s of
// fuzzing did not; it takes a few seconds, so -short skips it.
func TestAllRunesIdempotent(t *testing.T) {
	if testing.Short() {
		t.Skip("exhaustive rune scan skipped in -short mode")
	}
	n := New(nil)
	bad := 0
	report := func(format string, args ...any) {
		bad++
		if bad <= 20 {
			t.Errorf(format, args...)
		}
	}
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if !utf8.ValidRune(r) {
			continue
		}
		s := string(r)
		// Slug: the rune inside a name and followed by a combining mark
		// (exercises lowercasing + NFC composition).
		for _, in := range []string{"linkedin.com/company/a" + s + "b", "linkedin.com/company/" + s + "\u0301"} {
			if c, err := n.NetworkURL(in); err == nil {
				if c2, err := n.NetworkURL(c); err != nil || c2 != c {
					report("network %U: %q -> %q -> %q, %v", r, in, c, c2, err)
				}
			}
		}
		in := "a" + s + "b.example"
		if c, err := n.Domain(in); err == nil {
			if c2, err := n.Domain(c); err != nil || c2 != c {
				report("domain %U: %q -> %q -> %q, %v", r, in, c, c2, err)
			}
		}
	}
}
