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
	rng := rand.New(rand.NewPCG(uint64(opts.Seed), 0x70656f706c65)) // "people"
	const maxRcpts = 100
	providers := []struct {
		host  string
		share float64
	}{{"aspmx.l.google.com", 0.40}, {"mail.protection.outlook.com", 0.35}, {"mx.mailhaus.test", 0.15}, {"mx.inboxly.test", 0.10}}
	s := Spec{RTT: opts.RTT}
	for _, p := range providers {
		s.Hosts = append(s.Hosts, Host{Name: p.host, MaxConns: opts.MaxConnsPerHost, MaxRcpts: maxRcpts})
	}

	type class int
	const (
		normal class = iota
		nxdomain
		nullMX
		noMail
		catchAll
		greylist
	)
	n := opts.Domains
	count := func(frac float64) int {
		c := int(math.Round(float64(n) * frac))
		if c == 0 && n >= 10 {
			c = 1
		}
		return c
	}
	classes := make([]class, n)
	i := 0
	for _, c := range []struct {
		k class
		n int
	}{{nxdomain, count(0.03)}, {nullMX, count(0.03)}, {noMail, count(0.01)}, {catchAll, count(0.08)}, {greylist, count(0.03)}} {
		for j := 0; j < c.n && i < n; j++ {
			classes[i] = c.k
			i++
		}
	}
	rng.Shuffle(n, func(a, b int) { classes[a], classes[b] = classes[b], classes[a] })

	pickPattern := func() string {
		x := rng.Float64()
		for _, p := range PeoplePatterns {
			if x < p.Share {
				return p.Pattern
			}
			x -= p.Share
		}
		return PeoplePatterns[0].Pattern
	}
	pickProvider := func() string {
		x := rng.Float64()
		for _, p := range providers {
			if x < p.share {
				return p.host
			}
			x -= p.share
		}
		return providers[0].host
	}

	var cases []PersonCase
	specialNext := 0
	for di := range n {
		name := fmt.Sprintf("%s-%03d.test", words[rng.IntN(len(words))], di+1)
		d := Domain{Name: name}
		k := classes[di]
		reason := ""
		switch k {
		case nxdomain:
			d.DNS, reason = DNSNXDomain, "no_such_domain"
		case nullMX:
			d.DNS, reason = DNSNullMX, "null_mx"
		case noMail:
			d.DNS, reason = DNSNoMail, "no_mail_server"
		default:
			if rng.Float64() < 0.3 {
				d.MX = []string{pickProvider()}
			} else {
				h := "mx." + name
				s.Hosts = append(s.Hosts, Host{Name: h, MaxConns: opts.MaxConnsPerHost, MaxRcpts: maxRcpts})
				d.MX = []string{h}
			}
		}
		d.CatchAll = k == catchAll
		if k == greylist {
			d.Greylist = opts.Greylist
		}
		mail := reason == ""
		pattern := ""
		if mail {
			pattern = pickPattern()
		}

		g := newDirectory(pattern)
		// The people asked about.
		for j := range opts.PerDomain {
			inDir := mail && rng.Float64() < 0.8
			var pc PersonCase
			var ok bool
			switch {
			case j == 0 && mail:
				sp := specials[specialNext%len(specials)]
				specialNext++
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
			if !ok {
				continue
			}
			pc.Domain = name
			if pc.Email != "" {
				pc.Email += "@" + name
			}
			switch {
			case !mail:
				pc.Reason = reason
			case k == catchAll:
				pc.CatchAll = true
			default:
				pc.Findable = pc.Email != ""
				pc.Greylisted = k == greylist
			}
			pc.Pattern = pattern
			// Some uploads shout or carry stray spaces.
			switch x := rng.Float64(); {
			case x < 0.03:
				pc.FirstName, pc.LastName = strings.ToUpper(pc.FirstName), strings.ToUpper(pc.LastName)
			case x < 0.05:
				pc.FirstName, pc.LastName = " "+pc.FirstName, pc.LastName+"  "
			}
			cases = append(cases, pc)
		}
		if mail {
			// Employees nobody asks about, and role addresses.
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
			if opts.Collisions > 0 && pattern == "{last}{f}" {
				added := 0
				for _, pc := range cases {
					if added == opts.Collisions {
						break
					}
					f, l := strings.ToLower(strings.TrimSpace(pc.FirstName)), strings.ToLower(strings.TrimSpace(pc.LastName))
					if pc.Domain != name || !asciiLetters(f) || !asciiLetters(l) {
						continue
					}
					if c := RenderPattern("{first}{l}", f, l); !g.addrs[c] {
						g.addrs[c] = true
						d.Users = append(d.Users, c)
						added++
					}
				}
			}
		}
		s.Domains = append(s.Domains, d)
	}
	rng.Shuffle(len(cases), func(a, b int) { cases[a], cases[b] = cases[b], cases[a] })
	return s, cases
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
