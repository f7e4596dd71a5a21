package company

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

func TestGenerateDeterministic(t *testing.T) {
	gen := func(n int, seed int64) []byte {
		var b bytes.Buffer
		if err := Generate(&b, n, seed, "network.example"); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	a, b := gen(2000, 42), gen(2000, 42)
	if !bytes.Equal(a, b) {
		t.Fatal("same seed gave different output")
	}
	if c := gen(2000, 43); bytes.Equal(a, c) {
		t.Fatal("different seeds gave the same output")
	}
	if n := bytes.Count(a, []byte("\n")); n != 2000 {
		t.Fatalf("%d lines, want 2000", n)
	}
	// The fixed entries do not depend on the seed.
	first := func(b []byte) string { return strings.Join(strings.SplitN(string(b), "\n", 5)[:4], "\n") }
	if first(a) != first(gen(2000, 43)) {
		t.Fatal("fixed entries depend on the seed")
	}
}

func TestGenerateFixedEntries(t *testing.T) {
	recs := generated(t, 10, 1)
	for _, tc := range []struct {
		name, slug             string
		website, domain, email *string
	}{
		{"Northwind Traders", "northwind-traders", new("https://www.northwind.example"), new("northwind.example"), new("northwind.example")},
		{"Contoso Analytics", "contoso-analytics", new("https://www.contoso.example"), new("contoso.example"), new("contoso.example")},
		{"Fabrikam Robotics", "fabrikam-robotics", new("https://www.fabrikam.example"), new("fabrikam.example"), new("mail.fabrikam.example")},
		{"Tailspin Toys", "tailspin-toys", nil, nil, nil},
	} {
		var r *Record
		for i := range recs[:4] {
			if *recs[i].Name == tc.name {
				r = &recs[i]
			}
		}
		if r == nil {
			t.Fatalf("%s is not among the first four records", tc.name)
		}
		if want := "https://www.network.example/company/" + tc.slug; *r.NetworkURL != want {
			t.Errorf("%s: network_url %s, want %s", tc.name, *r.NetworkURL, want)
		}
		eq := func(a, b *string) bool { return (a == nil && b == nil) || (a != nil && b != nil && *a == *b) }
		if !eq(r.Website, tc.website) || !eq(r.Domain, tc.domain) || !eq(r.EmailDomain, tc.email) {
			t.Errorf("%s: website/domain/email_domain = %s", tc.name, mustJSON(t, []*string{r.Website, r.Domain, r.EmailDomain}))
		}
		if r.Industry == nil || *r.Industry == "" || r.Headquarters == nil || *r.Headquarters.City == "" {
			t.Errorf("%s: sector or city reference broken: %s", tc.name, mustJSON(t, r))
		}
	}
}

// TestGenerateCombinationsUnique checks the properties that make every
// generated slug and domain unique: brand words, sector words and suffixes
// are each unique, slugify keeps their boundaries, the index permutation
// is a bijection, and no generated slug can equal a fixed one.
func TestGenerateCombinationsUnique(t *testing.T) {
	brands := map[string]bool{}
	for _, h := range brandHeads {
		for _, tl := range brandTails {
			b := strings.ToLower(h + tl)
			if brands[b] {
				t.Fatalf("brand %s can be spelled two ways", b)
			}
			brands[b] = true
		}
	}
	for _, f := range fixedCompanies {
		if brands[strings.SplitN(f.slug, "-", 2)[0]] {
			t.Fatalf("fixed slug %s collides with a generated brand", f.slug)
		}
	}
	words := map[string]bool{}
	for _, s := range sectors {
		if words[s.word] || strings.ContainsAny(s.word, " -") || len(s.specialties) < 2 {
			t.Fatalf("bad sector word %q", s.word)
		}
		words[s.word] = true
	}
	for _, s := range nameSuffixes[1:] {
		if words[s] || s == "" || strings.ContainsAny(s, " -") {
			t.Fatalf("bad suffix %q", s)
		}
		words[s] = true
	}
	for _, seed := range []int64{0, 1, 42, -7} {
		g := newGenerator(10, seed, "n.example")
		if gcd(g.step, g.space) != 1 {
			t.Fatalf("seed %d: step %d not coprime with %d", seed, g.step, g.space)
		}
	}
	g := newGenerator(10, 1, "n.example")
	if g.space < 1_000_000 {
		t.Fatalf("only %d combinations", g.space)
	}
	if c := g.core(fixedCount + int(g.space)); !strings.HasSuffix(c.slug, "-2") {
		t.Fatalf("record past the combination space has slug %s", c.slug)
	}
}

// TestGenerateUniqueAtScale generates a large data set and checks slugs,
// domains and ids are unique and every record is importable.
func TestGenerateUniqueAtScale(t *testing.T) {
	n := 200_000
	if testing.Short() {
		n = 20_000
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(Generate(pw, n, 99, "network.example")) }()
	seen := map[[32]byte]bool{}
	sc := bufio.NewScanner(pr)
	sc.Buffer(nil, 1<<20)
	count := 0
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		count++
		keys := []string{"u" + *r.NetworkURL}
		if r.Domain != nil {
			keys = append(keys, "d"+*r.Domain)
		}
		for _, k := range keys {
			h := sha256.Sum256([]byte(k))
			if seen[h] {
				t.Fatalf("duplicate %s", k)
			}
			seen[h] = true
		}
		if r.Specialties == nil || r.SimilarCompanies == nil || *r.NetworkID > MaxNetworkID {
			t.Fatalf("bad record %s", sc.Text())
		}
		if r.Domain != nil && !strings.HasSuffix(*r.Domain, ".example") {
			t.Fatalf("domain %s outside .example", *r.Domain)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if count != n {
		t.Fatalf("%d records, want %d", count, n)
	}
}
