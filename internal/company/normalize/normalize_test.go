package normalize

import (
	"errors"
	"strings"
	"testing"
)

const acmeURL = "https://www.linkedin.com/company/acme"

func wantInvalid(t *testing.T, err error, reason string) {
	t.Helper()
	var inv *Invalid
	if !errors.As(err, &inv) {
		t.Fatalf("err = %v (%T), want *Invalid %q", err, err, reason)
	}
	if inv.Reason != reason {
		t.Fatalf("reason = %q, want %q", inv.Reason, reason)
	}
}

func TestNetworkURLValid(t *testing.T) {
	n := New(nil)
	tests := []struct {
		name, in, want string
	}{
		{"canonical", acmeURL, acmeURL},
		{"no scheme", "linkedin.com/company/acme", acmeURL},
		{"no scheme www", "www.linkedin.com/company/acme", acmeURL},
		{"http", "http://linkedin.com/company/acme", acmeURL},
		{"https no www", "https://linkedin.com/company/acme", acmeURL},
		{"protocol relative", "//www.linkedin.com/company/acme", acmeURL},
		{"scheme typo one slash", "https:/www.linkedin.com/company/acme", acmeURL},
		{"upper scheme and host", "HTTPS://WWW.LINKEDIN.COM/company/acme", acmeURL},
		{"mobile", "https://m.linkedin.com/company/acme", acmeURL},
		{"country uk", "https://uk.linkedin.com/company/acme", acmeURL},
		{"country fr", "fr.linkedin.com/company/acme", acmeURL},
		{"country de upper", "DE.linkedin.com/company/acme", acmeURL},
		{"trailing slash", "linkedin.com/company/acme/", acmeURL},
		{"about", "linkedin.com/company/acme/about/", acmeURL},
		{"jobs", "linkedin.com/company/acme/jobs/", acmeURL},
		{"people", "linkedin.com/company/acme/people/?facet=x", acmeURL},
		{"deep path", "linkedin.com/company/acme/a/b/c/d", acmeURL},
		{"query", "linkedin.com/company/acme?trk=public_profile", acmeURL},
		{"fragment", "linkedin.com/company/acme#top", acmeURL},
		{"query after slash", "linkedin.com/company/acme/?originalSubdomain=uk", acmeURL},
		{"uppercase slug", "linkedin.com/company/ACME", acmeURL},
		{"uppercase section", "linkedin.com/COMPANY/Acme", acmeURL},
		{"escaped letters", "linkedin.com/company/%61cme", acmeURL},
		{"escaped section", "linkedin.com/%63ompany/acme", acmeURL},
		{"port", "https://www.linkedin.com:443/company/acme", acmeURL},
		{"userinfo", "https://user@www.linkedin.com/company/acme", acmeURL},
		{"trailing dot host", "https://www.linkedin.com./company/acme", acmeURL},
		{"double slash", "linkedin.com//company//acme", acmeURL},
		{"whitespace", " \t linkedin.com/company/acme \n", acmeURL},
		{"bom and zwsp", "\ufefflinkedin.com/company/acme\u200b", acmeURL},
		{"showcase", "linkedin.com/showcase/Acme-Cloud/", "https://www.linkedin.com/showcase/acme-cloud"},
		{"showcase uk", "https://uk.linkedin.com/showcase/acme-cloud?x", "https://www.linkedin.com/showcase/acme-cloud"},
		{"unicode escaped", "linkedin.com/company/Soci%C3%A9t%C3%A9", "https://www.linkedin.com/company/soci%C3%A9t%C3%A9"},
		{"unicode raw", "linkedin.com/company/société", "https://www.linkedin.com/company/soci%C3%A9t%C3%A9"},
		{"unicode upper", "linkedin.com/company/SOCIÉTÉ", "https://www.linkedin.com/company/soci%C3%A9t%C3%A9"},
		{"unicode lower-case escapes", "linkedin.com/company/soci%c3%a9t%c3%a9", "https://www.linkedin.com/company/soci%C3%A9t%C3%A9"},
		{"unicode decomposed", "linkedin.com/company/socie\u0301te\u0301", "https://www.linkedin.com/company/soci%C3%A9t%C3%A9"},
		{"space in slug", "linkedin.com/company/acme corp", "https://www.linkedin.com/company/acme%20corp"},
		{"escaped space", "linkedin.com/company/acme%20corp", "https://www.linkedin.com/company/acme%20corp"},
		{"lone percent", "linkedin.com/company/100%", "https://www.linkedin.com/company/100%25"},
		{"escaped percent", "linkedin.com/company/100%25", "https://www.linkedin.com/company/100%25"},
		{"digits and letters", "linkedin.com/company/3m", "https://www.linkedin.com/company/3m"},
		{"slug exactly 200", "linkedin.com/company/" + strings.Repeat("a", 200), "https://www.linkedin.com/company/" + strings.Repeat("a", 200)},
		{"slug 200 characters multibyte", "linkedin.com/company/" + strings.Repeat("é", 200), "https://www.linkedin.com/company/" + strings.Repeat("%C3%A9", 200)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := n.NetworkURL(tt.in)
			if err != nil {
				t.Fatalf("NetworkURL(%q) error: %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("NetworkURL(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestNetworkURLInvalid(t *testing.T) {
	n := New(nil)
	tests := []struct {
		name, in, reason string
	}{
		{"blank", "", ReasonBlank},
		{"spaces only", "  \t\n ", ReasonBlank},
		{"person in", "https://www.linkedin.com/in/john-doe", ReasonPerson},
		{"person in no scheme", "linkedin.com/in/john-doe/", ReasonPerson},
		{"person pub", "linkedin.com/pub/john-doe/1/2/3", ReasonPerson},
		{"person uppercase", "linkedin.com/IN/John", ReasonPerson},
		{"numeric", "https://www.linkedin.com/company/12345", ReasonNumeric},
		{"numeric with path", "linkedin.com/company/12345/about/", ReasonNumeric},
		{"numeric showcase", "linkedin.com/showcase/987", ReasonNumeric},
		{"slug 201", "linkedin.com/company/" + strings.Repeat("a", 201), ReasonSlugTooLong},
		{"slug 201 multibyte", "linkedin.com/company/" + strings.Repeat("é", 201), ReasonSlugTooLong},
		{"slug 201 escaped", "linkedin.com/company/" + strings.Repeat("%41", 201), ReasonSlugTooLong},
		{"encoded too long", "linkedin.com/company/" + strings.Repeat("😀", 180), ReasonURLTooLong},
		{"other host", "https://www.example.com/company/acme", ReasonNotNetworkHost},
		{"lookalike host", "https://notlinkedin.com/company/acme", ReasonNotNetworkHost},
		{"host as suffix of path", "https://evil.example/linkedin.com/company/acme", ReasonNotNetworkHost},
		{"userinfo trick", "https://linkedin.com@evil.example/company/acme", ReasonNotNetworkHost},
		{"three letter subdomain", "https://abc.linkedin.com/company/acme", ReasonNotNetworkHost},
		{"two subdomains", "https://www.uk.linkedin.com/company/acme", ReasonNotNetworkHost},
		{"ip host", "http://127.0.0.1/company/acme", ReasonNotNetworkHost},
		{"ipv6 host", "http://[::1]/company/acme", ReasonNotNetworkHost},
		{"bare slug", "acme", ReasonNotNetworkHost},
		{"company no slug", "linkedin.com/company/", ReasonNoSlug},
		{"company no slug no slash", "https://www.linkedin.com/company", ReasonNoSlug},
		{"company blank slug", "linkedin.com/company/%20/", ReasonNoSlug},
		{"company dot slug", "linkedin.com/company/./", ReasonNoSlug},
		{"showcase no slug", "linkedin.com/showcase/?x=1", ReasonNoSlug},
		{"school", "linkedin.com/school/x", ReasonNoCompany},
		{"jobs", "linkedin.com/jobs/view/1", ReasonNoCompany},
		{"root", "https://www.linkedin.com/", ReasonNoCompany},
		{"host only", "linkedin.com", ReasonNoCompany},
		{"feed", "linkedin.com/feed/", ReasonNoCompany},
		{"control newline inside", "linkedin.com/company/ac\nme", ReasonControl},
		{"control nul", "linkedin.com/company/acme\x00", ReasonControl},
		{"control del", "linkedin.com/company/ac\x7fme", ReasonControl},
		{"control c1", "linkedin.com/company/ac\u0085me", ReasonControl},
		{"escaped control", "linkedin.com/company/ac%0Ame", ReasonControl},
		{"invalid utf8", "linkedin.com/company/ac\xffme", ReasonNotUTF8},
		{"escaped invalid utf8", "linkedin.com/company/ac%FFme", ReasonNotUTF8},
		{"ftp scheme", "ftp://linkedin.com/company/acme", ReasonScheme},
		{"javascript scheme", "javascript://linkedin.com/company/acme", ReasonScheme},
		{"bad port", "https://linkedin.com:abc/company/acme", ReasonPort},
		{"too long value", "linkedin.com/company/acme?" + strings.Repeat("x", 2100), ReasonTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := n.NetworkURL(tt.in)
			if err == nil {
				t.Fatalf("NetworkURL(%q) = %q, want invalid %q", tt.in, got, tt.reason)
			}
			wantInvalid(t, err, tt.reason)
		})
	}
}

func TestNetworkURLConfiguredHosts(t *testing.T) {
	n := New([]string{" WWW.Network.Example. ", "network.example"})
	if len(n.Hosts) != 1 || n.Hosts[0] != "network.example" {
		t.Fatalf("Hosts = %q, want [network.example]", n.Hosts)
	}
	got, err := n.NetworkURL("uk.network.example/company/Acme/about")
	if err != nil || got != "https://www.network.example/company/acme" {
		t.Fatalf("got %q, %v", got, err)
	}
	_, err = n.NetworkURL("linkedin.com/company/acme")
	wantInvalid(t, err, ReasonNotNetworkHost)

	// A zero Normalizer behaves like New(nil).
	var zero Normalizer
	if got, err := zero.NetworkURL("linkedin.com/company/acme"); err != nil || got != acmeURL {
		t.Fatalf("zero Normalizer: %q, %v", got, err)
	}
}

func TestDomainValid(t *testing.T) {
	n := New(nil)
	tests := []struct {
		name, in, want string
	}{
		{"plain", "acme.com", "acme.com"},
		{"upper", "ACME.Com", "acme.com"},
		{"www", "www.acme.com", "acme.com"},
		{"www upper", "WWW.ACME.COM", "acme.com"},
		{"repeated www", "www.www.acme.com", "acme.com"},
		{"scheme", "https://acme.com", "acme.com"},
		{"http www path", "http://www.acme.com/about/us", "acme.com"},
		{"query", "acme.com?utm=x", "acme.com"},
		{"fragment", "acme.com#x", "acme.com"},
		{"path no scheme", "acme.com/contact", "acme.com"},
		{"port", "acme.com:8080", "acme.com"},
		{"scheme port path", "https://www.acme.com:443/x?y#z", "acme.com"},
		{"empty port", "acme.com:", "acme.com"},
		{"trailing dot", "acme.com.", "acme.com"},
		{"trailing dot www", "www.acme.com.", "acme.com"},
		{"userinfo", "https://user:pw@acme.com/", "acme.com"},
		{"email-like", "info@acme.com", "acme.com"},
		{"whitespace", "  acme.com\t\n", "acme.com"},
		{"subdomain kept", "blog.acme.com", "blog.acme.com"},
		{"subdomain www stripped only at front", "www.blog.acme.com", "blog.acme.com"},
		{"www in the middle kept", "blog.www.acme.com", "blog.www.acme.com"},
		{"www1 kept", "www1.acme.com", "www1.acme.com"},
		{"two-level suffix", "acme.co.uk", "acme.co.uk"},
		{"www two-level suffix", "www.acme.co.uk", "acme.co.uk"},
		{"www before bare suffix kept", "www.co.uk", "www.co.uk"},
		{"idn", "bücher.example", "xn--bcher-kva.example"},
		{"idn upper", "BÜCHER.example", "xn--bcher-kva.example"},
		{"idn punycode", "xn--bcher-kva.example", "xn--bcher-kva.example"},
		{"idn punycode upper", "XN--BCHER-KVA.EXAMPLE", "xn--bcher-kva.example"},
		{"idn with scheme and www", "https://www.bücher.example/path", "xn--bcher-kva.example"},
		{"idn tld", "пример.рф", "xn--e1afmkfd.xn--p1ai"},
		{"ideographic full stop", "acme。com", "acme.com"},
		{"full-width letters", "ａｃｍｅ.com", "acme.com"},
		{"double hyphen label", "ab--cd.com", "ab--cd.com"},
		{"digits label", "123.com", "123.com"},
		{"reserved example", "acme.example", "acme.example"},
		{"reserved test", "acme.test", "acme.test"},
		{"reserved invalid tld", "acme.invalid", "acme.invalid"},
		{"private suffix itself", "github.io", "github.io"},
		{"under private suffix", "acme.github.io", "acme.github.io"},
		{"label 63", strings.Repeat("a", 63) + ".com", strings.Repeat("a", 63) + ".com"},
		{"total 253", strings.Repeat(strings.Repeat("a", 62)+".", 4)[:249] + ".com", strings.Repeat(strings.Repeat("a", 62)+".", 4)[:249] + ".com"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := n.Domain(tt.in)
			if err != nil {
				t.Fatalf("Domain(%q) error: %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("Domain(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestDomainInvalid(t *testing.T) {
	n := New(nil)
	tests := []struct {
		name, in, reason string
	}{
		{"blank", "", ReasonBlank},
		{"spaces only", "   ", ReasonBlank},
		{"scheme only", "https://", ReasonBlank},
		{"ipv4", "192.0.2.1", ReasonIP},
		{"ipv4 port", "192.0.2.1:80", ReasonIP},
		{"ipv4 scheme", "http://192.0.2.1/x", ReasonIP},
		{"ipv4 trailing dot", "192.0.2.1.", ReasonIP},
		{"ipv4 full-width", "１９２.０.２.１", ReasonIP},
		{"ipv6 bare", "2001:db8::1", ReasonIP},
		{"ipv6 loopback", "::1", ReasonIP},
		{"ipv6 bracketed", "[2001:db8::1]", ReasonIP},
		{"ipv6 bracketed port", "http://[2001:db8::1]:8080/", ReasonIP},
		{"bracketed name", "[acme.com]", ReasonDomainChars},
		{"network url", "https://www.linkedin.com/company/acme", ReasonNetworkDomain},
		{"network url no scheme", "linkedin.com/company/acme", ReasonNetworkDomain},
		{"network host", "linkedin.com", ReasonNetworkDomain},
		{"network host www", "www.linkedin.com", ReasonNetworkDomain},
		{"network country host", "uk.linkedin.com", ReasonNetworkDomain},
		{"network subdomain", "engineering.linkedin.com", ReasonNetworkDomain},
		{"network person url", "linkedin.com/in/john", ReasonNetworkDomain},
		{"no dot", "acme", ReasonNoDot},
		{"localhost", "localhost", ReasonNoDot},
		{"empty label", "acme..com", ReasonEmptyLabel},
		{"leading dot", ".acme.com", ReasonEmptyLabel},
		{"two trailing dots", "acme.com..", ReasonEmptyLabel},
		{"label 64", strings.Repeat("a", 64) + ".com", ReasonLongLabel},
		{"total 254", strings.Repeat(strings.Repeat("a", 62)+".", 4)[:250] + ".com", ReasonLongDomain},
		{"underscore", "my_site.com", ReasonDomainChars},
		{"star", "*.acme.com", ReasonDomainChars},
		{"percent", "acme%2Ecom", ReasonDomainChars},
		{"bad punycode", "xn--zz.com", ReasonDomainChars},
		{"maps into failing bidi", "a\u2135b.example", ReasonDomainChars},
		{"bidi mixed", "aא.example", ReasonDomainChars},
		{"leading hyphen", "-acme.com", ReasonHyphen},
		{"trailing hyphen", "acme-.com", ReasonHyphen},
		{"numeric tld", "acme.123", ReasonNumericTLD},
		{"bare suffix co.uk", "co.uk", ReasonPublicSuffix},
		{"bare tld", "com.", ReasonNoDot},
		{"bare wildcard suffix", "anything.ck", ReasonPublicSuffix},
		{"space inside", "acme corp.com", ReasonSpaces},
		{"space before dot", "acme .com", ReasonSpaces},
		{"nbsp inside", "acme\u00a0corp.com", ReasonSpaces},
		{"control", "acme\x01.com", ReasonControl},
		{"tab inside", "acme\t.com", ReasonControl},
		{"invalid utf8", "acme\xfe.com", ReasonNotUTF8},
		{"ftp", "ftp://acme.com", ReasonScheme},
		{"bad port", "acme.com:http", ReasonPort},
		{"port too long", "acme.com:123456", ReasonPort},
		{"too long", strings.Repeat("a", 2049), ReasonTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := n.Domain(tt.in)
			if err == nil {
				t.Fatalf("Domain(%q) = %q, want invalid %q", tt.in, got, tt.reason)
			}
			wantInvalid(t, err, tt.reason)
		})
	}
}

func TestCanonicalDomainAllowsNetworkHost(t *testing.T) {
	got, err := CanonicalDomain("https://www.linkedin.com/company/acme")
	if err != nil || got != "linkedin.com" {
		t.Fatalf("CanonicalDomain = %q, %v; want linkedin.com", got, err)
	}
}

func TestRegistrableDomain(t *testing.T) {
	tests := []struct{ in, want string }{
		{"acme.com", "acme.com"},
		{"blog.acme.com", "acme.com"},
		{"a.b.acme.co.uk", "acme.co.uk"},
		{"acme.example", "acme.example"},
		{"www.newhome.example", "newhome.example"},
		{"acme.github.io", "acme.github.io"},
		{"github.io", "github.io"},
		{"ACME.COM.", "acme.com"},
		{"xn--bcher-kva.example", "xn--bcher-kva.example"},
	}
	for _, tt := range tests {
		got, err := RegistrableDomain(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("RegistrableDomain(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{"", "com", "co.uk", "192.0.2.1", "::1", ".com", "a..com"} {
		if got, err := RegistrableDomain(in); err == nil {
			t.Errorf("RegistrableDomain(%q) = %q, want error", in, got)
		}
	}
}

func TestRow(t *testing.T) {
	n := New(nil)
	tests := []struct {
		name, url, domain string
		want              Input
		reason            string
	}{
		{"network only", "linkedin.com/company/acme", "", Input{KindNetwork, acmeURL, "n:" + acmeURL}, ""},
		{"domain only", "", "www.acme.com", Input{KindDomain, "acme.com", "d:acme.com"}, ""},
		{"both: network wins", "linkedin.com/company/acme", "acme.com", Input{KindNetwork, acmeURL, "n:" + acmeURL}, ""},
		{"blank url uses domain", "   ", "acme.com", Input{KindDomain, "acme.com", "d:acme.com"}, ""},
		{"both blank", "", "", Input{}, ReasonBlank},
		{"both whitespace", " \t", "\n", Input{}, ReasonBlank},
		{"invalid network does not fall back", "linkedin.com/in/john", "acme.com", Input{}, ReasonPerson},
		{"invalid domain", "", "linkedin.com/company/acme", Input{}, ReasonNetworkDomain},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := n.Row(tt.url, tt.domain)
			if tt.reason != "" {
				wantInvalid(t, err, tt.reason)
				return
			}
			if err != nil {
				t.Fatalf("Row error: %v", err)
			}
			if got != tt.want {
				t.Fatalf("Row = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestEquivalence checks SPEC 2.5 rule 3: many spellings, one Key.
func TestEquivalence(t *testing.T) {
	n := New(nil)
	groups := []struct {
		key     string
		network []string
		domain  []string
	}{
		{
			key: "n:" + acmeURL,
			network: []string{
				"linkedin.com/company/acme", "https://www.linkedin.com/company/acme",
				"http://linkedin.com/company/ACME/", "www.linkedin.com/company/Acme/about/",
				"uk.linkedin.com/company/acme/jobs", "https://fr.linkedin.com/company/acme?trk=x",
				"https://m.linkedin.com/company/acme#about", "  HTTPS://DE.LINKEDIN.COM/Company/%41cme/people/  ",
				"https://www.linkedin.com:443/company/acme/", "//linkedin.com/company/acme",
			},
		},
		{
			key: "n:https://www.linkedin.com/company/soci%C3%A9t%C3%A9",
			network: []string{
				"linkedin.com/company/Soci%C3%A9t%C3%A9", "linkedin.com/company/société",
				"linkedin.com/company/SOCIÉTÉ", "https://uk.linkedin.com/company/soci%c3%a9t%c3%a9/about",
				"linkedin.com/company/SOCIE\u0301TE\u0301",
			},
		},
		{
			key: "d:acme.com",
			domain: []string{
				"acme.com", "ACME.COM", "www.acme.com", "https://acme.com", "http://www.acme.com/",
				"https://www.acme.com:8443/about?x=1#y", "acme.com.", "user@acme.com", " acme.com ",
				"//acme.com/path",
			},
		},
		{
			key:    "d:xn--bcher-kva.example",
			domain: []string{"bücher.example", "BÜCHER.EXAMPLE", "www.bücher.example", "xn--bcher-kva.example", "https://XN--BCHER-KVA.example/"},
		},
	}
	for _, g := range groups {
		for _, u := range g.network {
			in, err := n.Row(u, "ignored.example")
			if err != nil || in.Key != g.key {
				t.Errorf("Row(%q, _) = %+v, %v; want key %q", u, in, err, g.key)
			}
		}
		for _, d := range g.domain {
			in, err := n.Row("", d)
			if err != nil || in.Key != g.key {
				t.Errorf("Row(\"\", %q) = %+v, %v; want key %q", d, in, err, g.key)
			}
		}
	}

	// A network URL and a domain of the same company are two inputs.
	a, _ := n.Row("linkedin.com/company/acme", "")
	b, _ := n.Row("", "acme.com")
	if a.Key == b.Key {
		t.Fatalf("network and domain keys collide: %q", a.Key)
	}
	// Company and showcase pages with the same slug are different pages.
	c, _ := n.Row("linkedin.com/showcase/acme", "")
	if c.Key == a.Key {
		t.Fatalf("company and showcase keys collide: %q", c.Key)
	}
	// Subdomains are kept apart.
	d, _ := n.Row("", "blog.acme.com")
	if d.Key == b.Key {
		t.Fatalf("subdomain and domain keys collide: %q", d.Key)
	}
}

func TestInvalidError(t *testing.T) {
	_, err := New(nil).Row("", "")
	if err == nil || err.Error() != "invalid input: blank value" {
		t.Fatalf("Error() = %v", err)
	}
	for _, r := range allReasons {
		if r == "" || strings.ContainsAny(r, "\r\n") {
			t.Errorf("reason %q must be one non-empty line", r)
		}
	}
}

var allReasons = []string{
	ReasonBlank, ReasonControl, ReasonNotUTF8, ReasonTooLong, ReasonScheme, ReasonPort,
	ReasonPerson, ReasonNumeric, ReasonSlugTooLong, ReasonURLTooLong, ReasonNotNetworkHost,
	ReasonNoCompany, ReasonNoSlug, ReasonNetworkDomain, ReasonIP, ReasonNoDot, ReasonEmptyLabel,
	ReasonLongLabel, ReasonLongDomain, ReasonDomainChars, ReasonHyphen, ReasonNumericTLD,
	ReasonSpaces, ReasonPublicSuffix,
}

func TestKindString(t *testing.T) {
	if KindNetwork.String() != "network" || KindDomain.String() != "domain" || Kind(0).String() != "unknown" {
		t.Fatal("Kind.String mismatch")
	}
}

var benchRows = [][2]string{
	{"https://www.linkedin.com/company/acme", ""},
	{"uk.linkedin.com/company/Acme-Widgets/about/?trk=x", ""},
	{"linkedin.com/company/Soci%C3%A9t%C3%A9", ""},
	{"", "www.acme.com"},
	{"", "https://Blog.Example-Corp.co.uk/path?q=1"},
	{"", "bücher.example"},
	{"linkedin.com/in/john-doe", ""},
	{"", "not a domain"},
}

func BenchmarkRow(b *testing.B) {
	n := New(nil)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r := benchRows[i%len(benchRows)]
		_, _ = n.Row(r[0], r[1])
		i++
	}
}

// BenchmarkRowCases shows the cost of each kind of row in benchRows.
func BenchmarkRowCases(b *testing.B) {
	n := New(nil)
	names := []string{"network-canonical", "network-country-path", "network-escaped", "domain-www",
		"domain-url-subdomain", "domain-idn", "invalid-person", "invalid-domain"}
	for i, r := range benchRows {
		b.Run(names[i], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = n.Row(r[0], r[1])
			}
		})
	}
}
