package finder

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/verify"
)

// Shapes: what a verified address tells about its domain's pattern when
// the person's name is not known (a verification job has addresses, not
// names). A local part is read as words of letters between separators: a
// word of one letter is an initial (i), a longer one a name (w). Only the
// structure is evidence, never which name is which: john.smith@ says
// "w.w", which {first}.{last} and {last}.{first} both write; jsmith@ says
// "joined", which {f}{last}, {first}, {first}{last}, ... all write.
//
//	shape    example       patterns that write it
//	w.w      john.smith    {first}.{last} {last}.{first}
//	i.w      j.smith       {f}.{last}
//	w.i      john.s        {first}.{l}
//	w_w      john_smith    {first}_{last} {last}_{first}
//	i_w      j_smith       {f}_{last}
//	w-w      john-smith    {first}-{last}
//	i-w      j-smith       {f}-{last}
//	joined   jsmith, john  {f}{last} {first} {first}{last} {first}{l} {last}{f} {last} {last}{first} {f}{l}
//
// A local part with digits, other characters, two or more separators, or
// only initials (j.s) has no shape and teaches nothing. Shapes are counted
// per domain in the pattern store (field "shape:<shape>" of the domain's
// hash); they never make a pattern "learned" (see favouredShape).

// shapeField prefixes a shape's field in a domain's pattern counts.
const shapeField = "shape:"

// patternShapes maps every known pattern to its shape.
var patternShapes = func() map[string]string {
	m := make(map[string]string, len(priors))
	for _, p := range priors {
		// Render with names long enough to be words and read it back.
		m[p.pattern], _ = rawShape(render(p.pattern, pair{first: "first", last: "last"}))
	}
	return m
}()

// knownShapes are the shapes some known pattern writes.
var knownShapes = func() map[string]bool {
	m := map[string]bool{}
	for _, s := range patternShapes {
		m[s] = true
	}
	return m
}()

// shapeOf returns the shape of a local part (see above); ok is false when
// it has none.
func shapeOf(local string) (string, bool) {
	s, ok := rawShape(local)
	if !ok || !knownShapes[s] {
		return "", false // i.i and the like: no known pattern writes it
	}
	return s, true
}

// rawShape reads a local part's structure, whether or not a known pattern
// writes it.
func rawShape(local string) (string, bool) {
	if local == "" || len(local) > maxLocal {
		return "", false
	}
	sep, at := byte(0), -1
	for i := 0; i < len(local); i++ {
		c := local[i]
		switch {
		case c >= 'a' && c <= 'z':
		case c == '.' || c == '_' || c == '-':
			if sep != 0 {
				return "", false // two separators: compound names, no single reading
			}
			sep, at = c, i
		default:
			return "", false
		}
	}
	if sep == 0 {
		return "joined", true
	}
	a, b := local[:at], local[at+1:]
	if a == "" || b == "" {
		return "", false
	}
	word := func(s string) string {
		if len(s) == 1 {
			return "i"
		}
		return "w"
	}
	return word(a) + string(sep) + word(b), true
}

// Evidence needed before a shape reorders the priors: at least
// minShapeAddresses addresses of the shape (minJoinedAddresses for joined:
// a generic mailbox the role list does not know, office@ or hello@, is
// joined too), and at least shapeMargin times the addresses of any other
// shape.
const (
	minShapeAddresses  = 2
	minJoinedAddresses = 3
	shapeMargin        = 2
	// shapeBoost multiplies the prior weight of the favoured shape's
	// patterns: enough to put every candidate of theirs (the rarest prior,
	// 0.002, on a form weighing 0.2 scores 4) before every other pattern's
	// (at most 0.40): the shape's patterns are tried first, in prior order.
	shapeBoost = 10_000
)

// favouredShape returns the shape the domain's counts favour, "" when
// there is no such evidence. A favoured shape only reorders the priors on
// a domain whose pattern is not known (its patterns are tried first); it
// does not make the domain's pattern known: a person's first verified
// address teaches the pattern, by name, as always.
func favouredShape(counts map[string]int64) string {
	top, best, second := "", int64(0), int64(0)
	for k, c := range counts {
		s, ok := strings.CutPrefix(k, shapeField)
		if !ok || c <= 0 {
			continue
		}
		switch {
		case c > best || c == best && s < top:
			if top != "" {
				second = max(second, best)
			}
			top, best = s, c
		default:
			second = max(second, c)
		}
	}
	if best < minShapeAddresses || best < shapeMargin*second || top == "joined" && best < minJoinedAddresses {
		return ""
	}
	return top
}

// ShapeAddr is one verified address's shape.
type ShapeAddr struct {
	Domain, Shape, Local string
}

// ShapeLearner is implemented by pattern stores that keep shapes
// (RedisPatterns and the in-process store). An address is counted once
// however often it is verified: evidence is distinct mailboxes, not how
// many times a customer re-checks one list.
type ShapeLearner interface {
	LearnShapes(ctx context.Context, addrs []ShapeAddr) error
}

// VerificationTeacher feeds the shapes of a verification job's deliverable
// addresses to a pattern store, for lookups on the same domains later. It
// counts only what proves a mailbox on a domain that is not catch-all:
// deliverable/accepted (so the catch-all probe was refused), and not a
// role, free-provider or disposable address (their local parts are not a
// company's pattern). Everything else (catch_all, disposable, risky,
// unknown, undeliverable) teaches nothing.
type VerificationTeacher struct {
	Store ShapeLearner
	// Timeout bounds the store writes of one batch (default 2 s); a failed
	// write is dropped: learning is best effort.
	Timeout time.Duration
}

// Teach implements the verification family's Teacher.
func (t *VerificationTeacher) Teach(ctx context.Context, res []verify.Result) {
	addrs := ShapesOf(res)
	if len(addrs) == 0 || t.Store == nil {
		return
	}
	d := t.Timeout
	if d <= 0 {
		d = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	defer cancel()
	_ = t.Store.LearnShapes(ctx, addrs)
}

// ShapesOf returns the addresses of a batch of verifier results that teach
// a shape (see VerificationTeacher), each address once, in order.
func ShapesOf(res []verify.Result) []ShapeAddr {
	seen := map[string]bool{}
	var out []ShapeAddr
	for _, r := range res {
		if r.Status != verify.StatusDeliverable || r.Reason != verify.ReasonAccepted ||
			r.IsCatchAll || r.IsRole || r.IsFree || r.IsDisposable {
			continue
		}
		at := strings.LastIndexByte(r.Email, '@')
		if at <= 0 {
			continue
		}
		local, dom := strings.ToLower(r.Email[:at]), strings.ToLower(r.Email[at+1:])
		s, ok := shapeOf(local)
		if !ok || dom == "" || seen[local+"@"+dom] {
			continue
		}
		seen[local+"@"+dom] = true
		out = append(out, ShapeAddr{Domain: dom, Shape: s, Local: local})
	}
	return out
}

// SeenKey is the Redis key of the local parts a domain's shapes were
// counted from (a HyperLogLog: PFADD tells a new one from one counted
// before, in a few bytes per address while small, at most 12 KB).
func (s *RedisPatterns) SeenKey(domain string) string { return "bulkd:finder:seen:" + domain }

// LearnShapes implements ShapeLearner in two pipelined round trips: PFADD
// of every address to its domain's seen set, then HINCRBY of the shape of
// each address the set did not have; both keys' expiry renewed.
func (s *RedisPatterns) LearnShapes(ctx context.Context, addrs []ShapeAddr) error {
	if len(addrs) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline() // keys of several domains: no MULTI (cluster slots)
	adds := make([]*redis.IntCmd, len(addrs))
	doms := map[string]bool{}
	for i, a := range addrs {
		adds[i] = pipe.PFAdd(ctx, s.SeenKey(a.Domain), a.Local)
		if !doms[a.Domain] {
			doms[a.Domain] = true
			pipe.Expire(ctx, s.SeenKey(a.Domain), s.ttl)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	type key struct{ dom, shape string }
	inc := map[key]int64{}
	var order []key
	for i, a := range addrs {
		if adds[i].Val() != 1 {
			continue // counted before (or, rarely, an estimate that did not move)
		}
		k := key{a.Domain, a.Shape}
		if inc[k] == 0 {
			order = append(order, k)
		}
		inc[k]++
	}
	if len(order) == 0 {
		return nil
	}
	pipe = s.rdb.Pipeline()
	for _, k := range order {
		pipe.HIncrBy(ctx, s.Key(k.dom), shapeField+k.shape, inc[k])
		pipe.Expire(ctx, s.Key(k.dom), s.ttl)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// memSeenPerDomain bounds the local parts the in-process store remembers
// per domain; past it the domain's shapes are no longer counted (its
// evidence is plentiful by then).
const memSeenPerDomain = 1000

// LearnShapes implements ShapeLearner.
func (s *memPatterns) LearnShapes(_ context.Context, addrs []ShapeAddr) error {
	for _, a := range addrs {
		s.mu.Lock()
		if s.seen == nil {
			s.seen = map[string]map[string]bool{}
		}
		seen := s.seen[a.Domain]
		if seen == nil {
			if len(s.seen) >= memDomains {
				clear(s.seen)
			}
			seen = map[string]bool{}
			s.seen[a.Domain] = seen
		}
		fresh := !seen[a.Local] && len(seen) < memSeenPerDomain
		if fresh {
			seen[a.Local] = true
		}
		s.mu.Unlock()
		if fresh {
			s.add(a.Domain, shapeField+a.Shape, 1)
		}
	}
	return nil
}
