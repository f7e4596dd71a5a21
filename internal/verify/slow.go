package verify

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Slow servers (issue 25). Postfix answers a pipelined group of commands
// only once it has processed the whole group: with a 2 s `sleep` restriction
// (or slow policy or LDAP lookups) six RCPTs took 12 s and then all seven
// replies came together. Such a server is slow, not a tarpit, and is
// answered at its own pace:
//
//   - The reply wait of a pipelined group grows with the RCPTs whose replies
//     are still to come: CommandTimeout + RcptWait for each (group.read).
//   - Until a group has shown a server's pace, a session's first group to
//     it carries at most paceGroup RCPTs.
//   - A group whose first reply took longer than slowGroup is a slow
//     server's: its pipeline depth (RCPTs per group) is lowered so that a
//     group takes about slowGroupTarget (noteGroupPace). Its sessions then
//     carry one small group at a time from the host's shared queue, so its
//     answers come a few at a time and as many sessions as its caps allow
//     share its work (spawn).
//   - A group of more than tarpitGroup RCPTs that times out lowers the depth
//     the same way and sends its unanswered addresses to a new session; only
//     a small group (or the banner, EHLO, a server without PIPELINING) that
//     times out makes the host a tarpit for the call, and an address's
//     second timeout ends it. Every timeout is provisional (Temporary): the
//     retry pass asks again.
//
// The depth is learned like the RCPT limit: by server.rcptKey (the provider's
// when the rules table names one, else the server address's, of any egress),
// in this process for limitTTL and, through a limiter that shares it
// (DepthSharer, RedisLimiter's <prefix>{<h>}:depth), in every process.

const (
	// paceGroup is the most RCPTs of a session's first group to a server
	// whose pace is not known yet: a slow one then shows itself after a
	// few RCPTs' time, not after a whole domain's (100 RCPTs at 2 s would
	// outlast the session), and a fast one costs one more round trip, once
	// per server and limitTTL.
	paceGroup = 3
	// slowGroup is how long a group's first reply may take before the
	// server counts as slow.
	slowGroup = 4 * time.Second
	// slowGroupTarget is how long a slow server's group should take.
	slowGroupTarget = 2 * time.Second
	// tarpitGroup is the largest group whose timeout makes the host a
	// tarpit rather than a slow server given smaller groups.
	tarpitGroup = 2
	// maxTimeouts is how many timed-out groups an address may be in before
	// it is answered timeout (provisional).
	maxTimeouts = 2
)

// slowServers counts servers found slow, by what showed it.
var slowServers = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "bulkd_smtp_slow_servers_total",
	Help: "Mail servers found slow (a pipelined group's first reply later than 4 s: cause \"pace\"; a group of more than 2 RCPTs not answered within its reply wait: cause \"timeout\"); each gets smaller pipelined groups for an hour, shared through Redis.",
}, []string{"cause"})

// depthFor is the RCPTs per group that take about slowGroupTarget on a
// server that took `took` over a group of n.
func depthFor(n int, took time.Duration) int {
	if took <= 0 {
		return n
	}
	return max(1, int(int64(n)*int64(slowGroupTarget)/int64(took)))
}

// groupDepth is the most RCPTs h's next group may carry (0: no limit): its
// learned depth, or paceGroup while no group has shown its server's pace.
// Caller holds r.mu.
func (r *run) groupDepth(h *hostQ) int {
	switch {
	case h.depth > 0:
		return h.depth
	case !h.paced:
		return paceGroup
	}
	return 0
}

// noteGroupPace learns a server's pace from a group read in full: a slow
// one's depth, or that it is not slow.
func (r *run) noteGroupPace(h *hostQ, srv server, g *group) {
	if g.firstAt.IsZero() {
		return
	}
	took := g.firstAt.Sub(g.sentAt)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !h.paced {
		h.paced = true
		r.v.paced.put(srv.rcptKey, true, time.Now().Add(limitTTL))
	}
	if g.rcpts < 2 || took < slowGroup {
		return
	}
	r.learnDepth(h, srv, depthFor(g.rcpts, took), "pace", g.rcpts, took)
}

// groupTimedOut handles a transaction whose replies did not come within
// their wait: a big group's server is slow (smaller groups, a new session);
// a small group's is a tarpit. Caller holds r.mu.
func (r *run) groupTimedOut(h *hostQ, s *sess, j *job) {
	if s == nil || s.groupRcpts <= tarpitGroup {
		r.finish(j.items, ReasonTimeout, j.host(), 0)
		r.tarpit(h)
		return
	}
	took := time.Since(s.groupSent)
	r.learnDepth(h, s.srv, min(depthFor(s.groupRcpts, took), s.groupRcpts/2), "timeout", s.groupRcpts, took)
	var retry []*item
	for _, it := range j.items {
		if it.done {
			continue
		}
		it.timeouts++
		if it.timeouts >= maxTimeouts {
			r.finish([]*item{it}, ReasonTimeout, j.host(), 0)
			continue
		}
		retry = append(retry, it)
	}
	if len(retry) > 0 {
		r.route(&job{dom: j.dom, items: retry, mxi: j.mxi})
	}
}

// learnDepth lowers h's pipeline depth to n for this call, this process's
// later calls and (DepthSharer) every process, and tells the operator once
// per lowering. Caller holds r.mu.
func (r *run) learnDepth(h *hostQ, srv server, n int, cause string, group int, took time.Duration) {
	n = max(n, 1)
	if h.depth > 0 && n >= h.depth {
		return
	}
	h.depth = n
	r.v.depths.put(srv.rcptKey, n, time.Now().Add(limitTTL))
	r.spawn(h) // its queue is now spread over more sessions
	slowServers.WithLabelValues(cause).Inc()
	r.v.log.Info("smtp: the mail server answers slowly; smaller pipelined groups for it", "host", h.name,
		"server", srv.ip.String(), "provider", srv.provider, "cause", cause, "group_rcpts", group,
		"waited", took.Round(time.Millisecond), "depth", n)
	if ds, ok := r.v.limiter.(DepthSharer); ok {
		r.wg.Add(1)
		go func() { // not under r.mu: a Redis round trip
			defer r.wg.Done()
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), time.Second)
			defer cancel()
			_ = ds.ShareDepth(ctx, srv.rcptKey, n, limitTTL)
		}()
	}
}

// sharedDepth reads the depth another process learned for srv (once per
// host and call, from sharedLimit).
func (r *run) sharedDepth(h *hostQ, srv server) {
	ds, ok := r.v.limiter.(DepthSharer)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, time.Second)
	n, err := ds.SharedDepth(ctx, srv.rcptKey)
	cancel()
	if err != nil || n <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if h.depth == 0 || n < h.depth {
		h.depth = n
		r.v.depths.put(srv.rcptKey, n, time.Now().Add(limitTTL))
	}
}

// DepthSharer is implemented by limiters that share the pipeline depth
// learned for a slow server with every process (RedisLimiter). Its host
// arguments are limiter keys (limitKey), as LimitSharer's RCPT limits.
type DepthSharer interface {
	ShareDepth(ctx context.Context, host string, n int, ttl time.Duration) error
	SharedDepth(ctx context.Context, host string) (int, error)
}

var _ DepthSharer = (*RedisLimiter)(nil)

func (l *RedisLimiter) depthKey(host string) string { return l.key(host, "depth") }

// ShareDepth implements DepthSharer: a depth only ever lowers while it
// lives (lowerScript).
func (l *RedisLimiter) ShareDepth(ctx context.Context, host string, n int, ttl time.Duration) error {
	if n <= 0 || ttl <= 0 {
		return nil
	}
	if err := lowerScript.Run(ctx, l.rdb, []string{l.depthKey(host)}, n, ttl.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("smtp limiter: share the pipeline depth of %s: %w", host, err)
	}
	return nil
}

// SharedDepth implements DepthSharer: 0 when none is known.
func (l *RedisLimiter) SharedDepth(ctx context.Context, host string) (int, error) {
	n, err := l.rdb.Get(ctx, l.depthKey(host)).Int()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("smtp limiter: the pipeline depth of %s: %w", host, err)
	}
	return n, nil
}
