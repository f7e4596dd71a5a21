package verify

import (
	"context"
	"hash/fnv"
	"net/netip"
	"sync"
	"time"

	"github.com/bulkd/bulkd/internal/verify/rules"
)

// item is one distinct normalized address of a call.
type item struct {
	addr Address
	idxs []int
	dom  *domainState

	done       bool
	reason     string
	code       int
	catchAll   bool
	temporary  bool
	retryAfter time.Duration
	mxHost     string

	drops       int  // sessions lost before any RCPT of theirs was answered
	dropsAll    int  // all sessions lost before its answer
	tooMany     int  // "too many recipients" answers as a session's first RCPT
	tooManyAll  int  // all "too many recipients" answers
	greyRetried bool // asked again after greylisting
	throttles   int  // throttling replies to it (run.throttled)

	// timeouts are the pipelined groups it was in that timed out (slow.go);
	// emitted the Result handed to VerifyEach's each (emit.go).
	timeouts int
	emitted  *Result
}

// domainState is one domain of a call.
type domainState struct {
	name       string
	literal    netip.Addr
	disposable bool
	items      []*item
	mx         []string // host names (or "[ip]") in the order to try

	// verdict learned in this call: 0 unknown, 1 catch-all, 2 not.
	verdict int
	probe   string // the catch-all probe's local part, stable per domain
	// fail is the best reason seen among MX hosts that could not be used,
	// given to the addresses when no MX is left; failRetry its RetryAfter.
	fail      string
	failRetry time.Duration
	failCode  int // the reply code that made the host unusable (a block's 554), 0 if none
	lastHost  string
}

// failRank orders the reasons of unusable hosts: the most informative
// (and most hopeful) one wins when every MX failed.
var failRank = map[string]int{ReasonNoMailServer: 1, ReasonDNSError: 2, ReasonSMTPError: 3,
	ReasonConnectionFailed: 4, ReasonTimeout: 5, ReasonRateLimited: 6, ReasonBlocked: 7}

func (d *domainState) noteFail(host, reason string, retry time.Duration, code int) {
	if failRank[reason] >= failRank[d.fail] {
		d.fail = reason
		d.failRetry = max(d.failRetry, retry)
		d.failCode = code
	}
	d.lastHost = host
}

// job is one transaction's worth of addresses of one domain, queued on the
// host it is to be tried on (mx index mxi of its domain).
type job struct {
	dom   *domainState
	items []*item
	mxi   int
}

// host is the MX name the job is queued on (reported as its mx_host, also
// when a session to another name of the same server carried it).
func (j *job) host() string { return j.dom.mx[j.mxi] }

// hostQ is the queue of work for one MX host in a call.
type hostQ struct {
	name     string
	queue    []*job
	pending  int // RCPTs queued, probes included
	sessions int
	down     string // reason the host is unusable in this call ("" usable)
	retry    time.Duration
	downCode int // the reply code that made it down, when one did (a block)
	fails    int // sessions that failed before their first transaction
	// decided counts this call's RCPTs to the host answered accepted or
	// refused for the address (deferralIsThrottle).
	decided int
	// throttles counts the sessions refused with throttling before any
	// transaction (run.throttled).
	throttles int
	// rcptLimit is the RCPTs per session the host accepted before it
	// answered "too many recipients" (0: none seen); later sessions stay
	// within it instead of collecting 452s.
	rcptLimit int
	// sessionLimit is the concurrent sessions the host accepted before it
	// answered a new one 421 (0: none seen).
	sessionLimit int
	// depth is the most RCPTs one pipelined group to the host carries (0:
	// no limit): learned from a server that answers slowly (slow.go), so
	// its answers come a few at a time and no group outwaits its reply wait.
	depth int
	// paced: a group to the host's server was answered, so its pace is
	// known (this call, or an earlier one: Verifier.paced); until then a
	// session's first group is at most paceGroup RCPTs (slow.go).
	paced bool
	// provenRcpts is the most RCPTs one session to the host had answered
	// in this call without a "too many recipients".
	provenRcpts int
	ips         []netip.Addr
	resolved    bool
	sharedRead  bool // the limit shared by other processes was read
	next        int  // sessions started: the next one starts at address next mod len(ips)
	// rule is the rules table's entry for the host's name (zero: none).
	rule rules.Rule
	// eg is the host's state per egress (Verifier.egs, same order).
	eg []egState
}

// egState is one egress's use of a host in a call.
type egState struct {
	sessions int
	// aside is why the egress is not used for this host any more in this
	// call ("" usable): a block, a back-off, a broken proxy. When every
	// egress is set aside the host is down (setAside).
	aside string
	retry time.Duration
	code  int
}

// ipEgress keys this call's sessions per server address and egress: a
// server counts sessions by client address.
type ipEgress struct {
	ip netip.Addr
	e  int
}

// run is the state of one Verify call.
type run struct {
	v    *Verifier
	ctx  context.Context
	mu   sync.Mutex
	hold bool // no session starts yet (see Verify)
	wg   sync.WaitGroup

	hosts map[string]*hostQ
	rules *rules.Table // the table in effect when the call began
	// byIP are the hosts by the addresses their sessions may dial (at
	// most maxIPsPerHost), once resolved: names sharing a server share its
	// sessions.
	byIP map[netip.Addr][]*hostQ
	// ipActive counts this call's sessions per server address, from
	// before they ask the limiter until they end: a host whose server
	// already has its cap of this call's sessions starts none (they could
	// only wait for the limiter, each taking a slot and a rate token to
	// find its work carried by the others); it is woken when one ends.
	ipActive map[ipEgress]int
	// em hands answers to VerifyEach's caller as they come (emit.go); nil
	// for Verify.
	em *emitter
}

// startDomain resolves a domain and queues its addresses.
func (r *run) startDomain(d *domainState) {
	if d.literal.IsValid() {
		if !r.v.cfg.Policy.Allowed(d.literal) {
			// An address the outbound policy refuses (user@[127.0.0.1]):
			// no session, no wait, the same answer whatever listens there.
			r.mu.Lock()
			r.finish(d.items, ReasonNoMailServer, "", 0)
			r.mu.Unlock()
			return
		}
		d.mx = []string{d.name}
	} else {
		mv := r.v.resolver.lookupMX(r.ctx, d.name)
		if mv.reason != "" {
			if r.ctx.Err() != nil {
				return // unanswered: timeout
			}
			r.mu.Lock()
			r.finish(d.items, mv.reason, "", 0)
			r.mu.Unlock()
			return
		}
		for _, h := range mv.hosts {
			d.mx = append(d.mx, h.name)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	per := r.v.cfg.MaxRcptsPerSession - 1
	for i := 0; i < len(d.items); i += per {
		r.route(&job{dom: d, items: d.items[i:min(i+per, len(d.items))]})
	}
}

// release lets sessions start, and starts them for every queued host.
func (r *run) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.hold {
		return
	}
	r.hold = false
	for _, h := range r.hosts {
		r.spawn(h)
	}
}

// finish answers items. Caller holds r.mu.
func (r *run) finish(its []*item, reason, host string, code int) {
	for _, it := range its {
		if it.done {
			continue
		}
		it.done, it.reason, it.code = true, reason, code
		r.ready(it)
		if host != "" {
			it.mxHost = host
		}
		switch reason {
		// A timeout is provisional too: a server that did not answer in
		// time may be slow rather than stuck, and the retry pass asks
		// again (issue 25: a slow Postfix's addresses were final unknowns).
		case ReasonGreylisted, ReasonTemporaryFailure, ReasonRateLimited, ReasonBlocked, ReasonTimeout:
			it.temporary = true
		}
	}
}

func (r *run) host(name string) *hostQ {
	h := r.hosts[name]
	if h == nil {
		h = &hostQ{name: name, eg: make([]egState, len(r.v.egs))}
		h.rule, _ = r.rules.Match(name)
		r.hosts[name] = h
	}
	return h
}

// route queues j on its current MX host, moving down the MX list past
// hosts found unusable in this call, or answers it when none is left.
// Caller holds r.mu.
func (r *run) route(j *job) {
	live := j.items[:0:0]
	for _, it := range j.items {
		if !it.done {
			live = append(live, it)
		}
	}
	j.items = live
	if len(j.items) == 0 {
		return
	}
	for ; j.mxi < len(j.dom.mx); j.mxi++ {
		h := r.host(j.dom.mx[j.mxi])
		if h.down == "" {
			h.queue = append(h.queue, j)
			h.pending += len(j.items) + 1
			r.spawn(h)
			return
		}
		j.dom.noteFail(h.name, h.down, h.retry, h.downCode)
		if h.down == ReasonTimeout {
			break // a tarpit is a final answer: no other MX is tried
		}
	}
	reason := j.dom.fail
	if reason == "" {
		reason = ReasonConnectionFailed
	}
	r.finish(j.items, reason, j.dom.lastHost, j.dom.failCode)
	for _, it := range j.items {
		it.retryAfter = j.dom.failRetry
	}
}

// markDown makes h unusable for the rest of the call and moves its queue
// on. Caller holds r.mu.
func (r *run) markDown(h *hostQ, reason string, retry time.Duration) {
	if h.down == "" || failRank[reason] > failRank[h.down] {
		h.down, h.retry = reason, retry
	}
	q := h.queue
	h.queue, h.pending = nil, 0
	for _, j := range q {
		r.route(j)
	}
}

// spawn starts sessions for h: enough to carry its queue at
// MaxRcptsPerSession each, at most the limiter's per-host cap.
// Caller holds r.mu.
func (r *run) spawn(h *hostQ) {
	if r.hold || h.down != "" || len(h.queue) == 0 || r.ctx.Err() != nil {
		return
	}
	per := r.budget(h)
	// The caps are per egress: a server counts sessions by client address.
	most := r.serverCap(h)
	if h.rule.ProviderSessions > 0 {
		most = min(most, h.rule.ProviderSessions)
	}
	if h.sessionLimit > 0 {
		most = min(most, h.sessionLimit)
	}
	if h.depth > 0 {
		// A slow server's sessions each carry one small group at a time
		// from the shared queue: its addresses are spread over as many
		// sessions as its caps allow, the only way to go faster at its pace.
		per = min(per, h.depth+1)
	}
	want := max((h.pending+per-1)/per, 1)
	for h.sessions < want {
		// -1 when every usable egress has its cap of sessions to h, or its
		// server has its cap of this call's sessions through it (woken by
		// serve when a session of that server ends).
		e := r.pickEgress(h, most)
		if e < 0 {
			return
		}
		h.sessions++
		h.eg[e].sessions++
		r.wg.Add(1)
		go r.session(h, e)
	}
}

// pickEgress returns the usable egress with the fewest of this call's
// sessions to h, below most each (and below the server's cap of the call's
// sessions through it), or -1. Ties go to the first egress from the one
// h's name hashes to, so that a call's hosts spread over the egresses
// rather than all starting on the first. Caller holds r.mu.
func (r *run) pickEgress(h *hostQ, most int) int {
	n := len(h.eg)
	start := 0
	if n > 1 {
		f := fnv.New32a()
		f.Write([]byte(h.name))
		start = int(f.Sum32() % uint32(n))
	}
	best := -1
	for k := range n {
		i := (start + k) % n
		s := &h.eg[i]
		if s.aside != "" || s.sessions >= most {
			continue
		}
		if h.resolved && r.allAtCap(h, i) {
			continue // woken by serve when a session of one of its servers ends
		}
		if best < 0 || s.sessions < h.eg[best].sessions {
			best = i
		}
	}
	return best
}

// setAside stops using egress e for h in this call, for reason (a block,
// a back-off of that egress, a proxy that failed). Sessions through the
// other egresses carry h's queue; when none is left h is down, with the
// most informative of the egresses' reasons and the soonest of their
// back-offs as RetryAfter. Caller holds r.mu.
func (r *run) setAside(h *hostQ, e int, reason string, retry time.Duration, code int) {
	s := &h.eg[e]
	if s.aside == "" || failRank[reason] > failRank[s.aside] {
		s.aside, s.retry, s.code = reason, retry, code
	}
	best := -1
	var soonest time.Duration
	for i := range h.eg {
		g := &h.eg[i]
		if g.aside == "" {
			r.spawn(h)
			return
		}
		if best < 0 || failRank[g.aside] > failRank[h.eg[best].aside] {
			best = i
		}
		if g.retry > 0 && (soonest == 0 || g.retry < soonest) {
			soonest = g.retry
		}
	}
	if h.down == "" {
		h.downCode = h.eg[best].code
	}
	r.markDown(h, h.eg[best].aside, soonest)
}

// serverCap is the sessions per server address of h's servers: its rule's,
// else the limiter's per-host cap.
func (r *run) serverCap(h *hostQ) int {
	if h.rule.Sessions > 0 {
		return h.rule.Sessions
	}
	return r.v.perHost
}

// allAtCap reports whether every address h's sessions through egress e
// may dial has its cap of this call's sessions through e. An egress that
// reaches none of h's addresses is not at its cap: its session sets it
// aside. Caller holds r.mu.
func (r *run) allAtCap(h *hostQ, e int) bool {
	ips := r.dialable(h.ips, e)
	for _, ip := range ips {
		if r.ipActive[ipEgress{ip, e}] < r.ipCap(h) {
			return false
		}
	}
	return len(ips) > 0
}

// dialable are the first maxIPsPerHost of ips that egress e can reach (a
// source address reaches only its own family).
func (r *run) dialable(ips []netip.Addr, e int) []netip.Addr {
	var out []netip.Addr
	for _, ip := range ips {
		if len(out) == maxIPsPerHost {
			break
		}
		if r.v.egs[e].Reaches(ip) {
			out = append(out, ip)
		}
	}
	return out
}

// ipCap is how many of this call's sessions h's server may have: its cap,
// or the fewer it answered 421 beyond. Caller holds r.mu.
func (r *run) ipCap(h *hostQ) int {
	if h.sessionLimit > 0 {
		return min(r.serverCap(h), h.sessionLimit)
	}
	return r.serverCap(h)
}

// slotCap is the cap of srv's limiter slot for a session of h: the
// server's cap, lowered by the session cap learned from a refusal
// (banner421) in this call or, read again at each acquisition, in any
// call of this process. The learned cap has to be the limiter's, not
// only this call's: the sessions a server counts are every call's.
func (r *run) slotCap(h *hostQ, srv server) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n, ok := r.v.sessionLimits.get(srv.key, time.Now()); ok && (h.sessionLimit == 0 || n < h.sessionLimit) {
		h.sessionLimit = n
	}
	return r.ipCap(h)
}

// budget is the RCPTs a session to h may send: the configured maximum,
// lowered by h's rule and by the limit learned. Caller holds r.mu.
func (r *run) budget(h *hostQ) int {
	n := r.v.cfg.MaxRcptsPerSession
	if h.rule.Rcpts > 0 {
		n = min(n, h.rule.Rcpts)
	}
	if h.rcptLimit > 0 {
		n = min(n, h.rcptLimit)
	}
	return n
}

// take pops the next transaction for a session with budget RCPTs left,
// splitting a job that does not fit. probe reports that the domain's
// catch-all verdict is unknown, so the transaction starts with a probe.
// Caller holds r.mu.
func (r *run) take(h *hostQ, budget int, fresh bool) (j *job, probe bool) {
	for len(h.queue) > 0 {
		j = h.queue[0]
		n := 0
		for _, it := range j.items {
			if !it.done {
				n++
			}
		}
		if n == 0 {
			h.queue = h.queue[1:]
			h.pending -= len(j.items) + 1
			continue
		}
		probe = r.needProbe(j.dom, h)
		p := 0
		if probe {
			p = 1
		}
		if len(j.items)+p <= budget {
			h.queue = h.queue[1:]
			h.pending -= len(j.items) + 1
			return j, probe
		}
		k := budget - p
		if k < 1 {
			if !fresh {
				return nil, false
			}
			k = 1 // a new session always makes progress
		}
		part := &job{dom: j.dom, items: j.items[:k:k], mxi: j.mxi}
		j.items = j.items[k:]
		h.pending -= k
		return part, probe
	}
	return nil, false
}

func (r *run) needProbe(d *domainState, h *hostQ) bool {
	if d.verdict != 0 {
		return false
	}
	if h.rule.NoProbe {
		// The rules table says this host refuses unknown recipients at
		// RCPT and never accepts everything: its 250 is trusted without
		// a probe (for this call; nothing is cached).
		d.verdict = 2
		return false
	}
	if ca, ok := r.v.catchAll.get(d.name, time.Now()); ok {
		d.verdict = 2
		if ca {
			d.verdict = 1
		}
		return false
	}
	return true
}
