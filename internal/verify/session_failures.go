package verify

import (
	"context"
	"errors"
	"time"

	"github.com/bulkd/bulkd/internal/egress"
)

// sessionFailed handles a session that broke before its first
// transaction: a timeout makes the host a tarpit; a connection closed
// before the banner makes it unreachable (next MX); closed later, the host
// gets one more session before it counts as broken.
func (r *run) sessionFailed(h *hostQ, err error, beforeBanner bool) {
	if r.ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case errors.Is(err, errTimeout):
		r.tarpit(h)
	case beforeBanner:
		r.markDown(h, ReasonConnectionFailed, 0)
	default:
		h.fails++
		if h.fails >= 2 {
			r.markDown(h, ReasonSMTPError, 0)
		}
	}
}

// tarpit answers everything queued on h as timeout (provisional: retried
// in the retry pass): a host that does not answer within its reply wait
// would hold every session as long.
// Caller holds r.mu.
func (r *run) tarpit(h *hostQ) {
	h.down = ReasonTimeout
	for _, j := range h.queue {
		r.finish(j.items, ReasonTimeout, h.name, 0)
	}
	h.queue, h.pending = nil, 0
}

// rateLimited handles a 421: the server is backed off for the session's
// egress (for every process sharing the limiter), and unanswered addresses
// go to another egress, or when none is left to the next MX or end
// rate_limited.
//
// A 421 is one server's answer: its address is backed off, not the
// provider's other servers.
func (r *run) rateLimited(h *hostQ, srv server, unanswered *job) {
	d := r.v.cfg.RateLimitBackoff
	_ = r.v.limiter.Backoff(context.WithoutCancel(r.ctx), srv.key, d)
	r.v.pool.flush(srv.key)
	r.mu.Lock()
	defer r.mu.Unlock()
	// The back-off is the egress's (srv.key names it): the host's other
	// egresses go on (setAside).
	r.setAside(h, srv.egress, ReasonRateLimited, d, 0)
	if unanswered != nil {
		r.route(unanswered)
	}
}

// banner421 handles a new session refused with 421, or with throttling
// words ("too many connections from <us>"). While other sessions of ours
// are open to the server's address, the refusal says how many it allows
// us: the server's session cap is lowered to that (for an hour, for every
// call of this process: the limiter's slot cap, so no call opens one
// beyond it) and the host's queue is left to the open sessions, with no
// back-off. Otherwise the server is rate limiting us: a throttling pause
// (throttling words) or a back-off (a bare 421).
//
// The sessions counted are every open one of ours to the server's address
// through this egress, whatever MX name led there: this call's, and the
// limiter's count over every call and process (SessionCounter), minus the
// refused one. Counting only this call's missed the usual case: two jobs
// at once, each with one session to a server allowing one (Postfix anvil's
// smtpd_client_connection_count_limit, Exim's smtp_accept_max_per_host);
// the second job's refusal was read as a rate limit, and after a 5 s pause
// it was refused again while the first job's session was still open.
func (r *run) banner421(h *hostQ, srv server, rep reply) {
	open := 0
	if sc, ok := r.v.limiter.(SessionCounter); ok {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), time.Second)
		n, err := sc.Holders(ctx, srv.key)
		cancel()
		if err == nil {
			open = int(n)
		}
	}
	r.mu.Lock()
	others := max(r.ipActive[ipEgress{srv.ip, srv.egress}], open) - 1
	if others > 0 {
		if h.sessionLimit == 0 || others < h.sessionLimit {
			h.sessionLimit = others
		}
		for _, p := range r.byIP[srv.ip] {
			if p.sessionLimit == 0 || others < p.sessionLimit {
				p.sessionLimit = others
			}
		}
		r.v.sessionLimits.put(srv.key, others, time.Now().Add(limitTTL))
		r.mu.Unlock()
		r.v.log.Info("smtp: the mail server refused a session beyond the ones open; its session cap is learned",
			"host", h.name, "server", srv.ip.String(), "provider", srv.provider, "egress", r.v.egs[srv.egress].Name,
			"code", rep.code, "reply", redactReply(rep.text), "cap", others)
		return
	}
	r.mu.Unlock()
	if isThrottle(rep, stageConnect) {
		r.throttled(h, srv, rep, "banner", nil)
		return
	}
	r.rateLimited(h, srv, nil)
}

// groupFailed hands the transactions of a group that were never processed
// to the failure that ended the session.
func (r *run) groupFailed(h *hostQ, s *sess, txs []tx, err error, limited bool) {
	for _, t := range txs {
		if limited {
			r.mu.Lock()
			r.route(t.j)
			r.mu.Unlock()
			continue
		}
		r.txFailed(h, s, t.j, err)
	}
}

// tooMany requeues addresses answered "too many recipients" for a new
// session (RFC 5321 4.5.3.1.10 says to send them in a later transaction;
// we use a new session because hosts count RCPTs per connection too) and
// marks this session as done once its group is read. The host's limit is
// learned from how many RCPTs this session got answered, so later sessions
// stay within it. An address that gets it as the first RCPT of two
// sessions is answered temporary_failure: the limit is not ours to work
// around.
func (r *run) tooMany(h *hostQ, s *sess, j *job, again []*item) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s.tooMany = true
	r.learnRcptLimit(h, s.srv, s.answered)
	var retry []*item
	for _, it := range again {
		it.tooManyAll++
		if s.answered == 0 {
			it.tooMany++
		}
		if it.tooMany >= 2 || it.tooManyAll >= maxTooMany {
			r.finish([]*item{it}, ReasonTemporaryFailure, j.host(), 452)
			it.retryAfter = 15 * time.Minute
			continue
		}
		retry = append(retry, it)
	}
	if len(retry) > 0 {
		r.route(&job{dom: j.dom, items: retry, mxi: j.mxi})
	}
}

// maxTooMany bounds the "too many recipients" answers one address may get
// in a call, whatever else the sessions achieved.
const maxTooMany = 5

// txFailed handles a transaction whose session broke: a timeout answers
// its addresses (and the host's queue) timeout; a lost connection sends the
// unanswered addresses to a new session.
//
// A server that closes the connection without a reply after the session's
// K-th RCPT (some count RCPTs per connection and hang up rather than answer
// 452) may be telling its limit, or may have dropped once for a reason of
// its own (a restart, a network blip, an RSET it did not like): this call's
// later sessions to the host send at most K (dropLimit), and the dropped
// addresses are not counted against: they go to a new session. K is
// learned for later calls and shared with other processes only when a
// session started after that drop drops after the same K (dropLimit).
// A drop before any RCPT of the session was answered says nothing about a
// limit: such drops count, and an address dropped so twice ends
// smtp_error. maxDrops bounds the sessions one address may lose in a call
// whatever the sessions achieved, so a server that drops every session
// costs a bounded number of sessions.
func (r *run) txFailed(h *hostQ, s *sess, j *job, err error) {
	if r.ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if errors.Is(err, errTimeout) {
		r.groupTimedOut(h, s, j)
		return
	}
	answered := 0
	stale := false
	if s != nil {
		answered = s.answered
		stale = s.reused && s.answered == s.answeredBefore
	}
	if answered > 0 && !stale {
		r.dropLimit(h, s.srv, answered, s.started)
	}
	var retry []*item
	for _, it := range j.items {
		if it.done {
			continue
		}
		it.dropsAll++
		if answered == 0 && !stale {
			it.drops++
		}
		if it.drops >= 2 || it.dropsAll >= maxDrops {
			r.finish([]*item{it}, ReasonSMTPError, j.host(), 0)
			continue
		}
		retry = append(retry, it)
	}
	if len(retry) > 0 {
		r.route(&job{dom: j.dom, items: retry, mxi: j.mxi})
	}
}

// maxDrops bounds the lost sessions one address may see in a call.
const maxDrops = 5

// dropLimit handles a session (started at started) that dropped after n
// answered RCPTs: this call's later sessions to h send at most n; the
// limit is learned (this process's later calls, and every process through
// the limiter) only when a session to the same server (srv.rcptKey: the
// provider's when known, else the address's) that started after an
// earlier drop (within limitTTL) dropped after the same n. One drop is not
// evidence enough to make every later session to a host smaller for an
// hour: a server restarting or one network blip would do that, and a
// restart drops every open session at once, often after the same number
// of pipelined RCPTs, hence the later start. Caller holds r.mu.
func (r *run) dropLimit(h *hostQ, srv server, n int, started time.Time) {
	now := time.Now()
	if d, ok := r.v.drops.get(srv.rcptKey, now); ok && d.k == n && started.After(d.at) {
		if h.rcptLimit == n {
			h.rcptLimit = 0 // this call's limit from the first drop: now learned for good
		}
		r.learnRcptLimit(h, srv, n)
		return
	}
	if d, ok := r.v.drops.get(srv.rcptKey, now); !ok || d.k != n {
		r.v.drops.put(srv.rcptKey, dropSeen{k: n, at: now}, now.Add(limitTTL))
	}
	if h.rcptLimit == 0 || n < h.rcptLimit {
		h.rcptLimit = n // this call only
	}
}

// learnRcptLimit lowers h's RCPT limit to n (a 452, or the second drop
// after n answered RCPTs), for this call, this process's later calls and,
// through the limiter when it shares limits (RedisLimiter), every process.
// It is kept by srv.rcptKey: the provider's when the rules table names one
// (one provider runs one configuration on all its servers), else the
// server address's; of any egress, since it is the server's own policy.
// Caller holds r.mu.
func (r *run) learnRcptLimit(h *hostQ, srv server, n int) {
	if n <= 0 || (h.rcptLimit > 0 && n >= h.rcptLimit) {
		return
	}
	h.rcptLimit = n
	r.v.rcptLimits.put(srv.rcptKey, n, time.Now().Add(limitTTL))
	if ls, ok := r.v.limiter.(LimitSharer); ok {
		r.wg.Add(1)
		go func() { // not under r.mu: a Redis round trip
			defer r.wg.Done()
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), time.Second)
			defer cancel()
			_ = ls.ShareRcptLimit(ctx, srv.rcptKey, n, limitTTL)
		}()
	}
}

// blocked handles a reply that blames the client (isClientBlock): the
// addresses are unknown/blocked, never undeliverable, since the server
// refuses us, whatever the mailbox. The server is backed off for the
// session's egress for BlockBackoff, for every process sharing the limiter
// (asking again only deepens the block), and the egress is set aside for
// the host in this call: the other egresses carry its queue; when every
// egress is set aside the host is down (its queue moves to the next MX, or
// ends blocked). The operator is told: bulkd_smtp_blocks_total and a log
// line. rest are the addresses of the transaction not yet answered.
//
// A block is about our egress's reputation, which a provider judges the
// same on all its servers (one DNSBL, one reputation system): the server
// address and, when the rules table names the provider, the whole
// provider are backed off for that egress.
func (r *run) blocked(h *hostQ, srv server, rep reply, stage string, rest *job) {
	// The block's reply code is this call's before the back-off is
	// visible: another session of the call that finds the host backed off
	// marks it down as blocked at once, and its addresses carry this code.
	r.mu.Lock()
	if h.down != ReasonBlocked && h.downCode == 0 {
		h.downCode = rep.code
	}
	r.mu.Unlock()
	d := r.v.cfg.BlockBackoff
	keys := []string{srv.key}
	if srv.provKey != "" {
		keys = append(keys, srv.provKey)
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), time.Second)
	for _, k := range keys {
		_ = r.v.limiter.Backoff(bctx, k, d)
		if ls, ok := r.v.limiter.(LimitSharer); ok {
			_ = ls.ShareBlock(bctx, k, d)
		}
		r.v.blocks.put(k, true, time.Now().Add(d))
	}
	cancel()
	r.v.pool.flush(srv.key)
	eg := &r.v.egs[srv.egress]
	smtpBlocks.WithLabelValues(stage, eg.Name).Inc()
	text := redactReply(rep.text) // no recipient address in the log
	r.v.log.Warn("smtp: the mail server blocks this egress; setting it aside for this server", "host", h.name, "server", srv.ip.String(),
		"provider", srv.provider, "egress", eg.Name, "helo", eg.Helo, "stage", stage,
		"code", rep.code, "reply", text, "backoff", d)
	r.mu.Lock()
	defer r.mu.Unlock()
	// The egress is set aside for the host; the others carry its queue.
	r.setAside(h, srv.egress, ReasonBlocked, d, rep.code)
	if rest != nil {
		r.route(rest)
	}
}

// warnProxy tells the operator that an egress's proxy failed, at most once
// a minute per egress. The error names the proxy by host:port only.
func (v *Verifier) warnProxy(eg *egress.Egress, err error) {
	v.proxyMu.Lock()
	last := v.proxyWarned[eg.Name]
	now := time.Now()
	if now.Sub(last) < time.Minute {
		v.proxyMu.Unlock()
		return
	}
	v.proxyWarned[eg.Name] = now
	v.proxyMu.Unlock()
	smtpProxyFailures.WithLabelValues(eg.Name).Inc()
	v.log.Warn("smtp: the egress's proxy failed; using the other egresses", "egress", eg.Name,
		"proxy", eg.ProxyAddr(), "err", err)
}
