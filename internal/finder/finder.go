package finder

import (
	"context"
	"time"

	"github.com/bulkd/bulkd/internal/company/normalize"
	"github.com/bulkd/bulkd/internal/verify"
)

// Person is one (first name, last name, domain) to find an address for.
type Person struct{ FirstName, LastName, Domain string }

// Statuses.
const (
	StatusFound    = "found"
	StatusNotFound = "not_found"
)

// Substatuses (see doc.go for when each is given).
const (
	SubVerified        = "verified"
	SubCatchAllPattern = "catch_all_pattern"
	SubCatchAllGuess   = "catch_all_guess"

	SubNoMatch       = "no_match"
	SubNoSuchDomain  = "no_such_domain"
	SubNullMX        = "null_mx"
	SubNoMailServer  = "no_mail_server"
	SubInvalidDomain = "invalid_domain"
	SubInvalidName   = "invalid_name"
	SubUnknown       = "unknown"
	// SubAmbiguous: the verified address is also the answer of another
	// person of the same call; it cannot be told whose it is.
	SubAmbiguous = "ambiguous"
)

// Confidence of the answers that return an address (0..100).
const (
	// ConfidenceDisposable is a verified address on a disposable domain.
	ConfidenceDisposable = 60
	// ConfidenceCatchAllPattern is a catch-all domain's address written
	// with the pattern learned from addresses verified on that domain.
	ConfidenceCatchAllPattern = 70
	// ConfidenceCatchAllGuess is a catch-all domain's address written
	// with the top prior pattern.
	ConfidenceCatchAllGuess = 35
)

// Result is the answer for one person.
type Result struct {
	Status        string  `json:"status"`
	Substatus     string  `json:"substatus"`
	Email         *string `json:"email"`
	EmailProvider *string `json:"email_provider"`
	MXRecord      *string `json:"mx_record"`
	IsCatchAll    *bool   `json:"is_catch_all"`
	IsRole        *bool   `json:"is_role"`
	IsFree        *bool   `json:"is_free"`
	IsDisposable  *bool   `json:"is_disposable"`
	Confidence    *int    `json:"confidence"`
	// Temporary: the answer may change on a later attempt (greylisting,
	// 4xx); RetryAfter suggests when.
	Temporary  bool          `json:"-"`
	RetryAfter time.Duration `json:"-"`
	// ProbesUsed is the RCPTs spent on this person's candidates (the
	// domain's catch-all probe is not counted).
	ProbesUsed int `json:"-"`
}

// Finder finds people's addresses with a verifier. It is safe for
// concurrent use.
type Finder struct {
	v        *verify.Verifier
	patterns PatternStore
}

// Search shape (see doc.go).
const (
	// scouts is how many people of a domain whose pattern is unknown
	// search through the priors while the others wait for the pattern.
	scouts = 2
	// scoutWidth is the candidates a scout sends per round.
	scoutWidth = 4
	// smallDomain is the most unanswered people of a domain for whom
	// everyone tries the top prior first; above it only the scouts start.
	smallDomain = 4
	// primeScouts is how many people of a greylisting domain send all
	// their candidates once, so that a retry finds them past the greylist.
	primeScouts = 3
	// distrustAfter is the refusals (with no verified address) of a
	// stored pattern in one call after which the call stops trusting it.
	distrustAfter = 2
)

// New returns a Finder checking candidates with v and sharing learned
// patterns through patterns; nil patterns keeps them in this process only.
func New(v *verify.Verifier, patterns PatternStore) *Finder {
	if patterns == nil {
		patterns = newMemPatterns()
	}
	return &Finder{v: v, patterns: patterns}
}

// person is one distinct person of a call.
type person struct {
	idxs []int
	name name
	dom  *domain

	cands []cand // what is left to try, in order
	tried map[string]bool
	sent  int // candidates sent

	// first is the result of the person's first candidate, firstCand
	// that candidate (the catch-all answer's address).
	first     *verify.Result
	firstCand cand

	scout      bool
	scoutEnded bool
	done       bool
	res        Result

	// held is a verified answer whose address the domain's pattern does
	// not write, reopened to check the pattern's candidates first (see
	// recheck); it is the answer when they are all refused.
	held      *Result
	rechecked bool
	local     string // the local part of a verified answer
	// unsupported: verified while nothing else at the domain was written
	// with its pattern; its lesson waits for the end of the call (see
	// hold), as its answer may.
	unsupported bool
	lesson      string
	// unsure is the first answer for one of the person's candidates that
	// left the mailbox's existence unknown (a policy refusal such as
	// "5.7.1 Sender blocked", a block, greylisting, a timeout) while the
	// person was not answered; a lower-ranked candidate verified after it
	// may be a colleague's mailbox (see settle). doubtful: verified with
	// unsure set; the address counts for no pattern until settle.
	unsure   *verify.Result
	doubtful bool
	// rejected: the person's candidates answered with a policy refusal
	// (rejected); refusedOK: those refused as non-existent. One refusal
	// among definitive ones is likely the person's own mailbox refusing
	// us, and tells the domain's pattern (see settle).
	rejected  []string
	refusedOK int

	firstName, lastName string // normalized (NormalizeName), to tell people apart
}

// domain is one domain of a call.
type domain struct {
	name   string
	people []*person

	pattern   string           // the pattern in use; "" while it is not known
	fromStore bool             // pattern came from the store and nothing confirmed it yet
	stored    map[string]int64 // the store's counts when the call started (nil: unknown)
	shape     string           // the shape the store's counts favour (favouredShape); orders the priors
	distrust  bool             // the stored pattern failed in this call: not used again
	planned   string           // the pattern people's lists were built for
	built     bool
	counts    map[string]int64 // addresses verified per pattern in this call
	// evidence is counts without forgetting: a provisional pattern the
	// call stopped searching with (absorb) still speaks against another
	// pattern's address when confidence judges it.
	evidence map[string]int64
	// greylisted: a candidate of this domain was greylisted in this call
	// (its people are answered across retries, a few at a time).
	greylisted bool
	// policy: a candidate of this domain got a policy refusal (rejected)
	// in this call; verified addresses then teach only at the end of the
	// call (settle may withdraw them).
	policy bool

	scoutsFailed int  // scouts that ended while the pattern was unknown
	mass         bool // everyone searches (see noteScouts)

	stopped bool
	prime   bool // send the scouts' remaining candidates once (greylisting)
	primed  bool
	// primeForms: the domain greylisted while its pattern was known; every
	// person left without an answer sends their remaining forms of the
	// pattern once, so that a retry finds all of them past the greylist.
	primeForms  bool
	primedForms bool
}

// send is one candidate of one person in a round.
type send struct {
	p     *person
	c     cand
	prime bool
}

// Find answers people in input order (see doc.go for the rules). People of
// one domain are resolved and probed together, in rounds; every round is
// one Verify call for the whole batch.
func (f *Finder) Find(ctx context.Context, people []Person) []Result {
	out, order, all := gatherPeople(people)
	if len(order) == 0 {
		return out
	}
	f.loadPatterns(ctx, order)
	f.rounds(ctx, order)
	f.conclude(ctx, all)
	markAmbiguous(all)
	for _, p := range all {
		for k, i := range p.idxs {
			out[i] = p.res
			if k > 0 {
				out[i].ProbesUsed = 0
			}
		}
	}
	return out
}

// gatherPeople parses the request: a result for each row that is no
// person (bad name or domain), the domains in their order, and the
// distinct people (a repeated person is one person with several rows).
func gatherPeople(people []Person) (out []Result, order []*domain, all []*person) {
	out = make([]Result, len(people))
	doms := map[string]*domain{}
	uniq := map[string]*person{}
	for i, pp := range people {
		n := parseName(pp.FirstName, pp.LastName)
		if len(n.pairs) == 0 {
			out[i] = notFound(SubInvalidName)
			continue
		}
		dn, ok := canonicalDomain(pp.Domain)
		if !ok {
			out[i] = notFound(SubInvalidDomain)
			continue
		}
		key := NormalizeName(pp.FirstName) + "\x00" + NormalizeName(pp.LastName) + "\x00" + dn
		if p := uniq[key]; p != nil {
			p.idxs = append(p.idxs, i)
			continue
		}
		d := doms[dn]
		if d == nil {
			d = &domain{name: dn, counts: map[string]int64{}}
			doms[dn] = d
			order = append(order, d)
		}
		p := &person{idxs: []int{i}, name: n, dom: d, tried: map[string]bool{},
			firstName: NormalizeName(pp.FirstName), lastName: NormalizeName(pp.LastName)}
		d.people = append(d.people, p)
		uniq[key] = p
		all = append(all, p)
	}
	return out, order, all
}

// rounds sends every domain's planned candidates to the verifier, round
// after round, until no domain has anything left to ask (or ctx ends).
func (f *Finder) rounds(ctx context.Context, order []*domain) {
	for ctx.Err() == nil {
		var sends []send
		for _, d := range order {
			sends = append(sends, d.plan()...)
		}
		if len(sends) == 0 {
			break
		}
		emails := make([]string, len(sends))
		for i, s := range sends {
			emails[i] = s.c.local + "@" + s.p.dom.name
		}
		res := f.v.Verify(ctx, emails)
		byDom := map[*domain][]int{}
		var seen []*domain
		for i, s := range sends {
			if byDom[s.p.dom] == nil {
				seen = append(seen, s.p.dom)
			}
			byDom[s.p.dom] = append(byDom[s.p.dom], i)
		}
		var learned []learnt
		for _, d := range seen {
			learned = append(learned, d.absorb(sends, res, byDom[d])...)
		}
		f.learn(ctx, learned)
	}
}

// conclude gives every person its final answer: the unanswered ones
// not_found (unknown when ctx ended), then the domain's settle, hold and
// confidence rules, and learns what those taught.
func (f *Finder) conclude(ctx context.Context, all []*person) {
	for _, p := range all {
		if !p.done && p.held != nil {
			p.answer(Result{})
		}
		if !p.done {
			if ctx.Err() != nil {
				p.res = notFound(SubUnknown)
				p.res.Temporary = true
			} else {
				p.res = notFound(SubNoMatch)
			}
		}
	}
	var late []learnt
	for _, p := range all {
		if p.dom.settle(p) {
			if pats := patternsOf(p.name, p.local); len(pats) == 1 {
				late = append(late, learnt{p.dom.name, pats[0]})
			}
		}
		p.dom.hold(p)
		p.dom.confidence(p)
		if p.unsupported && p.res.Substatus == SubVerified {
			late = append(late, learnt{p.dom.name, p.lesson})
		}
	}
	f.learn(ctx, late)
}

// canonicalDomain reads a domain as company enrichment does (URLs, www.,
// user@, IDN) and checks it can be an address's domain.
func canonicalDomain(raw string) (string, bool) {
	d, err := normalize.CanonicalDomain(raw)
	if err != nil {
		return "", false
	}
	if _, err := verify.Normalize("x@" + d); err != nil {
		return "", false
	}
	return d, true
}

// loadPatterns reads the learned pattern of every domain of the call.
func (f *Finder) loadPatterns(ctx context.Context, order []*domain) {
	names := make([]string, len(order))
	for i, d := range order {
		names[i] = d.name
	}
	if cg, ok := f.patterns.(countsGetter); ok {
		if m, err := cg.CountsMany(ctx, names); err == nil {
			for _, d := range order {
				d.stored = m[d.name]
				d.shape = favouredShape(d.stored)
				if p, ok := best(d.stored); ok {
					d.pattern, d.fromStore = p, true
				}
			}
			return
		}
	}
	got := map[string]string{}
	if bg, ok := f.patterns.(batchGetter); ok {
		m, err := bg.GetMany(ctx, names)
		if err == nil {
			got = m
		}
	} else {
		for _, n := range names {
			if p, ok, err := f.patterns.Get(ctx, n); err == nil && ok {
				got[n] = p
			}
		}
	}
	for _, d := range order {
		if p := got[d.name]; KnownPattern(p) {
			// A store without counts: its pattern counts as one address.
			d.pattern, d.fromStore, d.stored = p, true, map[string]int64{p: 1}
		}
	}
}

// learnt is one verified address's pattern, to be stored.
type learnt struct{ domain, pattern string }

// batchLearner is implemented by stores that take a round's lessons in one
// round trip.
type batchLearner interface {
	LearnMany(ctx context.Context, domains, patterns []string) error
}

func (f *Finder) learn(ctx context.Context, ls []learnt) {
	if len(ls) == 0 {
		return
	}
	if bl, ok := f.patterns.(batchLearner); ok {
		ds, ps := make([]string, len(ls)), make([]string, len(ls))
		for i, l := range ls {
			ds[i], ps[i] = l.domain, l.pattern
		}
		_ = bl.LearnMany(ctx, ds, ps)
		return
	}
	for _, l := range ls {
		_ = f.patterns.Learn(ctx, l.domain, l.pattern)
	}
}

// Close gives back what the finder's verifier holds (its parked SMTP
// sessions and their politeness slots, shared with other pods through
// Redis); a process calls it before it exits. A lookup pod builds no
// verification family, so nothing else would close its verifier.
func (f *Finder) Close() {
	if f != nil && f.v != nil {
		f.v.Close()
	}
}
