package verify

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestNormalizeValid(t *testing.T) {
	cases := []struct{ in, want, uni string }{
		{"John.Smith@Example.COM", "john.smith@example.com", "example.com"},
		{"  a@b.co \t", "a@b.co", "b.co"},
		{"\ufeffa@b.co\u200b", "a@b.co", "b.co"},
		{"user+tag@sub.example.org", "user+tag@sub.example.org", "sub.example.org"},
		{"!#$%&'*+-/=?^_`{|}~@example.com", "!#$%&'*+-/=?^_`{|}~@example.com", "example.com"},
		{`"John Doe"@Example.com`, `"John Doe"@example.com`, "example.com"},
		{`"a@b"@example.com`, `"a@b"@example.com`, "example.com"},
		{`"a\"b\\c"@example.com`, `"a\"b\\c"@example.com`, "example.com"},
		{"x@bücher.example", "x@xn--bcher-kva.example", "bücher.example"},
		{"x@BÜCHER.example", "x@xn--bcher-kva.example", "bücher.example"},
		{"x@xn--bcher-kva.example", "x@xn--bcher-kva.example", "bücher.example"},
		{"x@acme\u3002com", "x@acme.com", "acme.com"},
		{"x@[192.0.2.1]", "x@[192.0.2.1]", "[192.0.2.1]"},
		{"x@[ipv6:2001:DB8:0:0::1]", "x@[IPv6:2001:db8::1]", "[IPv6:2001:db8::1]"},
		{"a@b-c.d1.xn--p1ai", "a@b-c.d1.xn--p1ai", "b-c.d1.рф"},
		{strings.Repeat("a", 64) + "@example.com", strings.Repeat("a", 64) + "@example.com", "example.com"},
	}
	for _, c := range cases {
		a, err := Normalize(c.in)
		if err != nil {
			t.Errorf("Normalize(%q): %v", c.in, err)
			continue
		}
		if a.String() != c.want || a.Unicode != c.uni {
			t.Errorf("Normalize(%q) = %q (%q), want %q (%q)", c.in, a.String(), a.Unicode, c.want, c.uni)
		}
	}
}

func TestNormalizeInvalid(t *testing.T) {
	long63 := strings.Repeat("a", 63)
	cases := []string{
		"", "   ", "plain", "@example.com", "a@", "a@@b.com", "a@b@c.com",
		".a@b.com", "a.@b.com", "a..b@c.com", "a b@c.com", "a\x00b@c.com", "a\nb@c.com",
		"a(b)@c.com", "a,b@c.com", "a[b]@c.com", "a\\b@c.com", `a"b"@c.com`,
		`""@c.com`, `"a@c.com`, `"a"b@c.com`, "\"a\x01\"@c.com", "\"a\\\x01\"@c.com",
		"a@localhost", "a@b..com", "a@.b.com", "a@b.com.", "a@-b.com", "a@b-.com",
		"a@b_c.com", "a@1.2.3.4", "a@b.123", "a@b com.com", "a@[1.2.3]", "a@[IPv6:1.2.3.4]",
		"a@[1.2.3.4", "a@[::1]", "a@[IPv6:fe80::1%eth0]", "a@[tag:whatever]", "a@[IPv6:::ffff:1.2.3.4]",
		"jöhn@example.com", "a@" + long63 + "a.com", "\xff@b.com",
		strings.Repeat("a", 65) + "@example.com",
		"a@" + strings.Repeat(long63+".", 4) + "com",
		strings.Repeat("a", 64) + "@" + strings.Repeat("b", 60) + "." + strings.Repeat("c", 60) + "." + strings.Repeat("d", 60) + "." + strings.Repeat("e", 60) + ".com",
		strings.Repeat(" ", 2000) + "a@b.com",
	}
	for _, in := range cases {
		if a, err := Normalize(in); err == nil {
			t.Errorf("Normalize(%q) = %q, want an error", in, a.String())
		} else if !IsSyntaxError(err) {
			t.Errorf("Normalize(%q): error %T is not a SyntaxError", in, err)
		}
	}
}

var normalizeSeeds = []string{
	"John.Smith@Example.COM", `"John Doe"@Example.com`, "x@bücher.example", "x@[IPv6:2001:db8::1]",
	"x@[192.0.2.1]", "a..b@c.com", "a@b.com.", "  A@B.CO  ", "x@acme\u3002com", `"a\"b"@c.com`,
	"a@xn--bcher-kva.example", "a@ß.de", "a@ＥＸＡＭＰＬＥ.com", "a@xn--.com", "K@k.k\u212a",
}

func FuzzNormalize(f *testing.F) {
	for _, s := range normalizeSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := Normalize(s)
		if err != nil {
			if !IsSyntaxError(err) {
				t.Fatalf("error %T is not a SyntaxError", err)
			}
			return
		}
		out := a.String()
		if len(a.Local) == 0 || len(a.Local) > MaxLocalLen || len(a.Domain) > MaxDomainLen+2 || len(out) > MaxPathLen {
			t.Fatalf("length limits broken: %q", out)
		}
		if !utf8.ValidString(out) {
			t.Fatalf("invalid UTF-8 output %q", out)
		}
		for i := 0; i < len(out); i++ {
			if out[i] < ' ' || out[i] >= 0x7f {
				t.Fatalf("non-printable-ASCII output %q", out)
			}
		}
		if strings.ToLower(a.Domain) != a.Domain && !a.IsIPLiteral() {
			t.Fatalf("domain not lowercase: %q", a.Domain)
		}
		b, err := Normalize(out)
		if err != nil {
			t.Fatalf("Normalize(%q) ok but Normalize(%q): %v", s, out, err)
		}
		if b != a {
			t.Fatalf("not idempotent: %q -> %+v -> %+v", s, a, b)
		}
	})
}
