package finder

import (
	"sort"
)

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
	if d.prime || d.primeForms {
		return d.primeSends()
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

// primeSends is a primed round: the scouts' prior candidates (prime), or
// every open person's learned forms (primeForms).
func (d *domain) primeSends() []send {
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
