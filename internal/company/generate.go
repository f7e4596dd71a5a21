package company

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Generate writes n fictional companies as JSONL (FormatJSONL) to w. The
// output depends only on n, seed and networkHost: the same arguments give
// byte-identical output, and record i is the same for every n > i (except
// that similar_companies only point at records < n).
//
// The first four records are fixed, well-known entries that documentation
// can rely on whatever the seed: Northwind Traders, Contoso Analytics,
// Fabrikam Robotics (email on mail.fabrikam.example) and Tailspin Toys (no
// website). The rest are invented from word lists; every slug and domain is
// unique, domains use the reserved .example TLD, network URLs are
// https://www.<networkHost>/company/<slug>, and network_id is 10000001 + i.
func Generate(w io.Writer, n int, seed int64, networkHost string) error {
	if n < 0 {
		return fmt.Errorf("company: generate: negative count %d", n)
	}
	if networkHost == "" || strings.ContainsAny(networkHost, "/ ") {
		return fmt.Errorf("company: generate: bad network host %q", networkHost)
	}
	g := newGenerator(n, seed, networkHost)
	bw := bufio.NewWriterSize(w, 256<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false) // keep "&" readable; the output is data, not HTML
	for i := 0; i < n; i++ {
		rec := g.record(i)
		if err := enc.Encode(&rec); err != nil {
			return fmt.Errorf("company: generate record %d: %w", i, err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("company: generate: %w", err)
	}
	return nil
}

// generator derives every record from (seed, index) alone, so that a
// record can name its similar companies by computing their core fields
// instead of keeping a million records in memory.
type generator struct {
	n     int
	seed  uint64
	host  string
	space uint64 // number of distinct (brand, sector, suffix) combinations
	step  uint64 // coprime with space: i -> combination is a permutation
	off   uint64
}

func newGenerator(n int, seed int64, host string) *generator {
	g := &generator{n: n, seed: uint64(seed), host: host}
	g.space = uint64(len(brandHeads) * len(brandTails) * len(sectors) * len(nameSuffixes))
	r := rand.New(rand.NewPCG(g.seed, 0x9e3779b97f4a7c15))
	g.off = r.Uint64N(g.space)
	// Start from a random large step and walk to the next coprime one; the
	// loop ends within a few steps because coprimes are dense.
	g.step = g.space/3 + r.Uint64N(g.space/3)
	for i := 0; i < 1000 && gcd(g.step, g.space) != 1; i++ {
		g.step++
	}
	return g
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// core holds what similar_companies entries need about a company.
type core struct {
	name, slug, industry string
	sector               *sector
	city                 *city
}

// fixedCount is the number of hand-written records at the start.
const fixedCount = 4

// generatedNetworkIDBase + i is the network_id of record i.
const generatedNetworkIDBase = 10000001

func (g *generator) networkURL(slug string) string {
	return "https://www." + g.host + "/company/" + slug
}

func (g *generator) core(i int) core {
	if i < fixedCount {
		f := &fixedCompanies[i]
		return core{name: f.name, slug: f.slug, industry: f.sector.industry, sector: f.sector, city: f.city}
	}
	k := uint64(i - fixedCount)
	j := (g.off + (k%g.space)*g.step) % g.space
	cycle := k / g.space
	a := j % uint64(len(brandHeads))
	j /= uint64(len(brandHeads))
	b := j % uint64(len(brandTails))
	j /= uint64(len(brandTails))
	s := j % uint64(len(sectors))
	x := j / uint64(len(sectors))
	sec := &sectors[s]
	name := brandHeads[a] + brandTails[b] + " " + sec.word
	if suf := nameSuffixes[x]; suf != "" {
		name += " " + suf
	}
	slug := slugify(name)
	if cycle > 0 {
		// Past about a million records the combinations repeat; a numeric
		// suffix keeps names, slugs and domains unique.
		name += " " + strconv.FormatUint(cycle+1, 10)
		slug += "-" + strconv.FormatUint(cycle+1, 10)
	}
	h := mix(g.seed, uint64(i))
	return core{name: name, slug: slug, industry: sec.industry, sector: sec, city: &cities[h%uint64(len(cities))]}
}

// mix is SplitMix64 over (seed, i): a cheap, well-spread hash.
func mix(seed, i uint64) uint64 {
	z := seed ^ (i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func slugify(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
		} else {
			dash = true
		}
	}
	return b.String()
}

func (c *city) text() string { return c.name + ", " + c.region + ", " + c.country }

func (g *generator) similar(c core) SimilarCompany {
	return SimilarCompany{
		Name:       new(c.name),
		NetworkURL: new(g.networkURL(c.slug)),
		Industry:   new(c.industry),
		Location:   new(c.city.name + ", " + c.city.country),
	}
}

func (g *generator) record(i int) Record {
	if i < fixedCount {
		return g.fixed(i)
	}
	c := g.core(i)
	r := rand.New(rand.NewPCG(g.seed, uint64(i)))
	rec := Record{
		NetworkURL:  new(g.networkURL(c.slug)),
		NetworkID:   new(int64(generatedNetworkIDBase + int64(i))),
		Name:        new(c.name),
		Industry:    new(c.industry),
		CompanyType: new(pickWeighted(r, companyTypes)),
		Headquarters: &Headquarters{
			Text: new(c.city.text()), City: new(c.city.name),
			Region: new(c.city.region), Country: new(c.city.country),
		},
	}
	if r.IntN(100) >= 3 { // about 3% have no website of their own
		domain := c.slug + ".example"
		rec.Domain = new(domain)
		if r.IntN(5) == 0 {
			rec.Website = new("https://" + domain)
		} else {
			rec.Website = new("https://www." + domain)
		}
		if r.IntN(10) == 0 {
			rec.EmailDomain = new("mail." + domain)
		} else {
			rec.EmailDomain = new(domain)
		}
	}
	sz := &sizeBands[pickBand(r)]
	rec.CompanySize = &CompanySize{Label: new(sz.label), Min: new(sz.min)}
	if sz.max > 0 {
		rec.CompanySize.Max = new(sz.max)
	}
	hi := sz.max
	if hi == 0 {
		hi = sz.min * 8
	}
	employees := sz.min + r.IntN(hi-sz.min+1)
	if r.IntN(10) > 0 {
		rec.EmployeeCount = new(employees)
	}
	founded := 2024 - int(r.ExpFloat64()*18)
	if founded < 1890 {
		founded = 1890 + r.IntN(40)
	}
	if r.IntN(20) > 0 {
		rec.FoundedYear = new(founded)
	}
	if r.IntN(20) > 0 {
		rec.FollowerCount = new(employees*(3+r.IntN(40)) + r.IntN(500))
	}
	if r.IntN(10) > 0 {
		k := 1 + r.IntN(min(6, len(c.sector.specialties)))
		perm := r.Perm(len(c.sector.specialties))
		for _, p := range perm[:k] {
			rec.Specialties = append(rec.Specialties, c.sector.specialties[p])
		}
	}
	rec.Description = new(describe(r, &c, rec.Specialties, rec.FoundedYear))
	if g.n > 1 {
		k := r.IntN(6)
		seen := map[int]bool{i: true}
		for t := 0; t < 4*k && len(rec.SimilarCompanies) < k; t++ {
			j := r.IntN(g.n)
			if seen[j] {
				continue
			}
			seen[j] = true
			rec.SimilarCompanies = append(rec.SimilarCompanies, g.similar(g.core(j)))
		}
	}
	rec.Normalize()
	return rec
}

func describe(r *rand.Rand, c *core, specialties []string, founded *int) string {
	var b strings.Builder
	switch r.IntN(3) {
	case 0:
		fmt.Fprintf(&b, "%s %s. ", c.name, c.sector.does)
	case 1:
		fmt.Fprintf(&b, "Based in %s, %s %s. ", c.city.name, c.name, c.sector.does)
	default:
		fmt.Fprintf(&b, "%s is a %s company that %s. ", c.name, strings.ToLower(c.sector.word), c.sector.does)
	}
	if founded != nil {
		fmt.Fprintf(&b, "Founded in %d, the company is headquartered in %s. ", *founded, c.city.name)
	} else {
		fmt.Fprintf(&b, "The company is headquartered in %s. ", c.city.name)
	}
	if len(specialties) > 0 {
		fmt.Fprintf(&b, "Its teams focus on %s.", joinAnd(specialties))
	} else {
		b.WriteString(closingLines[r.IntN(len(closingLines))])
	}
	return b.String()
}

func joinAnd(items []string) string {
	switch len(items) {
	case 1:
		return items[0]
	case 2:
		return items[0] + " and " + items[1]
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

type weighted struct {
	value  string
	weight int
}

func pickWeighted(r *rand.Rand, ws []weighted) string {
	return ws[pickIndex(r, len(ws), func(i int) int { return ws[i].weight })].value
}

// pickIndex draws one of n choices, choice i with weight w(i).
func pickIndex(r *rand.Rand, n int, w func(int) int) int {
	total := 0
	for i := range n {
		total += w(i)
	}
	x := r.IntN(total)
	for i := range n {
		if x < w(i) {
			return i
		}
		x -= w(i)
	}
	return n - 1
}

type sizeBand struct {
	label    string
	min, max int // max 0 = open-ended
	weight   int
}

func pickBand(r *rand.Rand) int {
	return pickIndex(r, len(sizeBands), func(i int) int { return sizeBands[i].weight })
}

// fixed returns one of the hand-written records. They never depend on the
// seed, so a README can quote them.
func (g *generator) fixed(i int) Record {
	f := &fixedCompanies[i]
	rec := Record{
		NetworkURL:  new(g.networkURL(f.slug)),
		NetworkID:   new(int64(generatedNetworkIDBase + int64(i))),
		Name:        new(f.name),
		Description: new(f.description),
		Industry:    new(f.sector.industry),
		CompanySize: parseCompanySize(f.size),
		CompanyType: new(f.companyType),
		Headquarters: &Headquarters{
			Text: new(f.city.text()), City: new(f.city.name),
			Region: new(f.city.region), Country: new(f.city.country),
		},
		FoundedYear:   new(f.founded),
		EmployeeCount: new(f.employees),
		FollowerCount: new(f.followers),
		Specialties:   append([]string(nil), f.specialties...),
	}
	if f.domain != "" {
		rec.Website = new("https://www." + f.domain)
		rec.Domain = new(f.domain)
		rec.EmailDomain = new(f.emailDomain)
	}
	for j := range fixedCount {
		if j != i && j < g.n {
			rec.SimilarCompanies = append(rec.SimilarCompanies, g.similar(g.core(j)))
		}
	}
	rec.Normalize()
	return rec
}

type fixedCompany struct {
	name, slug, domain, emailDomain string
	description, size, companyType  string
	founded, employees, followers   int
	specialties                     []string
	sector                          *sector
	city                            *city
}

var fixedCompanies = [fixedCount]fixedCompany{
	{
		name: "Northwind Traders", slug: "northwind-traders",
		domain: "northwind.example", emailDomain: "northwind.example",
		description: "Northwind Traders imports and distributes specialty foods and beverages to independent grocers and restaurants. Founded in 1994, the company is headquartered in Seattle.",
		size:        "201-500", companyType: "Privately Held",
		founded: 1994, employees: 340, followers: 12840,
		specialties: []string{"specialty foods", "wholesale distribution", "import logistics", "cold chain"},
		sector:      sectorNamed("Foods"), city: cityNamed("Seattle"),
	},
	{
		name: "Contoso Analytics", slug: "contoso-analytics",
		domain: "contoso.example", emailDomain: "contoso.example",
		description: "Contoso Analytics builds forecasting and reporting software that helps mid-sized retailers plan inventory. Founded in 2011, the company is headquartered in Austin.",
		size:        "51-200", companyType: "Privately Held",
		founded: 2011, employees: 128, followers: 5310,
		specialties: []string{"demand forecasting", "business intelligence", "data engineering"},
		sector:      sectorNamed("Analytics"), city: cityNamed("Austin"),
	},
	{
		name: "Fabrikam Robotics", slug: "fabrikam-robotics",
		domain: "fabrikam.example", emailDomain: "mail.fabrikam.example",
		description: "Fabrikam Robotics designs autonomous mobile robots for warehouses and factory floors. Founded in 2008, the company is headquartered in Munich.",
		size:        "1001-5000", companyType: "Public Company",
		founded: 2008, employees: 2150, followers: 48200,
		specialties: []string{"autonomous mobile robots", "industrial automation", "machine vision", "fleet management"},
		sector:      sectorNamed("Robotics"), city: cityNamed("Munich"),
	},
	{
		name: "Tailspin Toys", slug: "tailspin-toys",
		description: "Tailspin Toys is a small studio making wooden model aircraft kits sold through hobby shops. Founded in 2016, the company is headquartered in Bristol.",
		size:        "2-10", companyType: "Self-Owned",
		founded: 2016, employees: 6, followers: 412,
		specialties: []string{"model aircraft", "wooden toys"},
		sector:      sectorNamed("Toys"), city: cityNamed("Bristol"),
	},
}

// sectorNamed and cityNamed resolve the fixed companies' references into
// the tables. A typo yields an empty entry, which TestGenerateFixedEntries
// catches, instead of a panic during package initialization.
func sectorNamed(word string) *sector {
	for i := range sectors {
		if sectors[i].word == word {
			return &sectors[i]
		}
	}
	return &sector{}
}

func cityNamed(name string) *city {
	for i := range cities {
		if cities[i].name == name {
			return &cities[i]
		}
	}
	return &city{}
}
