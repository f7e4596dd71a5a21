package finder

import (
	"slices"
	"strings"
	"sync"

	"github.com/bulkd/bulkd/internal/verify"
)

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
