package verify

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/bulkd/bulkd/internal/egress"
)

// maxIPsPerHost is how many addresses of one MX host are dialled before
// the host counts as unreachable.
const maxIPsPerHost = 2

// sess is the progress of one session.
type sess struct {
	srv      server // the server (and provider) the session is counted against
	sent     int    // RCPTs sent (probes included)
	answered int    // RCPTs answered other than "too many recipients"
	decided  int    // RCPTs answered accepted or refused for the address (deferralIsThrottle)
	txs      int    // transactions started
	tooMany  bool   // a "too many recipients" ended the session's usefulness
	client   clientID
	started  time.Time // when the session was dialled
	// reused: a parked session taken again (connPool); answeredBefore its
	// answered count when it was taken. A reused session lost before any
	// RCPT of this call was answered was most likely closed by the server
	// while parked (its idle timeout): that is no drop of ours and says
	// nothing about a limit.
	reused         bool
	answeredBefore int
	// groupRcpts are the RCPTs of the pipelined group being read: a group
	// of several that times out is a slow server's, not a tarpit's (slow.go).
	groupRcpts int
	groupSent  time.Time
}

// tx is one transaction of a pipelined group: its job and the indexes of
// its commands in the group.
type tx struct {
	j          *job
	probe      bool
	start, end int
}

// group is a batch of commands sent in one write when the server offers
// PIPELINING (RFC 2920 allows RSET, MAIL and RCPT anywhere in a group and
// QUIT last, so several transactions cost one round trip), or one by one,
// each just before its reply is read, when it does not.
type group struct {
	c    *smtpConn
	cmds []string
	next int

	// A pipelined group's reply wait grows with the RCPTs whose replies are
	// still to come (slow.go): rcpts is the group's RCPT count, rcptsRead
	// those read, perRcpt the allowance each adds to CommandTimeout.
	rcpts, rcptsRead int
	perRcpt          time.Duration
	// sentAt is when the group was written, firstAt when its first reply
	// came: how long the server took over the group (noteGroupPace).
	sentAt, firstAt time.Time
}

func (g *group) read() (reply, error) {
	wait := g.c.cmdTimeout
	if !g.c.pipelining {
		if err := g.c.send(g.cmds[g.next]); err != nil {
			return reply{}, err
		}
	} else {
		wait += time.Duration(g.rcpts-g.rcptsRead) * g.perRcpt
	}
	if strings.HasPrefix(g.cmds[g.next], "RCPT ") {
		g.rcptsRead++
	}
	g.next++
	rep, err := g.c.readWithin(wait)
	if err == nil && g.firstAt.IsZero() {
		g.firstAt = time.Now()
	}
	return rep, err
}

// skipTo moves past the commands before end: their replies are read and
// dropped when pipelined, they are not sent otherwise.
func (g *group) skipTo(end int) error {
	for g.next < end {
		if !g.c.pipelining {
			g.next = end
			return nil
		}
		if _, err := g.read(); err != nil {
			return err
		}
	}
	return nil
}

// converse runs transactions on c, a connection to srv for h dialled at
// start (or on ic, a session parked by an earlier call: c is nil), until
// h's queue is empty or the session's RCPT budget is spent. It reports
// whether the session was parked for the next call (connPool), its slot
// (release) with it.
func (r *run) converse(h *hostQ, srv server, c *smtpConn, start time.Time, ic *idleConn, release func()) (parked bool) {
	ctx := r.ctx
	if ic != nil {
		return r.transactions(h, ic.c, &sess{srv: srv, sent: ic.sent, answered: ic.answered, txs: ic.txs, reused: true,
			answeredBefore: ic.answered, client: ic.client, started: ic.started}, release)
	}
	defer func() {
		if !parked {
			c.nc.Close()
		}
	}()
	// Ending ctx unblocks any read or write at once.
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	eg := &r.v.egs[srv.egress]
	client := egressClient(c.nc, eg)
	banner, err := c.read()
	if err != nil {
		r.sessionFailed(h, err, true)
		return false
	}
	countReply("banner", classifyAt(banner, stageConnect, client))
	switch {
	case isClientBlock(banner, stageConnect, client):
		// "554 5.7.1 ... Client host [ip] blocked using ..." at connect.
		_ = c.send("QUIT")
		r.blocked(h, srv, banner, "banner", nil)
		return false
	case banner.code == 421 || isThrottle(banner, stageConnect):
		if banner.code != 421 {
			_ = c.send("QUIT")
		}
		r.banner421(h, srv, banner)
		return false
	case banner.code != 220:
		// 554 "no service here" (RFC 5321 3.1): this host refuses us.
		_ = c.send("QUIT")
		r.mu.Lock()
		r.markDown(h, ReasonConnectionFailed, 0)
		r.mu.Unlock()
		return false
	}
	hello, err := c.hello(eg.Helo)
	if err != nil {
		r.sessionFailed(h, err, false)
		return false
	}
	countReply("helo", classifyAt(hello, stageConnect, client))
	if isClientBlock(hello, stageConnect, client) {
		_ = c.send("QUIT")
		r.blocked(h, srv, hello, "helo", nil)
		return false
	}
	if isThrottle(hello, stageConnect) {
		if hello.code != 421 {
			_ = c.send("QUIT")
		}
		r.throttled(h, srv, hello, "helo", nil)
		return false
	}
	if hello.code == 421 {
		r.rateLimited(h, srv, nil)
		return false
	}
	if hello.code != 250 {
		_ = c.send("QUIT")
		r.mu.Lock()
		r.markDown(h, ReasonSMTPError, 0)
		r.mu.Unlock()
		return false
	}

	stop()
	return r.transactions(h, c, &sess{srv: srv, client: client, started: start}, release)
}

// transactions runs the session's transactions on c (after EHLO, or on a
// parked session taken again) and, when its work is done, parks it or says
// QUIT. It reports whether it was parked.
func (r *run) transactions(h *hostQ, c *smtpConn, s *sess, release func()) (parked bool) {
	ctx := r.ctx
	eg := &r.v.egs[s.srv.egress]
	defer func() {
		if !parked {
			c.nc.Close()
		}
	}()
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	for s.txs == 0 || time.Until(c.deadline) >= c.cmdTimeout {
		txs, quit := r.nextGroup(h, s, c.pipelining, c.deadline)
		if len(txs) == 0 {
			break
		}
		g := &group{c: c, perRcpt: r.v.cfg.RcptWait}
		for i := range txs {
			t := &txs[i]
			t.start = len(g.cmds)
			if s.txs > 0 {
				g.cmds = append(g.cmds, "RSET")
			}
			s.txs++
			g.cmds = append(g.cmds, "MAIL FROM:<"+eg.MailFrom+">")
			if t.probe {
				g.cmds = append(g.cmds, "RCPT TO:<"+r.probeFor(t.j.dom)+"@"+t.j.dom.name+">")
			}
			for _, it := range t.j.items {
				g.cmds = append(g.cmds, "RCPT TO:<"+it.addr.String()+">")
			}
			t.end = len(g.cmds)
		}
		for _, cmd := range g.cmds {
			if strings.HasPrefix(cmd, "RCPT ") {
				g.rcpts++
			}
		}
		s.groupRcpts = 0 // without PIPELINING each command has its own wait: a timeout is a tarpit's
		if c.pipelining {
			s.groupRcpts = g.rcpts
		}
		if quit {
			g.cmds = append(g.cmds, "QUIT")
		}
		g.sentAt = time.Now()
		s.groupSent = g.sentAt
		if c.pipelining {
			if err := c.send(g.cmds...); err != nil {
				r.groupFailed(h, s, txs, err, false)
				return
			}
		}
		for i := range txs {
			limited, err := r.transaction(g, h, s, &txs[i])
			if err != nil || limited {
				r.groupFailed(h, s, txs[i+1:], err, limited)
				return
			}
		}
		if s.answered > 0 {
			r.v.unthrottle(ctx, s.srv, s.started) // answered without throttling: the next pause starts short
		}
		if !s.tooMany {
			r.mu.Lock()
			h.provenRcpts = max(h.provenRcpts, s.sent)
			r.mu.Unlock()
		}
		if c.pipelining {
			r.noteGroupPace(h, s.srv, g)
		}
		if quit {
			_, _ = g.read()
			return
		}
		if s.tooMany {
			break
		}
	}
	r.mu.Lock()
	may := r.mayPark(h, s, c.deadline)
	r.mu.Unlock()
	if may && stop() && r.v.pool.park(s.srv.key, &idleConn{c: c, release: release, sent: s.sent, answered: s.answered, txs: s.txs,
		client: s.client, started: s.started}) {
		return true
	}
	c.quit()
	return false
}

// egressClient is how a server may name us through eg (isClientBlock):
// the HELO name, and the address it sees: the egress's public address when
// configured, else the session's local address on a direct route; through
// a proxy without public_ip the address is unknown (the local one is our
// address towards the proxy, which the server never sees).
func egressClient(nc net.Conn, eg *egress.Egress) clientID {
	c := clientOf(nc, eg.Helo)
	switch {
	case eg.PublicIP.IsValid():
		c.ip = eg.PublicIP.String()
	case eg.Proxy != nil:
		c.ip = ""
	}
	return c
}

// nextGroup takes the transactions of the next pipelined group: as many
// jobs as the session's budget allows (one when the server does not
// pipeline), and reports whether QUIT can end the group because nothing
// is left for this session. Without PIPELINING, QUIT is sent on its own.
// A session that will be parked (mayPark) does not say QUIT.
func (r *run) nextGroup(h *hostQ, s *sess, pipelining bool, deadline time.Time) ([]tx, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var txs []tx
	rcpts := 0 // in this group
	for h.down == "" {
		left := r.budget(h) - s.sent
		if left < 1 {
			break
		}
		budget, fresh := left, s.sent == 0
		if depth := r.groupDepth(h); depth > 0 && pipelining {
			// A slow server's group stays within its depth; its first
			// transaction always goes (with a probe it may be one over).
			budget = min(budget, depth-rcpts)
			if len(txs) > 0 && budget < 1 {
				break
			}
			fresh = fresh || (len(txs) == 0 && left >= 2)
			budget = max(budget, 1)
		}
		j, probe := r.take(h, budget, fresh)
		if j == nil {
			j, probe = r.borrow(h, s, budget)
		}
		if j == nil {
			break
		}
		s.sent += len(j.items)
		rcpts += len(j.items)
		if probe {
			s.sent++
			rcpts++
		}
		txs = append(txs, tx{j: j, probe: probe})
		if !pipelining {
			break
		}
	}
	last := h.down != "" || (len(h.queue) == 0 && !r.peerWork(h, s)) || r.budget(h)-s.sent < 1
	return txs, last && pipelining && len(txs) > 0 && r.quitSafe(h, s) && !r.mayPark(h, s, deadline)
}

// peers are the other MX names of this call that may dial srv's address
// and whose rule is h's, and that have not set srv's egress aside: their
// work may ride h's sessions (SMTP cannot tell which name led to a server,
// so the server answers the same). Caller holds r.mu.
func (r *run) peers(h *hostQ, srv server) []*hostQ {
	var out []*hostQ
	for _, p := range r.byIP[srv.ip] {
		if p != h && p.down == "" && p.eg[srv.egress].aside == "" && len(p.queue) > 0 && p.rule == h.rule {
			out = append(out, p)
		}
	}
	return out
}

// borrow takes a transaction of a peer of h for a session of h that has
// budget RCPTs left and nothing of its own: one session then carries many
// names' domains to their shared server, instead of each name waiting for
// a slot of the same server cap. Caller holds r.mu.
func (r *run) borrow(h *hostQ, s *sess, budget int) (*job, bool) {
	for _, p := range r.peers(h, s.srv) {
		if j, probe := r.take(p, budget, s.sent == 0); j != nil {
			return j, probe
		}
	}
	return nil, false
}

// peerWork reports whether a peer of h has work left. Caller holds r.mu.
func (r *run) peerWork(h *hostQ, s *sess) bool { return len(r.peers(h, s.srv)) > 0 }

// quitSafe reports whether QUIT may go in the session's last group: only
// when its RCPTs are within what the host is known to take (its learned
// limit, or what a session of this call had answered in full). Otherwise
// QUIT waits until the replies are read: a host that closes the session
// on QUIT frees its connection slot at once, and a waiting session of
// ours would take its group before this one learned the limit from its
// 452s, and collect as many again.
func (r *run) quitSafe(h *hostQ, s *sess) bool {
	return (h.rcptLimit > 0 && s.sent <= h.rcptLimit) || s.sent <= h.provenRcpts
}

// quit ends the session politely (RFC 5321 4.1.1.10), without letting a
// slow QUIT reply hold the session.
func (c *smtpConn) quit() {
	c.cmdTimeout = min(c.cmdTimeout, 2*time.Second)
	if c.send("QUIT") == nil {
		_, _ = c.read()
	}
}

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

var probeEnc = base32.StdEncoding.WithPadding(base32.NoPadding)

func probeLocal() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "bulkd-probe-" + strings.ToLower(probeEnc.EncodeToString(b[:]))[:12]
}

// transaction reads the replies of one transaction of a group and records
// the answers. A non-nil error means the session broke (its own unanswered
// addresses are already handled); limited means a 421 closed it.
func (r *run) transaction(g *group, h *hostQ, s *sess, t *tx) (limited bool, err error) {
	j := t.j
	if g.cmds[t.start] == "RSET" {
		rep, err := g.read()
		if err != nil {
			r.txFailed(h, s, j, err)
			return false, err
		}
		if isThrottle(rep, stageMail) {
			r.throttled(h, s.srv, rep, "rset", j)
			return true, nil
		}
		if rep.code == 421 {
			r.rateLimited(h, s.srv, j)
			return true, nil
		}
		if rep.code != 250 {
			err := fmt.Errorf("%w: RSET answered %v", errDropped, rep)
			r.txFailed(h, s, j, err)
			return false, err
		}
	}
	mail, err := g.read()
	if err != nil {
		r.txFailed(h, s, j, err)
		return false, err
	}
	if mail.code != 250 {
		mcl := classifyAt(mail, stageMail, s.client)
		countReply("mail", mcl)
		if mcl == rcBlocked {
			r.blocked(h, s.srv, mail, "mail", j)
			return true, nil
		}
		if mcl == rcThrottled {
			r.throttled(h, s.srv, mail, "mail", j)
			return true, nil
		}
		if mail.code == 421 {
			r.rateLimited(h, s.srv, j)
			return true, nil
		}
		reason := ReasonSMTPError // 5xx: the server refuses our sender
		if mail.code/100 == 4 {
			reason = ReasonTemporaryFailure
			if mcl == rcGreylisted {
				reason = ReasonGreylisted
			}
		}
		r.mu.Lock()
		r.finish(j.items, reason, j.host(), mail.code)
		r.setRetry(j.items, mail)
		r.mu.Unlock()
		if err := g.skipTo(t.end); err != nil {
			return false, err
		}
		return false, nil
	}

	// The probe.
	r.mu.Lock()
	verdict := j.dom.verdict
	r.mu.Unlock()
	var probeTemp reply
	if t.probe {
		rep, err := g.read()
		if err != nil {
			r.txFailed(h, s, j, err)
			return false, err
		}
		cl := classifyAt(rep, stageRcpt, s.client)
		countReply("rcpt", cl)
		switch {
		case cl == rcBlocked:
			// A blocked probe is no verdict on the domain: nothing is
			// cached, and the transaction's addresses are not asked here.
			r.blocked(h, s.srv, rep, "rcpt", j)
			return true, nil
		case cl == rcThrottled:
			r.throttled(h, s.srv, rep, "rcpt", j)
			return true, nil
		case cl == rcRateLimited:
			r.rateLimited(h, s.srv, j)
			return true, nil
		case cl == rcTooMany:
			r.tooMany(h, s, j, j.items)
			if err := g.skipTo(t.end); err != nil {
				return false, err
			}
			return false, nil
		case rep.code/100 == 2:
			verdict = 1
		case rep.code/100 == 5:
			verdict = 2
		default:
			probeTemp = rep
		}
		s.answered++
		if decisive(cl) {
			s.decided++
		}
		if verdict != 0 {
			r.v.noteVerdict(j.dom.name, verdict == 1)
			r.mu.Lock()
			j.dom.verdict = verdict
			r.mu.Unlock()
		}
	}

	var again, grey []*item
	for i, it := range j.items {
		rep, err := g.read()
		if err != nil {
			r.txFailed(h, s, &job{dom: j.dom, items: j.items[i:], mxi: j.mxi}, err)
			return false, err
		}
		cl := classifyAt(rep, stageRcpt, s.client)
		if cl == rcGreylisted && r.deferralIsThrottle(h, s, rep) {
			cl = rcThrottled
		}
		countReply("rcpt", cl)
		if cl == rcBlocked {
			r.blocked(h, s.srv, rep, "rcpt", &job{dom: j.dom, items: j.items[i:], mxi: j.mxi})
			return true, nil
		}
		if cl == rcThrottled {
			// "450 4.7.1 Error: too many recipients from <us>": the rest
			// of the group would get the same; ask them after the pause.
			r.throttledAfter(h, s.srv, rep, "rcpt", &job{dom: j.dom, items: j.items[i:], mxi: j.mxi}, s.decided > 0)
			return true, nil
		}
		if cl == rcRateLimited {
			r.rateLimited(h, s.srv, &job{dom: j.dom, items: j.items[i:], mxi: j.mxi})
			return true, nil
		}
		if cl == rcTooMany {
			again = append(again, it)
			continue
		}
		s.answered++
		r.mu.Lock()
		if decisive(cl) {
			s.decided++
			h.decided++
		}
		if r.answer(it, j.host(), rep, cl, verdict, probeTemp) {
			grey = append(grey, it)
		}
		r.mu.Unlock()
	}
	if len(grey) > 0 {
		r.mu.Lock()
		r.greyRetry(&job{dom: j.dom, items: grey, mxi: j.mxi})
		r.mu.Unlock()
	}
	if len(again) > 0 {
		r.tooMany(h, s, j, again)
	}
	return false, nil
}

// deferralIsThrottle reports whether rep, a RCPT deferral classified as
// greylisting, is the server's rate limit instead (docs/egress.md, "Reply
// classes"): its text has no greylisting word (only "try (again) later",
// a bare 4.7.x) and the server has already decided on other recipients of
// ours: in this session (a greylister defers a new triplet from its first
// RCPT, it does not start deferring in the middle of a session whose
// recipients it accepts and refuses), or in an earlier session of this
// call to the host, or it throttled us lately (and no session started
// since answered cleanly). Exim's default `defer ratelimit` answers "451
// Temporary local problem - please try later" that way; read as
// greylisting, its addresses waited for the retry schedule and a quarter
// of them stayed unknown. Read as throttling, the server is paused briefly
// (growing) and they are asked again within the call. A real greylister
// with a vague text that defers a new recipient after others passed costs
// at most the throttling pauses; its addresses are then rate_limited
// (Temporary), and the retry pass asks them again.
func (r *run) deferralIsThrottle(h *hostQ, s *sess, rep reply) bool {
	if rep.code/100 != 4 || reGreyWord.MatchString(rep.text) {
		return false
	}
	if s.decided > 0 {
		return true
	}
	r.mu.Lock()
	n := h.decided
	r.mu.Unlock()
	if n > 0 {
		return true
	}
	at, ok := r.v.throttled.get(s.srv.key, time.Now())
	return ok && !at.IsZero()
}

// decisive reports whether a RCPT reply of class c decided on the
// address: accepted, or refused as unknown, disabled or full.
func decisive(c rcptClass) bool {
	return c == rcAccepted || c == rcNotFound || c == rcDisabled || c == rcFull
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

// answer records the RCPT reply of one address. It returns true instead
// when the address was greylisted and is to be asked again in this call.
// Caller holds r.mu.
func (r *run) answer(it *item, host string, rep reply, cl rcptClass, verdict int, probeTemp reply) bool {
	it.mxHost, it.code = host, rep.code
	switch cl {
	case rcAccepted:
		switch verdict {
		case 1:
			it.catchAll = true
			it.reason = ReasonCatchAll
		case 2:
			it.reason = ReasonAccepted
		default:
			// The probe was answered 4xx: we cannot tell a real mailbox
			// from a catch-all yet, so nothing is deliverable.
			it.reason, it.temporary = ReasonTemporaryFailure, true
			if classify(probeTemp) == rcGreylisted {
				it.reason = ReasonGreylisted
				if r.canGreyRetry(it) {
					return true
				}
			}
			it.retryAfter = retryFor(it.reason, probeTemp)
			it.done = true
			r.ready(it)
			return false
		}
		if it.dom.disposable {
			it.reason = ReasonDisposable
		}
	case rcNotFound:
		it.reason = ReasonMailboxNotFound
	case rcDisabled:
		it.reason = ReasonMailboxDisabled
	case rcFull:
		it.reason = ReasonMailboxFull
		it.temporary = rep.code/100 == 4
	case rcRejected:
		it.reason = ReasonRejected
	case rcBlocked:
		it.reason, it.temporary = ReasonBlocked, true
	case rcGreylisted:
		it.reason, it.temporary = ReasonGreylisted, true
		if r.canGreyRetry(it) {
			return true
		}
	default:
		it.reason, it.temporary = ReasonTemporaryFailure, true
	}
	if it.temporary {
		it.retryAfter = retryFor(it.reason, rep)
	}
	it.done = true
	r.ready(it)
	return false
}

// canGreyRetry reports whether a greylisted address may be asked again in
// this call, and marks it as asked. Caller holds r.mu.
func (r *run) canGreyRetry(it *item) bool {
	wait := r.v.cfg.GreylistRetry
	if wait <= 0 || it.greyRetried {
		return false
	}
	if dl, ok := r.ctx.Deadline(); ok && time.Until(dl) < wait+time.Second {
		return false
	}
	it.greyRetried = true
	return true
}

// greyRetry queues j again after GreylistRetry, with the same probe
// address so the greylist lets the probe through too. If ctx ends first
// its addresses are answered greylisted. Caller holds r.mu.
func (r *run) greyRetry(j *job) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		t := time.NewTimer(r.v.cfg.GreylistRetry)
		defer t.Stop()
		select {
		case <-t.C:
			r.mu.Lock()
			r.route(j)
			r.mu.Unlock()
		case <-r.ctx.Done():
			r.mu.Lock()
			r.finish(j.items, ReasonGreylisted, "", 0)
			for _, it := range j.items {
				it.retryAfter = 5 * time.Minute
			}
			r.mu.Unlock()
		}
	}()
}

// probeFor returns the domain's probe local part: random, but the same for
// a day (cached across calls), because greylisting keys on the recipient
// and a new random probe would be greylisted on every attempt.
func (r *run) probeFor(d *domainState) string {
	r.mu.Lock()
	p := d.probe
	r.mu.Unlock()
	if p != "" {
		return p
	}
	p, cached := r.v.probes.get(d.name, time.Now())
	if !cached {
		p = probeLocal()
		if st := r.v.cfg.Probes; st != nil {
			// Shared with every process; without the store (Redis down)
			// the process's own probe still serves its own retries. Not
			// under r.mu: the round trip must not stall the call's other
			// sessions.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), time.Second)
			if shared, err := st.Probe(ctx, d.name, p, probeTTL); err == nil && shared != "" {
				p = shared
			}
			cancel()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if d.probe == "" {
		// The first of the call's sessions to get here decides.
		d.probe = p
		if !cached {
			r.v.probes.put(d.name, p, time.Now().Add(r.v.localProbeTTL()))
		}
	}
	return d.probe
}

// probeTTL is how long a domain keeps its probe address.
const probeTTL = 24 * time.Hour

// retryFor suggests when to ask again: the server's own hint ("try again in
// 60 seconds") when it gives one, else a default by reason.
func retryFor(reason string, rep reply) time.Duration {
	if d := retryHint(rep.text); d > 0 {
		return d
	}
	switch reason {
	case ReasonGreylisted:
		return 5 * time.Minute
	case ReasonMailboxFull:
		return time.Hour
	}
	return 15 * time.Minute
}

func (r *run) setRetry(its []*item, rep reply) {
	for _, it := range its {
		if it.temporary {
			it.retryAfter = retryFor(it.reason, rep)
		}
	}
}
