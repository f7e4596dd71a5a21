package normalize

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// The seeds below are also stored under testdata/fuzz/<FuzzName>/ so that a
// plain `go test` replays them (and any crasher the fuzzer has found) even
// when the f.Add list is edited.

var networkSeeds = []string{
	"https://www.linkedin.com/company/acme",
	"uk.linkedin.com/company/Acme/about/?trk=x#y",
	"linkedin.com/company/Soci%C3%A9t%C3%A9",
	"linkedin.com/showcase/acme-cloud",
	"linkedin.com/in/john",
	"linkedin.com/company/12345",
	"linkedin.com/company/100%",
	"https://user@m.linkedin.com:443//company//ACME",
	"linkedin.com/company/socie\u0301te\u0301",
	"linkedin.com/company/%F0%9F%98%80",
	"",
	"javascript://x",
}

var domainSeeds = []string{
	"acme.com",
	"https://www.Acme.co.uk:8080/x?y#z",
	"bücher.example",
	"xn--bcher-kva.example",
	"www.www.acme.com.",
	"[2001:db8::1]:80",
	"co.uk",
	"github.io",
	"acme。com",
	"linkedin.com/company/acme",
	"a..b",
	"www.co.uk",
}

func checkInvalid(t *testing.T, err error) {
	t.Helper()
	var inv *Invalid
	if !errors.As(err, &inv) {
		t.Fatalf("error is %T, want *Invalid: %v", err, err)
	}
	if inv.Reason == "" || strings.ContainsAny(inv.Reason, "\r\n") {
		t.Fatalf("bad reason %q", inv.Reason)
	}
}

func checkCanonical(t *testing.T, c string) {
	t.Helper()
	if c == "" || len(c) > MaxValueLen {
		t.Fatalf("canonical length %d out of range: %q", len(c), c)
	}
	if !utf8.ValidString(c) {
		t.Fatalf("canonical is not valid UTF-8: %q", c)
	}
	for i := 0; i < len(c); i++ {
		if c[i] >= utf8.RuneSelf || c[i] <= ' ' || c[i] == 0x7f {
			t.Fatalf("canonical has non-printable-ASCII byte %#x: %q", c[i], c)
		}
	}
}

func FuzzNetworkURL(f *testing.F) {
	for _, s := range networkSeeds {
		f.Add(s)
	}
	n := New(nil)
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := n.NetworkURL(raw)
		if err != nil {
			checkInvalid(t, err)
			return
		}
		checkCanonical(t, c)
		if !strings.HasPrefix(c, "https://www.linkedin.com/company/") && !strings.HasPrefix(c, "https://www.linkedin.com/showcase/") {
			t.Fatalf("unexpected canonical prefix: %q", c)
		}
		again, err := n.NetworkURL(c)
		if err != nil || again != c {
			t.Fatalf("not idempotent: %q -> %q -> %q, %v", raw, c, again, err)
		}
	})
}

func FuzzDomain(f *testing.F) {
	for _, s := range domainSeeds {
		f.Add(s)
	}
	n := New(nil)
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := n.Domain(raw)
		if err != nil {
			checkInvalid(t, err)
			return
		}
		checkCanonical(t, c)
		if len(c) > 253 {
			t.Fatalf("canonical %q over 253 bytes", c)
		}
		if strings.HasPrefix(c, "www.") {
			if _, err := RegistrableDomain(c[4:]); err == nil {
				t.Fatalf("canonical %q keeps a strippable www.", c)
			}
		}
		if _, err := RegistrableDomain(c); err != nil {
			t.Fatalf("canonical %q has no registrable domain: %v", c, err)
		}
		again, err := n.Domain(c)
		if err != nil || again != c {
			t.Fatalf("not idempotent: %q -> %q -> %q, %v", raw, c, again, err)
		}
	})
}

func FuzzRow(f *testing.F) {
	for i := range networkSeeds {
		f.Add(networkSeeds[i], domainSeeds[i%len(domainSeeds)])
		f.Add("", domainSeeds[i%len(domainSeeds)])
	}
	n := New(nil)
	f.Fuzz(func(t *testing.T, networkURL, domain string) {
		in, err := n.Row(networkURL, domain)
		if err != nil {
			checkInvalid(t, err)
			return
		}
		checkCanonical(t, in.Canonical)
		var again Input
		switch in.Kind {
		case KindNetwork:
			if in.Key != "n:"+in.Canonical {
				t.Fatalf("bad key %q", in.Key)
			}
			again, err = n.Row(in.Canonical, domain)
		case KindDomain:
			if in.Key != "d:"+in.Canonical || !isBlank(networkURL) {
				t.Fatalf("bad domain row %+v for network_url %q", in, networkURL)
			}
			again, err = n.Row("", in.Canonical)
		default:
			t.Fatalf("bad kind %v", in.Kind)
		}
		if err != nil || again != in {
			t.Fatalf("not idempotent: %+v -> %+v, %v", in, again, err)
		}
	})
}
