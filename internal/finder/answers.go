package finder

import (
	"slices"

	"github.com/bulkd/bulkd/internal/verify"
)

// absorb applies a round's results to the domain and returns the patterns
// to store.
func (d *domain) absorb(sends []send, res []verify.Result, idx []int) []learnt {
	var t roundTally
	for _, i := range idx {
		if res[i].Reason == verify.ReasonGreylisted {
			d.greylisted = true
		}
		if res[i].Reason == verify.ReasonRejected {
			d.policy = true
		}
	}
	for _, i := range idx {
		d.absorbOne(sends[i], res[i], &res[i], &t)
	}
	d.decideRound(&t)
	return t.learned
}

// roundTally is what one round's answers of a domain add up to.
type roundTally struct {
	learned                   []learnt
	catchAll, noMail, unknown *verify.Result
	verified, refused         int
}

// absorbOne records the verifier's answer r (rp: the same in the round's
// results) to the send s on its person, and tallies it for the domain.
func (d *domain) absorbOne(s send, r verify.Result, rp *verify.Result, t *roundTally) {
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
				t.learned = append(t.learned, d.found(p, r, s.c)...)
			} else {
				p.noteUnsure(r)
			}
		}
		return
	}
	if p.done {
		return
	}
	p.noteUnsure(r)
	switch r.Reason {
	case verify.ReasonAccepted:
		t.verified++
		t.learned = append(t.learned, d.found(p, r, s.c)...)
	case verify.ReasonDisposable:
		if r.IsCatchAll {
			t.catchAll = rp
		} else {
			t.verified++
			t.learned = append(t.learned, d.found(p, r, s.c)...)
		}
	case verify.ReasonCatchAll:
		t.catchAll = rp
	case verify.ReasonMailboxNotFound, verify.ReasonMailboxDisabled, verify.ReasonRejected, verify.ReasonInvalidSyntax:
		t.refused++
	case verify.ReasonMailboxFull:
		// The mailbox exists but cannot take mail: the person is
		// not found, and the other candidates are not theirs.
		a := notFound(SubUnknown)
		a.Temporary, a.RetryAfter = r.Temporary, r.RetryAfter
		p.answer(a)
	case verify.ReasonNoSuchDomain, verify.ReasonNullMX, verify.ReasonNoMailServer:
		t.noMail = rp
	default: // unknown: greylisted, dns_error, connection_failed, timeout, ...
		if t.unknown == nil || r.Reason == verify.ReasonGreylisted && t.unknown.Reason != verify.ReasonGreylisted {
			t.unknown = rp
		}
	}
}

// decideRound applies to the domain what its round's answers say: no
// mail server or catch-all stops it, an unknown answer stops it for now
// (priming greylisted domains), and refusals may discredit its pattern.
func (d *domain) decideRound(t *roundTally) {
	switch {
	case t.noMail != nil:
		d.stopAll(notFound(t.noMail.Reason))
	case t.catchAll != nil:
		for _, p := range d.people {
			if !p.done {
				p.answer(d.catchAllAnswer(p, t.catchAll))
			}
		}
		d.stopped = true
	case t.unknown != nil:
		a := notFound(SubUnknown)
		a.Temporary, a.RetryAfter = t.unknown.Temporary, t.unknown.RetryAfter
		d.stopAll(a)
		switch {
		case t.unknown.Reason != verify.ReasonGreylisted:
		case d.pattern == "" && !d.primed:
			d.prime, d.primed = true, true
		case d.pattern != "" && !d.primedForms:
			d.primeForms, d.primedForms = true, true
		}
	case d.fromStore && !d.distrust && t.verified == 0 && t.refused >= distrustAfter:
		// Nobody of this domain has the stored pattern's address: it may
		// be stale. The call goes on as if no pattern were known.
		d.pattern, d.fromStore, d.distrust = "", false, true
	case d.provisional() && t.refused >= max(distrustAfter, 2*int(d.counts[d.pattern])):
		// The pattern was taught by one or two addresses of this call
		// (this round's included) and at least twice as many people of
		// the round do not have it: those
		// addresses may be exceptions (or other people's mailboxes). The
		// call searches the priors again without it; their owners are
		// rechecked once a pattern with more evidence is learned.
		delete(d.counts, d.pattern)
		d.pattern = ""
	}
	if t.verified > 0 {
		d.fromStore = false
		if p, ok := best(d.counts); ok && !d.stopped {
			d.pattern = p
		}
	}
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
