package verify

import (
	"context"
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
