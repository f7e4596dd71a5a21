package verify

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Sessions kept open between Verify calls.
//
// The job engine hands the verifier a batch at a time (a few hundred
// addresses) and the finder asks in rounds, one Verify call each; a big
// provider's host appears in every batch and every round. Without reuse
// each call opens its own sessions to it: a connect, banner and EHLO (two
// round trips) and one token of the host's new-session rate each time,
// and the rate (SessionsPerSecond, 5/s by default) became what bounded a
// whole first pass (docs/benchmarks.md, "Verification speed"). A session
// whose queue ran dry with RCPT budget left is therefore parked for a
// short while (Config.SessionIdle) with its politeness slot still held,
// and the next call that needs the host takes it: an RSET and the next
// transaction go on the same connection. Parking keeps the server's view
// unchanged: the connection was counted against the host's cap while it
// worked and stays counted while parked, so no more sessions are ever open
// than the cap; what it saves is new connections. The session's RCPT
// budget (MaxRcptsPerSession, or the host's learned limit) counts across
// the calls that share it, so a server that drops or answers 452 after K
// RCPTs per connection sees at most K as before.

// idleConn is a parked session: its connection, its politeness slot and
// how much of its budget it has used.
type idleConn struct {
	c        *smtpConn
	release  func()
	sent     int
	answered int
	txs      int
	client   clientID
	started  time.Time
	timer    *time.Timer
}

// connPool holds parked sessions by server key (server address and
// egress, server.key: any MX name that leads to the server may use them).
// Its methods are safe for concurrent use.
type connPool struct {
	ttl time.Duration
	max int // parked sessions at most (each holds a socket and a slot)

	mu       sync.Mutex
	closed   bool // closeAll ran: nothing is parked any more
	hosts    map[string][]*idleConn
	n        int
	watchers map[string]*watch
}

type watch struct {
	ch   chan struct{} // closed when a session is parked for the host
	refs int
}

// poolMax bounds the parked sessions of a process.
const poolMax = 512

func newConnPool(ttl time.Duration) *connPool {
	return &connPool{ttl: ttl, max: poolMax, hosts: map[string][]*idleConn{}, watchers: map[string]*watch{}}
}

func (p *connPool) enabled() bool { return p != nil && p.ttl > 0 }

// park keeps ic for host until ttl passes (then it says QUIT and gives its
// slot back) or take hands it to a session. It reports false when the pool
// is full; the caller then ends the session itself.
func (p *connPool) park(host string, ic *idleConn) bool {
	if !p.enabled() {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.n >= p.max {
		return false
	}
	p.hosts[host] = append(p.hosts[host], ic)
	p.n++
	ic.timer = time.AfterFunc(p.ttl, func() {
		if p.remove(host, ic) {
			ic.close()
		}
	})
	if w := p.watchers[host]; w != nil && w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
	return true
}

// remove takes ic out of the pool; false when someone else took it first.
func (p *connPool) remove(host string, ic *idleConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.hosts[host]
	for i, x := range l {
		if x == ic {
			l = append(l[:i], l[i+1:]...)
			if len(l) == 0 {
				delete(p.hosts, host)
			} else {
				p.hosts[host] = l
			}
			p.n--
			return true
		}
	}
	return false
}

// take returns a parked session of host that is still open, or nil.
// Sessions the server closed meanwhile are closed and their slots given
// back.
func (p *connPool) take(host string) *idleConn {
	if !p.enabled() {
		return nil
	}
	for {
		p.mu.Lock()
		l := p.hosts[host]
		if len(l) == 0 {
			p.mu.Unlock()
			return nil
		}
		ic := l[len(l)-1] // the most recent: the least likely to be timed out by the server
		p.mu.Unlock()
		if !p.remove(host, ic) {
			continue // its timer fired meanwhile
		}
		ic.timer.Stop()
		if ic.alive() {
			return ic
		}
		ic.close()
	}
}

// closeAll ends every parked session and parks no more: QUIT, and each
// politeness slot given back at once. A process that exits with sessions
// parked would otherwise keep their slots in the shared limiter until
// their leases expire (LeaseTTL, 2 minutes), holding every other pod off
// those servers: a processor pod exits as soon as its shard is done.
func (p *connPool) closeAll() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	var all []*idleConn
	for _, l := range p.hosts {
		all = append(all, l...)
	}
	p.hosts = map[string][]*idleConn{}
	p.n = 0
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, ic := range all {
		ic.timer.Stop()
		wg.Add(1)
		go func() {
			defer wg.Done()
			ic.close() // QUIT waits up to 2s for its reply
		}()
	}
	wg.Wait()
}

// flush ends every session parked for host: it answered 421 or blocked
// us, and the back-off must hold for sessions already open too.
func (p *connPool) flush(host string) {
	if !p.enabled() {
		return
	}
	p.mu.Lock()
	l := p.hosts[host]
	delete(p.hosts, host)
	p.n -= len(l)
	p.mu.Unlock()
	for _, ic := range l {
		// Taken out of the map under the lock, so ours whatever its timer
		// does (its remove finds nothing).
		ic.timer.Stop()
		go ic.close() // QUIT waits up to 2s for its reply
	}
}

// watchHost returns a channel closed when a session of host is parked,
// and a function to call when no longer waiting.
func (p *connPool) watchHost(host string) (<-chan struct{}, func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.watchers[host]
	if w == nil {
		w = &watch{}
		p.watchers[host] = w
	}
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	w.refs++
	ch := w.ch
	return ch, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if w.refs--; w.refs == 0 && p.watchers[host] == w {
			delete(p.watchers, host)
		}
	}
}

// alive reports whether the server has neither closed the parked session
// nor said anything on it (a 421 at its own idle timeout): nothing may be
// waiting to be read between our transactions.
func (ic *idleConn) alive() bool {
	if ic.c.r.Buffered() > 0 {
		return false
	}
	_ = ic.c.nc.SetReadDeadline(time.Now().Add(time.Millisecond))
	_, err := ic.c.r.Peek(1)
	var ne interface{ Timeout() bool }
	return err != nil && errors.As(err, &ne) && ne.Timeout()
}

// close ends a parked session politely and gives its slot back.
func (ic *idleConn) close() {
	ic.c.quit()
	_ = ic.c.nc.Close()
	ic.release()
}

// slot gets the right to run a session for h on srv: a session parked on
// srv (any MX name that led there: the server cannot tell them apart; the
// connection comes with it), or a new politeness slot from the limiter.
// While it waits for a slot, a session parked on srv by another call ends
// the wait and is taken instead.
func (r *run) slot(h *hostQ, srv server) (ic *idleConn, release func(), backoff time.Duration, err error) {
	p := r.v.pool
	for {
		if !p.enabled() {
			release, backoff, err = r.v.acquire(r.ctx, h, srv, r.slotCap(h, srv))
			return nil, release, backoff, err
		}
		parked, unwatch := p.watchHost(srv.key)
		if ic := p.take(srv.key); ic != nil {
			unwatch()
			return ic, ic.release, 0, nil
		}
		actx, cancel := context.WithCancel(r.ctx)
		go func() {
			select {
			case <-parked:
				cancel()
			case <-actx.Done():
			}
		}()
		release, backoff, err = r.v.acquire(actx, h, srv, r.slotCap(h, srv))
		woken := actx.Err() != nil
		cancel()
		unwatch()
		if err != nil && woken && r.ctx.Err() == nil {
			continue // a session was parked for h: take it
		}
		return nil, release, backoff, err
	}
}

// mayPark reports whether s, once its work is done, is worth parking: the
// pool is on and the session has room for a probe and an address more
// before its RCPT budget or its time runs out. Caller holds r.mu.
func (r *run) mayPark(h *hostQ, s *sess, deadline time.Time) bool {
	return r.v.pool.enabled() && !s.tooMany && h.down == "" && r.budget(h)-s.sent >= 2 &&
		time.Until(deadline) > r.v.pool.ttl+2*r.v.cfg.CommandTimeout
}
