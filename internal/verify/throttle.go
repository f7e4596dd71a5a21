package verify

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/redis/go-redis/v9"
)

// Throttling pauses (docs/egress.md, "Reply classes").
//
// A server that answers "too many connections from <us>", "too many
// recipients from <us>", "rate limit exceeded" (isThrottle) is not refusing
// us: it wants us slower. Backing it off for BlockBackoff (30 min) or
// answering its addresses blocked would turn its rate limit into a verdict.
// Instead the server (its limitKey: egress + server address, as every
// politeness key) is paused for a short interval that doubles with each
// throttling reply that comes after the previous pause ended: 5 s, 10 s,
// 20 s, ... at most 2 min. A session started after the throttling reply
// that answers without throttling resets it; so does a quiet throttleLevelTTL. The pause is the limiter's
// back-off, so every process sharing the limiter waits it out (the level
// is shared too: RedisLimiter keeps it in Redis, LocalLimiter in process),
// and sessions of the same call wait for it (run.waitThrottle) instead of
// setting the server aside; the addresses are asked again when it ends,
// if the call has time, else they are answered rate_limited (unknown,
// Temporary, RetryAfter = the pause): the job's retry pass asks them again.

// Throttler is implemented by both limiters here: a shared, growing pause
// per key after throttling replies.
type Throttler interface {
	// Throttle pauses host (a limiter key) after a throttling reply: when
	// no pause is in force, a new one of base·2^level (at most max) starts
	// and the level grows; during a pause it changes nothing (the replies
	// of sessions that were open when it began are one throttling event).
	// It returns the pause left and whether this call started it.
	Throttle(ctx context.Context, host string, base, max time.Duration) (left time.Duration, started bool, err error)
	// ThrottlePause returns the pause of host left (0: none).
	ThrottlePause(ctx context.Context, host string) (time.Duration, error)
	// Unthrottle resets host's level after a session it answered without
	// throttling.
	Unthrottle(ctx context.Context, host string) error
}

// throttleLevelTTL is how long a server's throttling level outlives its
// last throttling reply: a server quiet that long starts again at the
// first pause.
const throttleLevelTTL = 10 * time.Minute

// maxThrottles bounds the throttling replies one address may get in a
// call: with the default pauses 5+10+20+40 s, which outlasts the one-minute
// time unit of Postfix's anvil rate limits, after which it is answered
// rate_limited and the job's retry pass asks again.
const maxThrottles = 4

// throttlePause is base·2^level, at most max.
func throttlePause(base, max time.Duration, level int) time.Duration {
	d := base
	for i := 0; i < level && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// Throttle implements Throttler.
func (l *LocalLimiter) Throttle(_ context.Context, host string, base, maxD time.Duration) (time.Duration, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.get(host)
	now := time.Now()
	if now.Before(h.pausedUntil) {
		return h.pausedUntil.Sub(now), false, nil
	}
	if !now.Before(h.levelUntil) {
		h.level = 0
	}
	d := throttlePause(base, maxD, h.level)
	h.level++
	h.pausedUntil = now.Add(d)
	h.levelUntil = now.Add(throttleLevelTTL)
	if h.pausedUntil.After(h.backoff) {
		h.backoff = h.pausedUntil
	}
	return d, true, nil
}

// ThrottlePause implements Throttler.
func (l *LocalLimiter) ThrottlePause(_ context.Context, host string) (time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.hosts[host]
	if h == nil {
		return 0, nil
	}
	return max(time.Until(h.pausedUntil), 0), nil
}

// Unthrottle implements Throttler.
func (l *LocalLimiter) Unthrottle(_ context.Context, host string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h := l.hosts[host]; h != nil {
		h.level, h.levelUntil = 0, time.Time{}
	}
	return nil
}

// throttleScript: KEYS backoff, level, paused; ARGV base ms, max ms, level
// ttl ms. Returns {ms left, 1 if this call started the pause}.
var throttleScript = redis.NewScript(`
local left = redis.call('PTTL', KEYS[3])
if left > 0 then return {left, 0} end
local n = tonumber(redis.call('GET', KEYS[2]) or '0')
local d = tonumber(ARGV[1])
local mx = tonumber(ARGV[2])
for i = 1, n do
  if d >= mx then break end
  d = d * 2
end
if d > mx then d = mx end
redis.call('SET', KEYS[2], n + 1, 'PX', ARGV[3])
redis.call('SET', KEYS[3], '1', 'PX', d)
if redis.call('PTTL', KEYS[1]) < d then redis.call('SET', KEYS[1], '1', 'PX', d) end
return {d, 1}
`)

// Throttle implements Throttler: one script on the key's slot (its
// back-off, level and pause keys share the hash tag). If Redis fails, the
// in-process limiter pauses this process.
func (l *RedisLimiter) Throttle(ctx context.Context, host string, base, maxD time.Duration) (time.Duration, bool, error) {
	keys := []string{l.key(host, "backoff"), l.key(host, "throttle"), l.key(host, "paused")}
	res, err := throttleScript.Run(ctx, l.rdb, keys, base.Milliseconds(), maxD.Milliseconds(), throttleLevelTTL.Milliseconds()).Int64Slice()
	if err != nil || len(res) != 2 {
		return l.fallback.Throttle(ctx, host, base, maxD)
	}
	d := time.Duration(res[0]) * time.Millisecond
	_ = l.fallback.Backoff(ctx, host, d) // the fallback pauses too if Redis goes
	return d, res[1] == 1, nil
}

// ThrottlePause implements Throttler.
func (l *RedisLimiter) ThrottlePause(ctx context.Context, host string) (time.Duration, error) {
	ms, err := l.rdb.PTTL(ctx, l.key(host, "paused")).Result()
	if err != nil {
		return l.fallback.ThrottlePause(ctx, host)
	}
	return max(ms, 0), nil
}

// Unthrottle implements Throttler.
func (l *RedisLimiter) Unthrottle(ctx context.Context, host string) error {
	_ = l.fallback.Unthrottle(ctx, host)
	if err := l.rdb.Del(ctx, l.key(host, "throttle")).Err(); err != nil {
		return fmt.Errorf("smtp limiter: reset the throttling of %s: %w", host, err)
	}
	return nil
}

// throttler is the verifier's Throttler: the limiter's, else an
// in-process one whose pauses are also set as the limiter's back-off.
func (v *Verifier) throttler() Throttler {
	if t, ok := v.limiter.(Throttler); ok {
		return t
	}
	return v.localThrottle
}

// throttle pauses srv after a throttling reply (see Throttler.Throttle).
func (v *Verifier) throttle(ctx context.Context, srv server) (time.Duration, bool) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	t := v.throttler()
	d, started, err := t.Throttle(ctx, srv.key, v.cfg.ThrottlePause, v.cfg.ThrottlePauseMax)
	if err != nil || d <= 0 {
		d, started = v.cfg.ThrottlePause, true
	}
	if t == Throttler(v.localThrottle) {
		_ = v.limiter.Backoff(ctx, srv.key, d)
	}
	now := time.Now()
	v.throttled.put(srv.key, now, now.Add(throttleLevelTTL))
	return d, started
}

// throttlePauseLeft returns the throttling pause of srv left, 0 when the
// back-off in force is not one (a 421 back-off, a block).
func (v *Verifier) throttlePauseLeft(ctx context.Context, srv server) time.Duration {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	d, err := v.throttler().ThrottlePause(ctx, srv.key)
	if err != nil {
		return 0
	}
	return d
}

// unthrottle resets srv's level after a session it answered without
// throttling: only when this process saw it throttle lately, so the
// common case costs no round trip (another process's level then lapses
// after throttleLevelTTL), and only for a session that started after
// that throttling reply. A session that was already open then says
// nothing about what the server allows now: with a connection limit of 1,
// the one session open keeps answering while every new one is refused,
// and resetting the level on its answers kept the pause at 5 s, refusal
// after refusal (issue 25).
func (v *Verifier) unthrottle(ctx context.Context, srv server, started time.Time) {
	at, seen := v.throttled.get(srv.key, time.Now())
	if !seen || at.IsZero() || !started.After(at) {
		return
	}
	v.throttled.put(srv.key, time.Time{}, time.Now())
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_ = v.throttler().Unthrottle(ctx, srv.key)
}

// canWait reports whether the call may wait d for a pause to end and still
// have a session's time: always when ctx has no deadline (the pause is at
// most ThrottlePauseMax, and maxThrottles bounds the pauses an address
// waits).
func (r *run) canWait(d time.Duration) bool {
	dl, ok := r.ctx.Deadline()
	return !ok || time.Until(dl) > d+r.v.cfg.CommandTimeout
}

// throttled handles a throttling reply at stage (isThrottle) on a session
// to srv: the server is paused (Verifier.throttle) and the transaction's
// unanswered addresses, rest, go back to the host's queue, whose sessions
// wait for the pause to end (waitThrottle). An address throttled
// maxThrottles times in the call, or when the call has no time for the
// pause, is answered rate_limited (unknown, Temporary) with the pause as
// RetryAfter. Never blocked, never a 30-minute back-off. The operator
// sees bulkd_smtp_throttle_pauses_total and one log line per pause.
func (r *run) throttled(h *hostQ, srv server, rep reply, stage string, rest *job) {
	r.throttledAfter(h, srv, rep, stage, rest, false)
}

// throttledAfter is throttled for a session that has already decided on
// some recipients (progress): the server is pacing us, not refusing, and
// the rest's addresses were throttled only because they came after the
// ones it let through. Their throttles are not counted toward
// maxThrottles then: a rate limit of N per window would otherwise answer
// the tail of a long queue rate_limited, each of its addresses having
// waited behind others in every session. Progress in every such session
// bounds the call; its deadline (canWait) bounds the time.
func (r *run) throttledAfter(h *hostQ, srv server, rep reply, stage string, rest *job, progress bool) {
	d, started := r.v.throttle(context.WithoutCancel(r.ctx), srv)
	r.v.pool.flush(srv.key) // parked sessions would only meet the same limit
	eg := &r.v.egs[srv.egress]
	if started {
		smtpThrottlePauses.WithLabelValues(stage, eg.Name).Inc()
		r.v.log.Info("smtp: the mail server throttles this egress; pausing it", "host", h.name, "server", srv.ip.String(),
			"provider", srv.provider, "egress", eg.Name, "stage", stage, "code", rep.code, "reply", redactReply(rep.text),
			"pause", d.String())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if rest == nil {
		// Refused before any transaction (banner, EHLO): the queue stays
		// and the next session waits for the pause, at most maxThrottles
		// times in the call (the addresses were not asked, so their own
		// count does not bound it); then, or when the call has no time
		// for the pause, the egress is set aside for the host as after a
		// 421: the next MX, else rate_limited with the pause as RetryAfter.
		h.throttles++
		if h.throttles >= maxThrottles || !r.canWait(d) {
			r.setAside(h, srv.egress, ReasonRateLimited, d, 0)
		}
		return
	}
	var again []*item
	for _, it := range rest.items {
		if it.done {
			continue
		}
		if !progress {
			it.throttles++
		}
		if it.throttles >= maxThrottles || !r.canWait(d) {
			r.finish([]*item{it}, ReasonRateLimited, rest.host(), rep.code)
			it.retryAfter = max(d, retryHint(rep.text))
			continue
		}
		again = append(again, it)
	}
	if len(again) > 0 {
		r.route(&job{dom: rest.dom, items: again, mxi: rest.mxi})
	}
}

// waitThrottle waits for srv's throttling pause to end when the call has
// the time, and reports whether it did (the caller asks the limiter
// again); false when the back-off is not a throttling pause or the call
// cannot wait: the caller sets the server aside as before.
func (r *run) waitThrottle(srv server) bool {
	d := r.v.throttlePauseLeft(r.ctx, srv)
	if d <= 0 || !r.canWait(d) {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.ctx.Done():
		return false
	}
}

// reAddr finds what looks like a mail address in a reply text: the
// server quotes the recipient ("<a@b>: Recipient address rejected"), and
// logs must not carry it.
var reAddr = regexp.MustCompile(`[^\s<>"'(),;:\[\]]+@[^\s<>"'(),;:\[\]]+`)

// redactReply is a reply text fit for a log line: addresses replaced by
// "<address>", at most 200 octets.
func redactReply(text string) string {
	text = reAddr.ReplaceAllString(text, "address")
	if len(text) > 200 {
		text = text[:200]
	}
	return text
}
