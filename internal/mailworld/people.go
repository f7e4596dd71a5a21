package mailworld

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// PeopleOptions tunes People; zero fields take the defaults.
type PeopleOptions struct {
	Domains   int           // default 50
	PerDomain int           // people asked about per domain; default 20
	RTT       time.Duration // default 50ms; negative means 0
	Seed      int64         // the same seed gives the same world
	// Greylist is the greylisting period of the greylisting domains;
	// default 2s.
	Greylist time.Duration
	// MaxConnsPerHost is every host's MaxConns; default 3 (MaxRcpts is 100).
	MaxConnsPerHost int
	// Collisions gives every {last}{f} domain, for up to that many people
	// asked about with a plain ASCII name, a mailbox at the person's
	// {first}{l} form (thomasj@ for Thomas Jackson) that belongs to someone
	// nobody asks about: issue 20's wrong person. The truth is unchanged
	// (the person's Email is still the {last}{f} address). 0 (the default)
	// adds none; the rest of the world is the same for a seed either way.
	Collisions int
}

// PersonCase is one person asked about and the truth about them.
type PersonCase struct {
	FirstName, LastName string
	Domain              string // the company's domain, canonical
	// Email is the person's true address, "" when the person has none at
	// the domain (not in the directory, or a domain without mail).
	Email string
	// Findable: a finder can prove Email (it exists, on a domain that
	// receives mail and is not catch-all). On a greylisting domain only
	// after the greylisting period (see Greylisted).
	Findable bool
	// CatchAll: the domain accepts every address, so nothing about it can
	// be proven; Email is still the address the directory has.
	CatchAll bool
	// Greylisted: the domain greylists every new recipient for
	// PeopleOptions.Greylist.
	Greylisted bool
	// Reason is the verifier's reason for a domain without mail
	// (no_such_domain, null_mx, no_mail_server), "" otherwise.
	Reason string
	// Pattern is the domain's address pattern ("{first}.{last}", ...), ""
	// for a domain without mail.
	Pattern string
	// Blocked: the domain's mail server blocks the client (HardenPeople),
	// so nothing about the person can be known.
	Blocked bool
}

// PeoplePatterns are the address patterns the people world's domains use,
// with the share of domains using each. Placeholders: {first} and {last}
// are the first and last name written in ASCII (a compound name may be
// written joined or hyphenated, see People), {f} and {l} their initials.
var PeoplePatterns = []struct {
	Pattern string
	Share   float64
}{
	{"{first}.{last}", 0.35}, {"{f}{last}", 0.15}, {"{first}", 0.08}, {"{first}{last}", 0.08},
	{"{f}.{last}", 0.06}, {"{first}{l}", 0.05}, {"{first}_{last}", 0.05}, {"{last}.{first}", 0.05},
	{"{last}{f}", 0.05}, {"{first}-{last}", 0.04}, {"{last}", 0.04},
}

// RenderPattern writes a pattern for one ASCII first and last name.
func RenderPattern(pattern, first, last string) string {
	r := strings.NewReplacer("{first}", first, "{last}", last, "{f}", first[:1], "{l}", last[:1])
	return r.Replace(pattern)
}

// footprintPatterns are the patterns a finder may try for a person: no
// person's candidate under any of them may be another person's address
// (the world never makes a finder's honest guess land on someone else).
var footprintPatterns = []string{
	"{first}.{last}", "{f}{last}", "{first}", "{first}{last}", "{f}.{last}", "{first}{l}", "{first}_{last}",
	"{last}.{first}", "{last}{f}", "{first}-{last}", "{last}", "{last}{first}", "{f}_{last}", "{first}.{l}",
	"{last}_{first}", "{f}-{last}", "{f}{l}",
}

// special is a person whose name is not plain ASCII; spellings are the
// (first, last) ASCII forms companies write it with, the usual one first.
type special struct {
	first, last string
	spellings   [][2]string
}

// specials are the unicode and compound names of the people world.
var specials = []special{
	{"José", "Ñúñez", [][2]string{{"jose", "nunez"}}},
	{"Anne-Marie", "O'Neil", [][2]string{{"annemarie", "oneil"}, {"anne-marie", "oneil"}}},
	{"Jan", "van der Berg", [][2]string{{"jan", "vanderberg"}, {"jan", "berg"}}},
	{"Zoë", "Ødegård", [][2]string{{"zoe", "odegard"}}},
	{"François", "Lefèvre", [][2]string{{"francois", "lefevre"}}},
	{"Jürgen", "Müller", [][2]string{{"jurgen", "muller"}, {"juergen", "mueller"}}},
	{"Søren", "Kierkegaard", [][2]string{{"soren", "kierkegaard"}}},
	{"Łukasz", "Wójcik", [][2]string{{"lukasz", "wojcik"}}},
	{"Đorđe", "Petrović", [][2]string{{"dorde", "petrovic"}}},
	{"Siobhán", "MacNeil", [][2]string{{"siobhan", "macneil"}}},
	{"Renée", "D’Souza", [][2]string{{"renee", "dsouza"}}},
	{"Björn", "Åström", [][2]string{{"bjorn", "astrom"}}},
	{"Mary-Kate", "Smith-Jones", [][2]string{{"marykate", "smithjones"}, {"mary-kate", "smith-jones"}}},
	{"Ludwig", "von Beethoven", [][2]string{{"ludwig", "vonbeethoven"}, {"ludwig", "beethoven"}}},
	{"Seán", "Ó Briain", [][2]string{{"sean", "obriain"}}},
	{"Ana Sofía", "García Márquez", [][2]string{{"ana", "garcia"}, {"anasofia", "garciamarquez"}}},
	{"Chloé", "de la Cruz", [][2]string{{"chloe", "delacruz"}, {"chloe", "cruz"}}},
	{"Ronald", "McDonald", [][2]string{{"ronald", "mcdonald"}}},
	{"Ольга", "Смирнова", [][2]string{{"olga", "smirnova"}}},
	{"Çağla", "Öztürk", [][2]string{{"cagla", "ozturk"}}},
}

// People is the email finder's world: Domains company domains, PerDomain
// people asked about at each (a PersonCase each, shuffled as a real upload),
// hosted like Bench (about 30% of the domains that receive mail on four
// shared provider hosts named like Google's and Microsoft's, the rest on
// their own host; every host MaxConns = MaxConnsPerHost, MaxRcpts = 100).
//
// The mix of domains: 3% NXDOMAIN, 3% null MX, 1% with no mail server (a
// TXT record only), 8% catch-all, 3% greylisting for Greylist, the rest
// ordinary (worlds of 10 domains or more have at least one of each). Every
// domain that receives mail writes its addresses with one pattern of
// PeoplePatterns (chosen by share) and has a directory: about 80% of the
// people asked about are in it, plus three employees nobody asks about and
// the role addresses info@ and sales@. Each such domain's first person has
// a unicode or compound name (specials: José Ñúñez, Anne-Marie O'Neil, Jan
// van der Berg, Zoë Ødegård, ...), written the usual way or, in about 30%
// of the domains, the other way the company may have chosen
// (anne-marie.oneil, juergen.mueller, jan.berg); a domain whose pattern uses
// the first name's initial only ({f}{last}, {f}.{last}, {last}{f}) also has
// a person asked about by initial ("M.", the real first name's initial).
// Within a domain no two people share a first or a last name, and no
// person's candidate under any usual pattern is another person's address,
// so a finder that never returns an address it did not verify never
// returns someone else's on an ordinary domain.
func People(opts PeopleOptions) (Spec, []PersonCase) {
	opts = opts.withDefaults()
	b := &peopleBuilder{opts: opts, s: Spec{RTT: opts.RTT},
		rng: rand.New(rand.NewPCG(uint64(opts.Seed), 0x70656f706c65))} // "people"
	for _, p := range peopleProviders {
		b.s.Hosts = append(b.s.Hosts, NewHost(p.host, Limits(opts.MaxConnsPerHost, peopleMaxRcpts)))
	}
	classes := b.classes()
	for di, k := range classes {
		b.domain(di, k)
	}
	cases := b.cases
	b.rng.Shuffle(len(cases), func(a, c int) { cases[a], cases[c] = cases[c], cases[a] })
	return b.s, cases
}

func (opts PeopleOptions) withDefaults() PeopleOptions {
	if opts.Domains <= 0 {
		opts.Domains = 50
	}
	if opts.PerDomain <= 0 {
		opts.PerDomain = 20
	}
	if opts.RTT == 0 {
		opts.RTT = 50 * time.Millisecond
	}
	if opts.RTT < 0 {
		opts.RTT = 0
	}
	if opts.Greylist <= 0 {
		opts.Greylist = 2 * time.Second
	}
	if opts.MaxConnsPerHost <= 0 {
		opts.MaxConnsPerHost = 3
	}
	return opts
}

const peopleMaxRcpts = 100

// peopleProviders are the People world's shared hosts and their shares of
// the domains on a provider.
var peopleProviders = []peopleProvider{{"aspmx.l.google.com", 0.40}, {"mail.protection.outlook.com", 0.35}, {"mx.mailhaus.test", 0.15}, {"mx.inboxly.test", 0.10}}

type peopleProvider struct {
	host  string
	share float64
}

// What kind of domain a People domain is.
type peopleClass int

const (
	peopleNormal peopleClass = iota
	peopleNXDomain
	peopleNullMX
	peopleNoMail
	peopleCatchAll
	peopleGreylist
)

// peopleBuilder builds People's world, one domain at a time (the draws of
// rng depend on the order).
type peopleBuilder struct {
	opts        PeopleOptions
	rng         *rand.Rand
	s           Spec
	cases       []PersonCase
	specialNext int
}

// classes deals the domains' classes in the world's proportions.
func (b *peopleBuilder) classes() []peopleClass {
	n := b.opts.Domains
	count := func(frac float64) int {
		c := int(math.Round(float64(n) * frac))
		if c == 0 && n >= 10 {
			c = 1
		}
		return c
	}
	classes := make([]peopleClass, n)
	i := 0
	for _, c := range []struct {
		k peopleClass
		n int
	}{{peopleNXDomain, count(0.03)}, {peopleNullMX, count(0.03)}, {peopleNoMail, count(0.01)}, {peopleCatchAll, count(0.08)}, {peopleGreylist, count(0.03)}} {
		for j := 0; j < c.n && i < n; j++ {
			classes[i] = c.k
			i++
		}
	}
	b.rng.Shuffle(n, func(a, c int) { classes[a], classes[c] = classes[c], classes[a] })
	return classes
}

// pickShare draws one of n items, the i-th with share(i) of the draws
// (the first when the shares add up to less than the draw).
func pickShare(rng *rand.Rand, n int, share func(i int) float64) int {
	x := rng.Float64()
	for i := range n {
		if x < share(i) {
			return i
		}
		x -= share(i)
	}
	return 0
}

func (b *peopleBuilder) pickPattern() string {
	return PeoplePatterns[pickShare(b.rng, len(PeoplePatterns), func(i int) float64 { return PeoplePatterns[i].Share })].Pattern
}

func (b *peopleBuilder) pickProvider() string {
	return peopleProviders[pickShare(b.rng, len(peopleProviders), func(i int) float64 { return peopleProviders[i].share })].host
}

// domain adds the di-th domain, of class k, its people asked about and
// its other mailboxes.
func (b *peopleBuilder) domain(di int, k peopleClass) {
	rng := b.rng
	name := fmt.Sprintf("%s-%03d.test", words[rng.IntN(len(words))], di+1)
	d := Domain{Name: name}
	reason := ""
	switch k {
	case peopleNXDomain:
		d.DNS, reason = DNSNXDomain, "no_such_domain"
	case peopleNullMX:
		d.DNS, reason = DNSNullMX, "null_mx"
	case peopleNoMail:
		d.DNS, reason = DNSNoMail, "no_mail_server"
	default:
		if rng.Float64() < 0.3 {
			d.MX = []string{b.pickProvider()}
		} else {
			h := "mx." + name
			b.s.Hosts = append(b.s.Hosts, NewHost(h, Limits(b.opts.MaxConnsPerHost, peopleMaxRcpts)))
			d.MX = []string{h}
		}
	}
	d.CatchAll = k == peopleCatchAll
	if k == peopleGreylist {
		d.Greylist = b.opts.Greylist
	}
	mail := reason == ""
	pattern := ""
	if mail {
		pattern = b.pickPattern()
	}
	g := newDirectory(pattern)
	for j := range b.opts.PerDomain {
		if pc, ok := b.asked(g, j, mail, pattern); ok {
			pc.Domain = name
			if pc.Email != "" {
				pc.Email += "@" + name
			}
			switch {
			case !mail:
				pc.Reason = reason
			case k == peopleCatchAll:
				pc.CatchAll = true
			default:
				pc.Findable = pc.Email != ""
				pc.Greylisted = k == peopleGreylist
			}
			pc.Pattern = pattern
			b.cases = append(b.cases, b.untidy(pc))
		}
	}
	if mail {
		b.unasked(&d, g, pattern)
	}
	b.s.Domains = append(b.s.Domains, d)
}

// asked draws the j-th person asked about of a domain into its directory g:
// the first a special name, the second (where the pattern writes initials
// only) one that shares them.
func (b *peopleBuilder) asked(g *directory, j int, mail bool, pattern string) (pc PersonCase, ok bool) {
	rng := b.rng
	inDir := mail && rng.Float64() < 0.8
	switch {
	case j == 0 && mail:
		sp := specials[b.specialNext%len(specials)]
		b.specialNext++
		sp2 := sp.spellings[0]
		if len(sp.spellings) > 1 && rng.Float64() < 0.3 {
			sp2 = sp.spellings[1]
		}
		pc, ok = g.add(sp.first, sp.last, [][2]string{sp2}, sp.spellings, inDir)
	case j == 1 && mail && initialOnly(pattern):
		pc, ok = g.addInitial(rng)
	}
	for tries := 0; !ok && tries < 200; tries++ {
		first, last := peopleFirst[rng.IntN(len(peopleFirst))], peopleLast[rng.IntN(len(peopleLast))]
		fl, ll := strings.ToLower(first), strings.ToLower(last)
		pc, ok = g.add(first, last, [][2]string{{fl, ll}}, [][2]string{{fl, ll}}, inDir)
	}
	return pc, ok
}

// untidy makes some uploads shout or carry stray spaces.
func (b *peopleBuilder) untidy(pc PersonCase) PersonCase {
	switch x := b.rng.Float64(); {
	case x < 0.03:
		pc.FirstName, pc.LastName = strings.ToUpper(pc.FirstName), strings.ToUpper(pc.LastName)
	case x < 0.05:
		pc.FirstName, pc.LastName = " "+pc.FirstName, pc.LastName+"  "
	}
	return pc
}

// unasked adds a mail domain's employees nobody asks about, its role
// addresses and (Collisions) the colleagues' mailboxes.
func (b *peopleBuilder) unasked(d *Domain, g *directory, pattern string) {
	rng := b.rng
	for range 3 {
		for tries := 0; tries < 50; tries++ {
			first, last := peopleFirst[rng.IntN(len(peopleFirst))], peopleLast[rng.IntN(len(peopleLast))]
			fl, ll := strings.ToLower(first), strings.ToLower(last)
			if g.addUnasked(RenderPattern(pattern, fl, ll), fl, ll) {
				break
			}
		}
	}
	for _, role := range []string{"info", "sales"} {
		g.addUnasked(role, "", "")
	}
	d.Users = g.users
	if b.opts.Collisions <= 0 || pattern != "{last}{f}" {
		return
	}
	added := 0
	for _, pc := range b.cases {
		if added == b.opts.Collisions {
			break
		}
		f, l := strings.ToLower(strings.TrimSpace(pc.FirstName)), strings.ToLower(strings.TrimSpace(pc.LastName))
		if pc.Domain != d.Name || !asciiLetters(f) || !asciiLetters(l) {
			continue
		}
		if c := RenderPattern("{first}{l}", f, l); !g.addrs[c] {
			g.addrs[c] = true
			d.Users = append(d.Users, c)
			added++
		}
	}
}

// asciiLetters reports whether s is one or more of a-z.
func asciiLetters(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 'a' || s[i] > 'z' {
			return false
		}
	}
	return s != ""
}

// initialOnly reports whether a pattern uses the first name's initial but
// not the whole first name.
func initialOnly(p string) bool {
	return strings.Contains(p, "{f}") && !strings.Contains(p, "{first}")
}

// directory builds one domain's users while keeping people apart.
type directory struct {
	pattern     string
	users       []string
	addrs       map[string]bool // users' local parts
	foot        map[string]bool // every candidate of every person asked about
	firsts      map[string]bool // first names (ASCII) in use
	lasts       map[string]bool
	firstLetter map[byte]bool // initials of people asked about by initial
}

func newDirectory(pattern string) *directory {
	return &directory{pattern: pattern, addrs: map[string]bool{}, foot: map[string]bool{},
		firsts: map[string]bool{}, lasts: map[string]bool{}, firstLetter: map[byte]bool{}}
}

// footprint is every local part a finder may try for the given spellings.
func footprint(spellings [][2]string) map[string]bool {
	fp := map[string]bool{}
	for _, sp := range spellings {
		for _, p := range footprintPatterns {
			fp[RenderPattern(p, sp[0], sp[1])] = true
		}
	}
	return fp
}

// add adds a person asked about, written in the directory (when inDir)
// with the first of spellings; all lists every spelling a finder may try.
// It fails when the person would collide with someone already there.
func (g *directory) add(first, last string, spellings, all [][2]string, inDir bool) (PersonCase, bool) {
	for _, sp := range all {
		if g.firsts[sp[0]] || g.lasts[sp[1]] || g.firstLetter[sp[0][0]] {
			return PersonCase{}, false
		}
	}
	fp := footprint(all)
	for a := range fp {
		if g.addrs[a] {
			return PersonCase{}, false
		}
	}
	pc := PersonCase{FirstName: first, LastName: last}
	if inDir && g.pattern != "" {
		a := RenderPattern(g.pattern, spellings[0][0], spellings[0][1])
		if g.foot[a] {
			return PersonCase{}, false
		}
		g.addrs[a] = true
		g.users = append(g.users, a)
		pc.Email = a
	}
	for a := range fp {
		g.foot[a] = true
	}
	for _, sp := range all {
		g.firsts[sp[0]], g.lasts[sp[1]] = true, true
	}
	return pc, true
}

// addInitial adds a person asked about by the initial of their first name
// ("M. Garcia"): in the directory under their full name, which a pattern
// of initials writes the same.
func (g *directory) addInitial(rng *rand.Rand) (PersonCase, bool) {
	for range 50 {
		first, last := peopleFirst[rng.IntN(len(peopleFirst))], peopleLast[rng.IntN(len(peopleLast))]
		fl, ll := strings.ToLower(first), strings.ToLower(last)
		if g.firstLetter[fl[0]] {
			continue
		}
		clash := false
		for f := range g.firsts {
			if f[0] == fl[0] {
				clash = true
			}
		}
		if clash {
			continue
		}
		pc, ok := g.add(first[:1]+".", last, [][2]string{{fl, ll}}, [][2]string{{fl, ll}, {fl[:1], ll}}, true)
		if ok {
			g.firstLetter[fl[0]] = true
			return pc, true
		}
	}
	return PersonCase{}, false
}

// addUnasked adds a user nobody asks about (first and last "" for a role
// address); it fails when a person asked about could reach it.
func (g *directory) addUnasked(local, first, last string) bool {
	if g.foot[local] || g.addrs[local] {
		return false
	}
	if first != "" && (g.firsts[first] || g.lasts[last] || g.firstLetter[first[0]]) {
		return false
	}
	g.addrs[local] = true
	g.users = append(g.users, local)
	if first != "" {
		g.firsts[first], g.lasts[last] = true, true
	}
	return true
}

var peopleFirst = []string{
	"Aaron", "Abigail", "Adrian", "Alice", "Amelia", "Andrew", "Arthur", "Audrey", "Benjamin", "Bianca",
	"Caleb", "Camila", "Charlotte", "Daniel", "Delia", "Dominic", "Eleanor", "Elijah", "Emma", "Ethan",
	"Evelyn", "Felix", "Fiona", "Gabriel", "Georgia", "Hannah", "Harvey", "Henry", "Iris", "Isaac",
	"Isabel", "Jacob", "Jasmine", "Joshua", "Julia", "Kevin", "Kimberly", "Lena", "Leonard", "Lily",
	"Logan", "Lucas", "Madeline", "Marcus", "Martha", "Nathan", "Nora", "Oliver", "Olivia", "Owen",
	"Patrick", "Penelope", "Quentin", "Rachel", "Raymond", "Rebecca", "Samuel", "Sarah", "Sophia", "Stella",
	"Theodore", "Tobias", "Ulrich", "Valerie", "Vincent", "Violet", "Walter", "Wesley", "Xander", "Yasmin",
	"Yusuf", "Zachary", "Beatrice", "Cedric", "Dorothy", "Edmund", "Gwendolyn", "Horace", "Ingrid", "Jerome",
}

var peopleLast = []string{
	"Abbott", "Barnes", "Bennett", "Brooks", "Caldwell", "Chambers", "Coleman", "Crawford", "Dalton", "Donovan",
	"Ellison", "Fairbanks", "Fletcher", "Foster", "Gallagher", "Goodwin", "Hamilton", "Hartley", "Hawkins", "Holloway",
	"Jennings", "Kendall", "Kingsley", "Lambert", "Langley", "Lawson", "Mathews", "Mercer", "Montgomery", "Norwood",
	"Osborne", "Pemberton", "Prescott", "Quinlan", "Radcliffe", "Ramsey", "Remington", "Rowland", "Sheffield", "Sinclair",
	"Spencer", "Stanton", "Sutherland", "Thornton", "Townsend", "Underhill", "Vaughn", "Wainwright", "Whitaker", "Winslow",
	"Yardley", "Yates", "Ashford", "Blackwood", "Carrington", "Davenport", "Eastwood", "Fairfax", "Garfield", "Hargrove",
	"Ingram", "Jefferson", "Kimball", "Lockhart", "Maddox", "Northcott", "Oakley", "Pennington", "Redmond", "Stafford",
	"Thackeray", "Upton", "Vickers", "Westbrook", "Wexford", "Ainsley", "Brennan", "Calloway", "Dunmore", "Everly",
}
