package verify

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/bulkd/bulkd/internal/egress"
)

// session runs one SMTP session to h, taking transactions from its queue
// until the queue is empty or the session's RCPT budget is spent. Its
// politeness slot is taken for the server address it dials (and the
// host's provider): when an address cannot be dialled, the slot is given
// back and the next address gets its own.
//
// The session goes through egress e.
func (r *run) session(h *hostQ, e int) {
	defer r.wg.Done()
	defer func() {
		r.mu.Lock()
		h.sessions--
		h.eg[e].sessions--
		r.spawn(h)
		r.mu.Unlock()
	}()
	ips, reason := r.addrs(h)
	if reason != "" {
		r.mu.Lock()
		r.markDown(h, reason, 0)
		r.mu.Unlock()
		return
	}
	if r.idle(h) {
		return
	}
	// The host's addresses this egress can reach (at most maxIPsPerHost),
	// starting at a different one for each session: a name with several
	// servers spreads its sessions over them, each within its own cap.
	ips = r.dialable(ips, e)
	if len(ips) == 0 {
		// The egress cannot reach any of the host's addresses (their
		// family): another egress may.
		if r.ctx.Err() == nil {
			r.mu.Lock()
			r.setAside(h, e, ReasonConnectionFailed, 0, 0)
			r.mu.Unlock()
		}
		return
	}
	r.mu.Lock()
	first := h.next % len(ips)
	h.next++
	r.mu.Unlock()
	failed := 0
	for i := range ips {
		switch r.serve(h, e, ips[(first+i)%len(ips)]) {
		case served:
			return
		case unreachable:
			failed++
			r.mu.Lock()
			if len(h.ips) > 1 {
				// Later sessions of this call start at the others.
				h.ips = slices.DeleteFunc(slices.Clone(h.ips), func(a netip.Addr) bool { return a == ips[(first+i)%len(ips)] })
			}
			r.mu.Unlock()
		}
	}
	if failed == len(ips) && r.ctx.Err() == nil {
		r.mu.Lock()
		r.markDown(h, ReasonConnectionFailed, 0)
		r.mu.Unlock()
	}
}

// What serve did with an address.
type outcome int

const (
	served      outcome = iota // the session ran (or ended the host's work: back-off, ctx, nothing left)
	unreachable                // the address could not be dialled
	atCap                      // the address has its cap of this call's sessions; spawn starts the host again when one ends
)

// serve runs the session on ip through egress e, and says what became
// of it.
func (r *run) serve(h *hostQ, e int, ip netip.Addr) outcome {
	ctx := r.ctx
	eg := &r.v.egs[e]
	srv := serverOf(eg.Name, ip, h.rule)
	srv.egress = e
	ie := ipEgress{ip, e}
	r.mu.Lock()
	if h.down != "" || h.eg[e].aside != "" || (len(h.queue) == 0 && len(r.peers(h, srv)) == 0) {
		r.mu.Unlock()
		return served // nothing left
	}
	if r.ipActive[ie] >= r.ipCap(h) {
		r.mu.Unlock()
		return atCap
	}
	if r.ipActive == nil {
		r.ipActive = map[ipEgress]int{}
	}
	r.ipActive[ie]++
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.ipActive[ie]--
		for _, p := range r.byIP[ip] {
			if p != h {
				r.spawn(p)
			}
		}
		r.mu.Unlock()
	}()
	ic, release, ok := r.serverSlot(h, e, srv)
	if !ok {
		return served
	}
	parked := false // the slot went to the pool with the connection
	defer func() {
		if !parked {
			release()
		}
	}()
	if ic != nil {
		defer func() {
			if !parked {
				_ = ic.c.nc.Close()
			}
		}()
	}
	select {
	case r.v.sem <- struct{}{}:
	case <-ctx.Done():
		return served
	}
	defer func() { <-r.v.sem }()
	r.mu.Lock()
	idle := h.down != "" || h.eg[e].aside != "" || (len(h.queue) == 0 && len(r.peers(h, srv)) == 0)
	r.mu.Unlock()
	if idle {
		if ic != nil {
			parked = r.v.pool.park(srv.key, ic) // not needed after all: back it goes
		}
		return served
	}
	if ic != nil {
		parked = r.converse(h, srv, nil, time.Time{}, ic, release)
		return served
	}
	o, p := r.dialAndConverse(h, e, srv, eg, ip, release)
	parked = p
	return o
}

// serverSlot takes a session slot for srv (waiting while the server is
// paused and the call has the time). ok false: the host's egress e is set
// aside (rate limited or blocked) or ctx ended.
func (r *run) serverSlot(h *hostQ, e int, srv server) (ic *idleConn, release func(), ok bool) {
	ctx := r.ctx
	r.sharedLimit(h, srv)
	ic, release, backoff, err := r.slot(h, srv)
	for err == nil && release == nil && !r.v.isBlocked(ctx, srv) && r.waitThrottle(srv) {
		// The server is paused after throttling (throttle.go) and the
		// call has the time: wait for it rather than set it aside.
		ic, release, backoff, err = r.slot(h, srv)
	}
	if err != nil {
		var we *WaitError
		if errors.As(err, &we) {
			r.mu.Lock()
			r.setAside(h, e, ReasonRateLimited, we.RetryAfter, 0)
			r.mu.Unlock()
		}
		return nil, nil, false // ctx ended: what is left stays unanswered
	}
	if release == nil {
		reason := ReasonRateLimited
		if r.v.isBlocked(ctx, srv) {
			reason = ReasonBlocked
		}
		r.mu.Lock()
		r.setAside(h, e, reason, backoff, 0)
		r.mu.Unlock()
		return nil, nil, false
	}
	return ic, release, true
}

// dialAndConverse opens a new connection to ip through eg and runs the
// session on it. parked: the slot went to the pool with the connection.
func (r *run) dialAndConverse(h *hostQ, e int, srv server, eg *egress.Egress, ip netip.Addr, release func()) (o outcome, parked bool) {
	ctx := r.ctx
	cfg := &r.v.cfg
	start := time.Now()
	nc, err := eg.Dial(ctx, ip, cfg.SMTPPort, cfg.DialTimeout, cfg.Policy)
	if err != nil {
		if egress.IsProxyFailure(err) && ctx.Err() == nil {
			// The egress failed, not the server: another egress may do.
			r.mu.Lock()
			r.setAside(h, e, ReasonConnectionFailed, 0, 0)
			r.mu.Unlock()
			r.v.warnProxy(eg, err)
			return served, false
		}
		if ctx.Err() != nil {
			return served, false
		}
		return unreachable, false
	}
	timeout := cfg.CommandTimeout
	if h.rule.Timeout > 0 {
		timeout = h.rule.Timeout
	}
	return served, r.converse(h, srv, newSMTPConn(nc, timeout, start.Add(cfg.SessionTimeout)), start, nil, release)
}

// sharedLimit reads, once per host and call, the limits learned for its
// server (or provider): by this process in earlier calls, and the RCPT
// limit another process learned (LimitSharer), so this call's sessions
// start within them.
func (r *run) sharedLimit(h *hostQ, srv server) {
	r.mu.Lock()
	if h.sharedRead {
		r.mu.Unlock()
		return
	}
	h.sharedRead = true
	now := time.Now()
	if n, ok := r.v.rcptLimits.get(srv.rcptKey, now); ok && (h.rcptLimit == 0 || n < h.rcptLimit) {
		h.rcptLimit = n
	}
	if n, ok := r.v.sessionLimits.get(srv.key, now); ok && (h.sessionLimit == 0 || n < h.sessionLimit) {
		h.sessionLimit = n
	}
	if n, ok := r.v.depths.get(srv.rcptKey, now); ok && (h.depth == 0 || n < h.depth) {
		h.depth = n
	}
	if _, ok := r.v.paced.get(srv.rcptKey, now); ok {
		h.paced = true
	}
	r.mu.Unlock()
	r.sharedDepth(h, srv)
	ls, ok := r.v.limiter.(LimitSharer)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, time.Second)
	n, err := ls.SharedRcptLimit(ctx, srv.rcptKey)
	cancel()
	if err != nil || n <= 0 {
		return
	}
	r.mu.Lock()
	if h.rcptLimit == 0 || n < h.rcptLimit {
		h.rcptLimit = n
		r.v.rcptLimits.put(srv.rcptKey, n, time.Now().Add(limitTTL))
	}
	r.mu.Unlock()
}

func (r *run) idle(h *hostQ) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(h.queue) == 0 || h.down != ""
}

// addrs resolves h once per call (the resolver caches across calls).
func (r *run) addrs(h *hostQ) ([]netip.Addr, string) {
	r.mu.Lock()
	if h.resolved {
		ips := h.ips
		r.mu.Unlock()
		return ips, ""
	}
	r.mu.Unlock()
	var ips []netip.Addr
	if strings.HasPrefix(h.name, "[") {
		a, err := Normalize("x@" + h.name)
		if err != nil {
			return nil, ReasonConnectionFailed
		}
		ips = []netip.Addr{a.IP}
	} else {
		var err error
		ips, err = r.v.resolver.hostAddrs(r.ctx, h.name)
		if err != nil {
			return nil, ReasonDNSError
		}
		if len(ips) == 0 {
			return nil, ReasonNoMailServer
		}
	}
	// The outbound policy: every address of the host is checked and only
	// the allowed ones are kept; the sessions dial only these (converse),
	// never the name, so a refused address is never reached. A host left
	// with none counts as a host without a usable address. Keeping the
	// public addresses of a mixed host matters for money: a resolver that
	// adds NAT64 (64:ff9b::) addresses to every IPv4-only name, or one stray
	// internal record, must not turn real mail servers into a charged
	// undeliverable verdict.
	allowed := ips[:0:0]
	for _, ip := range ips {
		if r.v.cfg.Policy.Allowed(ip) {
			allowed = append(allowed, ip)
		}
	}
	if len(allowed) == 0 {
		return nil, ReasonNoMailServer
	}
	ips = allowed
	r.mu.Lock()
	if !h.resolved {
		if r.byIP == nil {
			r.byIP = map[netip.Addr][]*hostQ{}
		}
		for _, ip := range ips[:min(len(ips), maxIPsPerHost)] {
			r.byIP[ip] = append(r.byIP[ip], h)
		}
	}
	h.ips, h.resolved = ips, true
	r.mu.Unlock()
	return ips, ""
}

// isBlocked reports whether the back-off of srv (its address or its
// provider) comes from a block: seen by this process, or by another one
// through the limiter (LimitSharer).
func (v *Verifier) isBlocked(ctx context.Context, srv server) bool {
	keys := []string{srv.key}
	if srv.provKey != "" {
		keys = append(keys, srv.provKey)
	}
	for _, k := range keys {
		if b, _ := v.blocks.get(k, time.Now()); b {
			return true
		}
	}
	ls, ok := v.limiter.(LimitSharer)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	for _, k := range keys {
		if b, err := ls.SharedBlock(ctx, k); err == nil && b {
			return true
		}
	}
	return false
}

// acquire takes srv's politeness slot: per server address (cap sessions)
// and, when h's rule names a provider, over all the provider's servers.
func (v *Verifier) acquire(ctx context.Context, h *hostQ, srv server, cap int) (func(), time.Duration, error) {
	if sl, ok := v.limiter.(SlotLimiter); ok {
		return sl.AcquireSlot(ctx, Slot{Server: srv.key, Cap: cap, Provider: srv.provKey, ProviderCap: h.rule.ProviderSessions})
	}
	if b, ok := v.limiter.(BackoffAwareLimiter); ok {
		return b.AcquireOrBackoff(ctx, srv.key)
	}
	rel, err := v.limiter.Acquire(ctx, srv.key)
	return rel, 0, err
}
