// Package ratelimit enforces the per-key request rate of SPEC section 8 in
// Redis, so every API replica shares one budget per key. The limiting itself
// is GCRA from go-redis/redis_rate; this package adds what the spec asks on
// top: the X-RateLimit-* figures and the longer Retry-After for callers who
// exceed the limit by a factor of three or more.
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

// AllowRate checks and counts one request of key against perSecond
// requests per second (with a burst of as many) instead of the limiter's
// own rate: for limits whose rate differs per key, such as an account's
// ceiling with its override. perSecond must be positive.
func (l *Limiter) AllowRate(ctx context.Context, key string, perSecond int) (Result, error) {
	return l.allow(ctx, key, redis_rate.Limit{Rate: perSecond, Burst: perSecond, Period: time.Second}, perSecond)
}

func (l *Limiter) allow(ctx context.Context, key string, limit redis_rate.Limit, perSecond int) (Result, error) {
	res, err := l.lim.Allow(ctx, "bulkd:rl:"+key, limit)
	if err != nil {
		return Result{}, fmt.Errorf("rate limit: %w", err)
	}
	now := time.Now()
	out := Result{
		Allowed: res.Allowed > 0,
		Limit:   perSecond,
		Reset:   now.Add(res.ResetAfter),
	}
	// redis_rate floors a float for Remaining and loses one to rounding
	// (19.999 -> 19); the budget in use is ResetAfter / emission interval,
	// so derive Remaining from that, rounded to the nearest request.
	interval := time.Second / time.Duration(perSecond)
	used := int((res.ResetAfter + interval/2) / interval)
	if out.Allowed && used <= perSecond {
		out.Remaining = perSecond - used
	}
	// X-RateLimit-Reset is whole Unix seconds; round up so a client that
	// waits until then finds the budget restored.
	out.Reset = time.Unix(ceilSeconds(out.Reset), 0)
	if out.Allowed {
		return out, nil
	}
	out.RetryAfter = 1
	// Only rejected requests pay for this second counter. The requests of
	// the current second are about perSecond allowed plus those rejected;
	// when they reach three times the limit the caller is told to back off
	// for 5 s instead of 1 s (SPEC section 7).
	sec := now.Unix()
	k := "bulkd:rl:over:" + key + ":" + strconv.FormatInt(sec, 10)
	pipe := l.rdb.Pipeline()
	incr := pipe.Incr(ctx, k)
	pipe.Expire(ctx, k, 2*time.Second)
	if _, err := pipe.Exec(ctx); err == nil && int(incr.Val())+perSecond >= 3*perSecond {
		out.RetryAfter = 5
	}
	return out, nil
}

func ceilSeconds(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}
