// Package ratelimit enforces the per-key request rate of SPEC section 8 in
// Redis, so every API replica shares one budget per key. The limiting itself
// is GCRA from go-redis/redis_rate (Allow), and the same algorithm in one
// script for a key and its account's ceiling (KeyAndAccount, the API's
// path); this package adds what the spec asks on top: the X-RateLimit-*
// figures and the longer Retry-After for callers who exceed the limit by a
// factor of three or more.
package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// Result is the outcome of one request's check.
type Result struct {
	Allowed    bool
	Limit      int       // requests per window
	Remaining  int       // requests left right now
	Reset      time.Time // when the budget is full again
	RetryAfter int       // whole seconds; set when !Allowed
}

// Limiter allows PerSecond requests per second per key, with a burst of the
// same size: a quiet key may send PerSecond requests at once, then one every
// 1/PerSecond seconds.
type Limiter struct {
	rdb       redis.UniversalClient
	lim       *redis_rate.Limiter
	limit     redis_rate.Limit
	perSecond int
}

// New returns a limiter of perSecond requests per second per key.
func New(rdb redis.UniversalClient, perSecond int) *Limiter {
	return &Limiter{
		rdb:       rdb,
		lim:       redis_rate.NewLimiter(rdb),
		limit:     redis_rate.Limit{Rate: perSecond, Burst: perSecond, Period: time.Second},
		perSecond: perSecond,
	}
}

// PerSecond is the limiter's own rate (requests per second per key).
func (l *Limiter) PerSecond() int { return l.perSecond }

// Allow checks and counts one request of key.
func (l *Limiter) Allow(ctx context.Context, key string) (Result, error) {
	return l.allow(ctx, key, l.limit, l.perSecond)
}

func (l *Limiter) allow(ctx context.Context, key string, limit redis_rate.Limit, perSecond int) (Result, error) {
	res, err := l.lim.Allow(ctx, "bulkd:rl:"+key, limit)
	if err != nil {
		return Result{}, fmt.Errorf("rate limit: %w", err)
	}
	return l.result(ctx, res.Allowed > 0, res.ResetAfter, perSecond, key), nil
}

// result is the Result of one check of key at perSecond: allowed or not,
// with resetAfter until its budget is full again; a refusal counts
// towards the longer Retry-After.
func (l *Limiter) result(ctx context.Context, allowed bool, resetAfter time.Duration, perSecond int, key string) Result {
	if allowed {
		return l.figures(true, resetAfter, perSecond)
	}
	// Only rejected requests pay for this second counter (the pair script
	// keeps its own; this is Allow's). A failed count answers 1 s.
	k := "bulkd:rl:over:" + key + ":" + strconv.FormatInt(time.Now().Unix(), 10)
	pipe := l.rdb.Pipeline()
	incr := pipe.Incr(ctx, k)
	pipe.Expire(ctx, k, 2*time.Second)
	refused := 0
	if _, err := pipe.Exec(ctx); err == nil {
		refused = int(incr.Val())
	}
	return l.refusal(resetAfter, perSecond, refused)
}

// figures are a check's X-RateLimit-* figures: allowed or not, with
// resetAfter until its budget is full again.
func (l *Limiter) figures(allowed bool, resetAfter time.Duration, perSecond int) Result {
	out := Result{
		Allowed: allowed,
		Limit:   perSecond,
		Reset:   time.Now().Add(resetAfter),
	}
	// redis_rate floors a float for Remaining and loses one to rounding
	// (19.999 -> 19); the budget in use is ResetAfter / emission interval,
	// so derive Remaining from that, rounded to the nearest request.
	interval := time.Second / time.Duration(perSecond)
	used := int((resetAfter + interval/2) / interval)
	if out.Allowed && used <= perSecond {
		out.Remaining = perSecond - used
	}
	// X-RateLimit-Reset is whole Unix seconds; round up so a client that
	// waits until then finds the budget restored.
	out.Reset = time.Unix(ceilSeconds(out.Reset), 0)
	return out
}

// refusal is the Result of a refusal, refused being the refusals counted
// in the current second (this one included): Retry-After is 1 s, and 5 s
// once the second's requests (about perSecond allowed plus the refused)
// reach three times the limit (SPEC section 7).
func (l *Limiter) refusal(resetAfter time.Duration, perSecond, refused int) Result {
	out := l.figures(false, resetAfter, perSecond)
	out.RetryAfter = 1
	if refused+perSecond >= 3*perSecond {
		out.RetryAfter = 5
	}
	return out
}

// pairScript is GCRA (the algorithm and arithmetic of redis_rate's, for a
// burst of one second's worth and a cost of 1) for an API key and then,
// if the key is within its limit, for its account's ceiling, in one step:
// one round trip for both on the hottest path (every authenticated
// request). A request the key refuses does not count against the account,
// and one the account refuses does not spend the key's budget.
// A refusal is also counted in the refusing limit's count of the current
// second (its longer Retry-After), in the same step: a client hammering
// past its limit costs one round trip a request, not two.
// KEYS = key's state, account's state, key's refusals, account's refusals
// (one hash slot: the account's tag).
// ARGV = key rate per second, account rate per second (0: no ceiling).
// Returns {refused by: 0 none, 1 key, 2 account; the key's reset after
// (s); the refusing limit's reset after (s); refusals of this second by
// the refusing limit, this one included (0 when allowed)} as strings.
var pairScript = redis.NewScript(`
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = (t[1] - 1483228800) + (t[2] / 1000000)
local function gcra(k, rate)
  local interval = 1 / rate
  local tat = math.max(tonumber(redis.call('GET', k) or now), now)
  local new_tat = tat + interval
  if now - (new_tat - interval * rate) < 0 then return nil, tat - now end
  return new_tat, new_tat - now
end
-- "second:count", kept 2 s: the refusals of the current second.
local function refused(k)
  local n = 1
  local v = redis.call('GET', k)
  if v then
    local sec, c = string.match(v, '^(%d+):(%d+)$')
    if sec == t[1] then n = tonumber(c) + 1 end
  end
  redis.call('SET', k, t[1] .. ':' .. n, 'EX', 2)
  return tostring(n)
end
local kt, kreset = gcra(KEYS[1], tonumber(ARGV[1]))
if not kt then return {'1', tostring(kreset), tostring(kreset), refused(KEYS[3])} end
local arate = tonumber(ARGV[2])
if arate > 0 then
  local at, areset = gcra(KEYS[2], arate)
  if not at then
    local cur = math.max(tonumber(redis.call('GET', KEYS[1]) or now), now)
    return {'2', tostring(cur - now), tostring(areset), refused(KEYS[4])}
  end
  -- As redis_rate: at a rate so high that one request's interval is
  -- lost in the float, there is nothing to keep.
  if areset > 0 then redis.call('SET', KEYS[2], at, 'EX', math.ceil(areset)) end
end
if kreset > 0 then redis.call('SET', KEYS[1], kt, 'EX', math.ceil(kreset)) end
return {'0', tostring(kreset), tostring(kreset), '0'}
`)

// Pair is the outcome of KeyAndAccount.
type Pair struct {
	// Key is the key's own limit (its X-RateLimit-* figures; Remaining 0
	// when the account refused); Allowed is false when either refused.
	Key Result
	// ByAccount: the account's ceiling refused the request; Account then
	// holds its figures (Limit, Reset, RetryAfter) for the answer.
	ByAccount bool
	Account   Result
}

// KeyAndAccount checks and counts one request of API key keyID, at the
// limiter's own rate, and of its account accountID, at accountRate
// requests per second with a burst of as many (0: no ceiling), in one
// round trip. Both states live on the account's hash slot.
func (l *Limiter) KeyAndAccount(ctx context.Context, keyID, accountID string, accountRate int) (Pair, error) {
	tag := "bulkd:rl:{" + accountID + "}:"
	v, err := pairScript.Run(ctx, l.rdb, []string{tag + "k:" + keyID, tag + "a", tag + "over:k:" + keyID, tag + "over:a"},
		l.perSecond, max(accountRate, 0)).StringSlice()
	if err != nil || len(v) != 4 {
		return Pair{}, fmt.Errorf("rate limit: %v %w", v, err)
	}
	secs := func(s string) time.Duration {
		f, _ := strconv.ParseFloat(s, 64)
		return time.Duration(f * float64(time.Second))
	}
	refusals, _ := strconv.Atoi(v[3])
	switch v[0] {
	case "0":
		return Pair{Key: l.figures(true, secs(v[1]), l.perSecond)}, nil
	case "1":
		return Pair{Key: l.refusal(secs(v[1]), l.perSecond, refusals)}, nil
	}
	key := l.figures(true, secs(v[1]), l.perSecond)
	key.Allowed, key.Remaining = false, 0
	acct := l.refusal(secs(v[2]), accountRate, refusals)
	if acct.Reset.After(key.Reset) {
		key.Reset = acct.Reset
	}
	key.RetryAfter = acct.RetryAfter
	return Pair{Key: key, ByAccount: true, Account: acct}, nil
}

func ceilSeconds(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}
