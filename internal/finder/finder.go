package finder

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
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
	out := make([]Result, len(people))
	doms := map[string]*domain{}
	var order []*domain
	uniq := map[string]*person{}
	var all []*person
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
	if len(order) == 0 {
		return out
	}
	f.loadPatterns(ctx, order)

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

// rebuild gives every unanswered person the candidates of the domain's
// current pattern (or the priors), without the ones already tried.
func (d *domain) rebuild() {
	d.planned, d.built = d.pattern, true
	for _, p := range d.people {
		if p.done {
			continue
		}
		var cs []cand
		if d.pattern != "" {
			cs = learnedCands(p.name, d.pattern)
		} else {
			cs = priorCands(p.name, d.shape)
		}
		p.cands = p.cands[:0]
		for _, c := range cs {
			if !p.tried[c.local] {
				p.cands = append(p.cands, c)
			}
		}
	}
}

// plan returns the domain's sends for the next round.
func (d *domain) plan() []send {
	if d.prime {
		d.prime = false
		var out []send
		for _, p := range d.pickScouts(true) {
			for _, c := range priorCands(p.name, d.shape) {
				if !p.tried[c.local] {
					out = append(out, send{p: p, c: c, prime: true})
				}
			}
		}
		return out
	}
	if d.primeForms {
		d.primeForms = false
		var out []send
		for _, p := range d.people {
			if p.done && !p.res.Temporary {
				continue
			}
			for _, c := range p.cands { // at most MaxLearnedCandidates, the sent ones removed
				if !p.tried[c.local] {
					out = append(out, send{p: p, c: c, prime: true})
				}
			}
		}
		return out
	}
	if d.stopped {
		return nil
	}
	if !d.built || d.planned != d.pattern {
		d.rebuild()
	}
	d.recheck()
	open, waiting := 0, 0
	for _, p := range d.people {
		if p.done {
			continue
		}
		if len(p.cands) == 0 {
			if d.provisional() && p.held == nil {
				// The pattern rests on one or two addresses of this call:
				// a person it does not write waits (see absorb's distrust)
				// instead of being answered no_match at once.
				waiting++
				continue
			}
			p.answer(notFound(SubNoMatch))
			continue
		}
		open++
	}
	if open == 0 {
		if waiting > 0 {
			d.stopAll(notFound(SubNoMatch))
		}
		d.stopped = true
		return nil
	}
	var out []send
	take := func(p *person, n int) {
		for k := 0; k < n && len(p.cands) > 0; k++ {
			out = append(out, send{p: p, c: p.cands[0]})
			p.cands = p.cands[1:]
		}
	}
	if d.pattern != "" {
		// Learned: everyone tries their next form of the pattern.
		for _, p := range d.people {
			if !p.done {
				take(p, 1)
			}
		}
		return out
	}
	d.noteScouts()
	if d.mass {
		// The scouts could not tell the pattern: everyone searches.
		for _, p := range d.people {
			if !p.done {
				take(p, 1)
			}
		}
		return out
	}
	if open <= smallDomain {
		// A few people: whoever has not tried anything yet tries the top
		// prior; once everyone has, only the scouts go on.
		for _, p := range d.people {
			if !p.done && p.sent == 0 {
				take(p, 1)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	// Many people: the scouts find the pattern, the others wait for it.
	for _, p := range d.pickScouts(false) {
		take(p, scoutWidth)
	}
	return out
}

// noteScouts counts the scouts that ended without teaching the domain's
// pattern; after 2 x scouts of them everyone searches (mass).
func (d *domain) noteScouts() {
	for _, p := range d.people {
		if p.scout && !p.scoutEnded && (p.done || len(p.cands) == 0) {
			p.scoutEnded = true
			d.scoutsFailed++
		}
	}
	if d.scoutsFailed >= 2*scouts {
		d.mass = true
	}
}

// pickScouts returns the domain's scouts, choosing new ones when fewer
// than scouts are left: names whose address teaches a pattern (not an
// initial) first, then the names with the fewest forms, then input order.
// With answered true (priming after greylisting) it returns primeScouts
// people, who may have been answered temporarily.
func (d *domain) pickScouts(answered bool) []*person {
	n := scouts
	if answered {
		n = primeScouts
	}
	usable := func(p *person) bool {
		if answered {
			return p.res.Temporary || !p.done
		}
		return !p.done && len(p.cands) > 0
	}
	var cur []*person
	for _, p := range d.people {
		if p.scout && usable(p) {
			cur = append(cur, p)
		}
	}
	if len(cur) >= n {
		return cur[:n]
	}
	var pool []*person
	for _, p := range d.people {
		if !p.scout && usable(p) {
			pool = append(pool, p)
		}
	}
	sort.SliceStable(pool, func(a, b int) bool {
		na, nb := pool[a].name, pool[b].name
		if na.initialOnly() != nb.initialOnly() {
			return nb.initialOnly()
		}
		return na.variants() < nb.variants()
	})
	for _, p := range pool {
		if len(cur) == n {
			break
		}
		p.scout = true
		cur = append(cur, p)
	}
	return cur
}

// absorb applies a round's results to the domain and returns the patterns
// to store.
func (d *domain) absorb(sends []send, res []verify.Result, idx []int) []learnt {
	var learned []learnt
	var catchAll, noMail, unknown *verify.Result
	verified, refused := 0, 0
	for _, i := range idx {
		if res[i].Reason == verify.ReasonGreylisted {
			d.greylisted = true
		}
		if res[i].Reason == verify.ReasonRejected {
			d.policy = true
		}
	}
	for _, i := range idx {
		s, r := sends[i], res[i]
		p := s.p
		if r.SMTPCode != 0 {
			p.res.ProbesUsed++
		}
		p.tried[s.c.local] = true
		if p.sent == 0 {
			rr := r
			p.first, p.firstCand = &rr, s.c
		}
		p.sent++
		switch r.Reason {
		case verify.ReasonRejected:
			p.rejected = append(p.rejected, s.c.local)
		case verify.ReasonMailboxNotFound, verify.ReasonMailboxDisabled:
			p.refusedOK++
		}
		if s.prime {
			// Priming only starts greylisting periods; an address that
			// is nevertheless verified is an answer.
			if !p.done || p.res.Temporary {
				if r.Reason == verify.ReasonAccepted {
					learned = append(learned, d.found(p, r, s.c)...)
				} else {
					p.noteUnsure(r)
				}
			}
			continue
		}
		if p.done {
			continue
		}
		p.noteUnsure(r)
		switch r.Reason {
		case verify.ReasonAccepted:
			verified++
			learned = append(learned, d.found(p, r, s.c)...)
		case verify.ReasonDisposable:
			if r.IsCatchAll {
				catchAll = &res[i]
			} else {
				verified++
				learned = append(learned, d.found(p, r, s.c)...)
			}
		case verify.ReasonCatchAll:
			catchAll = &res[i]
		case verify.ReasonMailboxNotFound, verify.ReasonMailboxDisabled, verify.ReasonRejected, verify.ReasonInvalidSyntax:
			refused++
		case verify.ReasonMailboxFull:
			// The mailbox exists but cannot take mail: the person is
			// not found, and the other candidates are not theirs.
			a := notFound(SubUnknown)
			a.Temporary, a.RetryAfter = r.Temporary, r.RetryAfter
			p.answer(a)
		case verify.ReasonNoSuchDomain, verify.ReasonNullMX, verify.ReasonNoMailServer:
			noMail = &res[i]
		default: // unknown: greylisted, dns_error, connection_failed, timeout, ...
			if unknown == nil || r.Reason == verify.ReasonGreylisted && unknown.Reason != verify.ReasonGreylisted {
				unknown = &res[i]
			}
		}
	}
	switch {
	case noMail != nil:
		d.stopAll(notFound(noMail.Reason))
	case catchAll != nil:
		for _, p := range d.people {
			if !p.done {
				p.answer(d.catchAllAnswer(p, catchAll))
			}
		}
		d.stopped = true
	case unknown != nil:
		a := notFound(SubUnknown)
		a.Temporary, a.RetryAfter = unknown.Temporary, unknown.RetryAfter
		d.stopAll(a)
		switch {
		case unknown.Reason != verify.ReasonGreylisted:
		case d.pattern == "" && !d.primed:
			d.prime, d.primed = true, true
		case d.pattern != "" && !d.primedForms:
			d.primeForms, d.primedForms = true, true
		}
	case d.fromStore && !d.distrust && verified == 0 && refused >= distrustAfter:
		// Nobody of this domain has the stored pattern's address: it may
		// be stale. The call goes on as if no pattern were known.
		d.pattern, d.fromStore, d.distrust = "", false, true
	case d.provisional() && refused >= max(distrustAfter, 2*int(d.counts[d.pattern])):
		// The pattern was taught by one or two addresses of this call
		// (this round's included) and at least twice as many people of
		// the round do not have it: those
		// addresses may be exceptions (or other people's mailboxes). The
		// call searches the priors again without it; their owners are
		// rechecked once a pattern with more evidence is learned.
		delete(d.counts, d.pattern)
		d.pattern = ""
	}
	if verified > 0 {
		d.fromStore = false
		if p, ok := best(d.counts); ok && !d.stopped {
			d.pattern = p
		}
	}
	return learned
}

// found answers p with a verified address and returns the pattern it
// teaches (none when several patterns write that address for this name).
func (d *domain) found(p *person, r verify.Result, c cand) []learnt {
	a := Result{Status: StatusFound, Substatus: SubVerified}
	fill(&a, r, false)
	conf := r.Score
	if r.Reason == verify.ReasonDisposable {
		conf = ConfidenceDisposable
	}
	a.Confidence = &conf
	a.ProbesUsed = p.res.ProbesUsed
	if p.held != nil {
		// The recheck found the pattern's address: the earlier one is
		// not this person's, and teaches nothing.
		if pats := patternsOf(p.name, p.local); len(pats) == 1 {
			if d.counts[pats[0]] > 0 {
				d.counts[pats[0]]--
			}
			if d.evidence[pats[0]] > 0 {
				d.evidence[pats[0]]--
			}
		}
		p.held = nil
	}
	p.res, p.done, p.local = a, true, c.local
	if p.unsure != nil {
		// A candidate ranked before this one may be the person's
		// mailbox: the address is answered only if the domain's
		// pattern backs it at the end of the call (settle), and
		// teaches nothing until then.
		p.doubtful = true
		return nil
	}
	pats := patternsOf(p.name, c.local)
	if len(pats) != 1 {
		return nil
	}
	unsupported := d.stored[pats[0]]+d.evidence[pats[0]] == 0 || d.policy
	d.counts[pats[0]]++
	if d.evidence == nil {
		d.evidence = map[string]int64{}
	}
	d.evidence[pats[0]]++
	if unsupported {
		p.unsupported, p.lesson = true, pats[0]
		return nil
	}
	return []learnt{{d.name, pats[0]}}
}

// provisionalBelow is the addresses of this call from which a pattern
// that the store does not know is established.
const provisionalBelow = 3

// provisional reports whether the domain's pattern in use was taught by
// fewer than provisionalBelow addresses of this call and the store has
// none of it.
func (d *domain) provisional() bool {
	return d.pattern != "" && !d.fromStore && d.stored[d.pattern] == 0 && d.counts[d.pattern] < provisionalBelow
}

// recheck reopens every verified person whose address the domain's pattern
// does not write while the pattern's candidates for them were never sent:
// the address may be another person's mailbox (Thomas Jackson at a
// {last}{f} domain verified at thomasj@, the mailbox of a Thomas J...). The
// person tries those candidates first; their earlier answer is held and
// given back if all are refused. Once per person.
func (d *domain) recheck() {
	if d.pattern == "" || d.provisional() {
		return
	}
	for _, p := range d.people {
		if !p.done || p.rechecked || p.res.Substatus != SubVerified || p.local == "" {
			continue
		}
		if slices.Contains(patternsOf(p.name, p.local), d.pattern) {
			continue
		}
		var cs []cand
		for _, c := range learnedCands(p.name, d.pattern) {
			if !p.tried[c.local] {
				cs = append(cs, c)
			}
		}
		p.rechecked = true
		if len(cs) == 0 {
			continue
		}
		held := p.res
		p.held, p.done, p.cands = &held, false, cs
	}
}

// hold keeps an unsupported verified answer (no other address of the
// domain written with its pattern) waiting while others of a greylisting
// domain wait for a retry: their candidates pass the greylist a few at a
// time, and a colleague's mailbox (leonard@ of a departed Leonard) passes
// as early as anyone's. Answered then, it would be a wrong person, and
// taught to the store, the domain's pattern for the next retry. The last
// attempt makes a held answer final as not_found/unknown.
func (d *domain) hold(p *person) {
	if !p.unsupported || !d.greylisted || p.res.Substatus != SubVerified || p.local == "" {
		return
	}
	for _, pat := range patternsOf(p.name, p.local) {
		if d.stored[pat]+d.evidence[pat] > 1 {
			return // another address of the call supports it now
		}
	}
	for _, q := range d.people {
		if q.done && q.res.Temporary && q.res.Status == StatusNotFound {
			a := notFound(SubUnknown)
			a.Temporary, a.RetryAfter, a.ProbesUsed = true, q.res.RetryAfter, p.res.ProbesUsed
			p.res = a
			return
		}
	}
}

// noteUnsure records r as the person's first answer that left a
// candidate's existence unknown: anything but a verified address and a
// definitive refusal (5.1.1 no such mailbox, 5.2.1 disabled, bad syntax)
// or a domain without mail. A policy refusal ("550 5.7.1 Sender blocked",
// rejected) is not definitive: the mailbox may be the person's and refuse
// only us.
func (p *person) noteUnsure(r verify.Result) {
	if p.unsure != nil {
		return
	}
	switch r.Reason {
	case verify.ReasonAccepted, verify.ReasonDisposable, verify.ReasonCatchAll,
		verify.ReasonMailboxNotFound, verify.ReasonMailboxDisabled, verify.ReasonInvalidSyntax,
		verify.ReasonNoSuchDomain, verify.ReasonNullMX, verify.ReasonNoMailServer:
		return
	}
	rr := r
	p.unsure = &rr
}

// settle answers a verified person one of whose higher-ranked candidates
// got no definitive refusal (unsure): the address stands only when the
// domain's pattern backs it, that is when at least one other address of
// the domain written with its pattern was verified without such doubt (in
// this call or in the store). Otherwise the person's own mailbox may be
// the one that refused us, and the verified one a colleague's (Ronald
// McDonald's ronald.mcdonald@ answers "5.7.1 Sender blocked"; ronald@ is
// Ronald Smith's): not_found/ambiguous, final, after a policy refusal;
// not_found/unknown after anything else (temporary when that answer was,
// so a retry can tell). It reports whether a doubtful address stood, so
// that the caller teaches its pattern.
func (d *domain) settle(p *person) bool {
	if p.res.Status != StatusFound || p.res.Substatus != SubVerified || p.local == "" {
		return false
	}
	if p.unsure == nil {
		if d.policyAgainst(p) {
			a := notFound(SubAmbiguous)
			a.ProbesUsed = p.res.ProbesUsed
			p.res = a
		}
		return false
	}
	for _, pat := range patternsOf(p.name, p.local) {
		n := d.stored[pat] + d.evidence[pat]
		if !p.doubtful && len(patternsOf(p.name, p.local)) == 1 {
			n-- // counted when found (a held answer given back)
		}
		if n >= 1 {
			if d.policyAgainst(p) {
				a := notFound(SubAmbiguous)
				a.ProbesUsed = p.res.ProbesUsed
				p.res = a
				return false
			}
			return p.doubtful
		}
	}
	u := p.unsure
	a := notFound(SubUnknown)
	switch {
	case u.Reason == verify.ReasonRejected:
		a = notFound(SubAmbiguous)
	case u.Temporary:
		a.Temporary, a.RetryAfter = true, u.RetryAfter
	}
	a.ProbesUsed = p.res.ProbesUsed
	p.res = a
	return false
}

// policyAgainst reports whether the domain's policy refusals speak for
// another pattern than p's verified address's more than verified
// addresses speak for its own: people of the domain each of whose
// candidates were refused as non-existent but one, refused by policy
// ("550 5.7.1 Sender blocked": most likely their own mailbox, refusing
// us), count for the patterns that write that one; the address's own
// patterns count the addresses verified with them (the store's and the
// call's, itself left out, and only from provisionalBelow of them). At a company whose people's mailboxes all
// refuse our sender, a departed person's {first} form, now a colleague's
// mailbox (ronald@ for Ronald McDonald), is the only address that
// accepts, and every candidate before it was refused as non-existent:
// only the other people's refusals tell that the company writes another
// pattern. Servers that refuse every unknown address with 5.7.1 are not
// counted (more than one refusal per person).
func (d *domain) policyAgainst(p *person) bool {
	if !d.policy || p.res.IsDisposable != nil && *p.res.IsDisposable {
		return false
	}
	own := patternsOf(p.name, p.local)
	if len(own) == 0 {
		return false
	}
	backing := int64(0)
	for _, pat := range own {
		// The call's addresses back the pattern only once it is
		// established (provisionalBelow others): two or three colleagues'
		// mailboxes of departed people's {first} forms would otherwise
		// back each other.
		n := d.evidence[pat]
		if !p.doubtful && len(own) == 1 {
			n-- // the address itself
		}
		if n < provisionalBelow {
			n = 0
		}
		backing = max(backing, d.stored[pat]+n)
	}
	against := map[string]int64{}
	for _, q := range d.people {
		if q == p || len(q.rejected) != 1 || q.refusedOK == 0 {
			continue
		}
		for _, pat := range patternsOf(q.name, q.rejected[0]) {
			if !slices.Contains(own, pat) {
				against[pat]++
			}
		}
	}
	for _, n := range against {
		if n > backing {
			return true
		}
	}
	return false
}

// samePerson reports whether the rows are one person written two ways: the
// same last name and first names equal up to a nickname ("Bob" and
// "Robert" Smith both at robert.smith@ is one person asked twice, not an
// ambiguity).
func samePerson(ps []*person) bool {
	a := ps[0]
	for _, b := range ps[1:] {
		if a.lastName != b.lastName || !(a.firstName == b.firstName || slices.Contains(nicknames[a.firstName], b.firstName) ||
			slices.Contains(nicknames[b.firstName], a.firstName) || sharedFormal(a.firstName, b.firstName)) {
			return false
		}
	}
	return true
}

// sharedFormal reports whether two nicknames stand for one formal name
// ("Bob" and "Rob": robert).
func sharedFormal(a, b string) bool {
	for _, x := range nicknames[a] {
		if slices.Contains(nicknames[b], x) {
			return true
		}
	}
	return false
}

// A verified address whose pattern is not the domain's most used one (see
// doc.go's table): another pattern has 1 address (the score less
// offPatternFew), or at least offPatternAmbiguous (not answered).
const (
	offPatternFew       = 10
	offPatternAmbiguous = 2
)

// confidence lowers a verified answer's confidence, or withdraws it
// (not_found/ambiguous), when the domain's learned counts (the store's at
// the call's start plus this call's verified addresses, this one left
// out) favour another pattern than the one(s) that write the address.
func (d *domain) confidence(p *person) {
	if p.res.Status != StatusFound || p.res.Substatus != SubVerified || p.res.Confidence == nil || p.local == "" ||
		p.res.IsDisposable != nil && *p.res.IsDisposable {
		return
	}
	pats := patternsOf(p.name, p.local)
	if len(pats) == 0 {
		return
	}
	w := func(pat string) int64 { return d.stored[pat] + d.evidence[pat] }
	own := int64(0)
	for _, pat := range pats {
		c := w(pat)
		if len(pats) == 1 {
			c-- // the address itself
		}
		own = max(own, c)
	}
	top := int64(0)
	for _, pat := range Patterns() {
		if !slices.Contains(pats, pat) {
			top = max(top, w(pat))
		}
	}
	if own >= top {
		return
	}
	if top >= offPatternAmbiguous {
		// At least two addresses of the domain are written another way,
		// and that pattern's candidate for this person was refused (the
		// learned pattern goes first, recheck): the mailbox is more likely
		// a colleague's (Ronald McDonald, not in the directory of a
		// {last}{f} company, and ronaldm@, Ronald Miller's) than the
		// person's exception. Issue 20's goal is no wrong person, and the
		// finder cannot tell whose it is.
		a := notFound(SubAmbiguous)
		a.ProbesUsed = p.res.ProbesUsed
		p.res = a
		return
	}
	c := max(*p.res.Confidence-offPatternFew, 0)
	p.res.Confidence = &c
}

// markAmbiguous answers not_found/ambiguous every person of the call whose
// verified address is also another person's verified answer: one mailbox
// cannot be both people's, and the finder cannot tell whose it is.
func markAmbiguous(all []*person) {
	by := map[string][]*person{}
	for _, p := range all {
		if p.res.Status == StatusFound && p.res.Substatus == SubVerified && p.res.Email != nil {
			k := strings.ToLower(*p.res.Email)
			by[k] = append(by[k], p)
		}
	}
	for _, ps := range by {
		if len(ps) < 2 || samePerson(ps) {
			continue
		}
		for _, p := range ps {
			a := notFound(SubAmbiguous)
			a.ProbesUsed = p.res.ProbesUsed
			p.res = a
		}
	}
}

// catchAllAnswer is p's answer on a catch-all domain: the address of p's
// first candidate (the learned pattern's when one was known, else the top
// prior's).
func (d *domain) catchAllAnswer(p *person, r *verify.Result) Result {
	c, src := p.firstCand, p.first
	if src == nil {
		// The person waited for the scouts: nothing was sent for them.
		if len(p.cands) > 0 {
			c = p.cands[0]
		}
		src = r
	}
	if c.local == "" {
		return notFound(SubUnknown)
	}
	a := Result{Status: StatusFound, Substatus: SubCatchAllGuess, ProbesUsed: p.res.ProbesUsed}
	fill(&a, *src, true)
	email := c.local + "@" + d.name
	a.Email = &email
	if p.first == nil {
		role := roleLists().IsRole(c.local)
		a.IsRole = &role
	}
	conf := ConfidenceCatchAllGuess
	if d.planned != "" && c.pattern == d.planned {
		a.Substatus, conf = SubCatchAllPattern, ConfidenceCatchAllPattern
	}
	a.Confidence = &conf
	return a
}

// stopAll answers every unanswered person of the domain with a and stops
// the domain.
func (d *domain) stopAll(a Result) {
	for _, p := range d.people {
		if !p.done {
			p.answer(a)
		}
	}
	d.stopped = true
}

func (p *person) answer(a Result) {
	if p.held != nil {
		// A reopened person whose recheck ended without a verified
		// pattern address keeps the address verified before.
		a, p.held = *p.held, nil
	}
	a.ProbesUsed = p.res.ProbesUsed
	p.res, p.done = a, true
}

// roleLists tells role local parts for catch-all answers of people
// nothing was sent for (the others take the verifier's flags). Built on
// first use: parsing the embedded lists at package init would slow every
// bulkd command's start.
var roleLists = sync.OnceValue(verify.DefaultLists)

func notFound(sub string) Result { return Result{Status: StatusNotFound, Substatus: sub} }

// fill copies the address and its enrichment from a verifier result.
func fill(a *Result, r verify.Result, catchAll bool) {
	email := r.Email
	a.Email = &email
	if r.MXHost != nil {
		mx := *r.MXHost
		a.MXRecord = &mx
	}
	if r.MXHost != nil || r.Provider != nil {
		prov := providerName(r.Provider)
		a.EmailProvider = &prov
	}
	a.IsCatchAll = &catchAll
	role, free, disp := r.IsRole, r.IsFree, r.IsDisposable
	a.IsRole, a.IsFree, a.IsDisposable = &role, &free, &disp
}

// providerName maps the verifier's provider to google, microsoft or other.
func providerName(p *string) string {
	if p == nil {
		return "other"
	}
	switch strings.ToLower(*p) {
	case "google":
		return "google"
	case "microsoft":
		return "microsoft"
	}
	return "other"
}
