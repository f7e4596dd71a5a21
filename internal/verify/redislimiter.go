package verify

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisLimiter is a HostLimiter shared by every process using the same
// Redis: the caps and the rate hold for all of them together.
//
// Every key the verifier passes (limitKey: an egress and a server address,
// or an egress and a provider) has its own keys in one Redis Cluster slot
// (hash tag of the key's SHA-1, so any key text is safe):
//
//	<prefix>{<h>}:holders  ZSET holder id -> lease expiry (ms, Redis clock)
//	<prefix>{<h>}:tat      GCRA theoretical arrival time (ms; servers only)
//	<prefix>{<h>}:backoff  exists while the server (or provider) is backed off
//	<prefix>{<h>}:blocked  exists while that back-off comes from a block
//	<prefix>{<h>}:rcpts    the RCPTs per session learned (server or provider
//	                       key of AnyEgress)
//	<prefix>{<h>}:depth    the pipeline depth learned for a slow server
//	                       (same key as rcpts; slow.go)
//
// Every operation is one Lua script on one key's slot, run on Redis's
// clock (TIME), so process clocks never disagree. A session with a
// provider first takes a provider slot (back-off and cap), then the
// server slot (back-off, cap and GCRA rate); when the server says wait,
// the provider slot is given back before waiting, so no session holds one
// while it waits for the other. The caller sleeps the returned time
// (jittered, capped at 1 s) and asks again, never spinning. A holder that
// dies stops renewing and its leases expire after LeaseTTL.
//
// If Redis fails, the limiter falls back to an in-process LocalLimiter with
// the same options for that call: politeness across processes is lost for
// the outage, politeness within the process is kept, and verification goes
// on.
type RedisLimiter struct {
	rdb      redis.UniversalClient
	opts     LimiterOptions
	fallback *LocalLimiter
	gate     gate // per server key: at most its cap of this process's sessions ask Redis
}

// NewRedisLimiter returns a limiter on rdb.
func NewRedisLimiter(rdb redis.UniversalClient, opts LimiterOptions) *RedisLimiter {
	opts = opts.withDefaults()
	return &RedisLimiter{rdb: rdb, opts: opts, fallback: NewLocalLimiter(opts)}
}

// SessionsPerHost returns the default cap per server address.
func (l *RedisLimiter) SessionsPerHost() int { return l.opts.SessionsPerHost }

// acquireScript returns {0, 0} when the holder was added, or {why, ms}:
// why 1 back-off (ms left), 2 at the cap (ms until the earliest lease
// expires, the caller polls sooner), 3 rate (ms until the next start).
var acquireScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local bo = redis.call('PTTL', KEYS[3])
if bo > 0 then return {1, bo} end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local cap = tonumber(ARGV[2])
local lease = tonumber(ARGV[5])
if redis.call('ZCARD', KEYS[1]) >= cap then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {2, tonumber(first[2]) - now}
end
local interval = tonumber(ARGV[3])
local tau = interval * (tonumber(ARGV[4]) - 1)
local tat = tonumber(redis.call('GET', KEYS[2]) or now)
if tat < now then tat = now end
if tat - now > tau then return {3, tat - tau - now} end
redis.call('SET', KEYS[2], tat + interval, 'PX', tat + interval - now + interval)
redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
redis.call('PEXPIRE', KEYS[1], lease * 2)
return {0, 0}
`)

// renewScript extends a live holder's lease; 0 when the lease was lost.
var renewScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
return 1
`)

// backoffScript sets the back-off unless a longer one is in force.
var backoffScript = redis.NewScript(`
local left = redis.call('PTTL', KEYS[1])
if left < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], '1', 'PX', ARGV[1]) end
return 1
`)

// providerScript takes a provider slot: KEYS holders, backoff; ARGV id,
// cap (0: none), lease ms. Replies as acquireScript (no rate).
var providerScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local bo = redis.call('PTTL', KEYS[2])
if bo > 0 then return {1, bo} end
local cap = tonumber(ARGV[2])
if cap <= 0 then return {0, 0} end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local lease = tonumber(ARGV[3])
if redis.call('ZCARD', KEYS[1]) >= cap then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {2, tonumber(first[2]) - now}
end
redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
redis.call('PEXPIRE', KEYS[1], lease * 2)
return {0, 0}
`)

// capPoll is how often a waiter at the cap asks again: a release is not
// announced (a pub/sub channel per host would cost more than it saves at
// a 3-session cap).
const capPoll = 50 * time.Millisecond

// key is the Redis key of one kind of state of a limiter key (limitKey):
// every kind of one limiter key shares its hash tag, so each script's keys
// are in one cluster slot.
func (l *RedisLimiter) key(k, kind string) string {
	sum := sha1.Sum([]byte(k))
	return l.opts.Prefix + "{" + hex.EncodeToString(sum[:8]) + "}:" + kind
}

func (l *RedisLimiter) serverKeys(k string) []string {
	return []string{l.key(k, "holders"), l.key(k, "tat"), l.key(k, "backoff")}
}

// Acquire implements HostLimiter.
func (l *RedisLimiter) Acquire(ctx context.Context, host string) (func(), error) {
	rel, _, err := l.acquire(ctx, Slot{Server: host}, false)
	return rel, err
}

// AcquireOrBackoff implements BackoffAwareLimiter.
func (l *RedisLimiter) AcquireOrBackoff(ctx context.Context, host string) (func(), time.Duration, error) {
	return l.acquire(ctx, Slot{Server: host}, true)
}

// AcquireSlot implements SlotLimiter.
func (l *RedisLimiter) AcquireSlot(ctx context.Context, s Slot) (func(), time.Duration, error) {
	return l.acquire(ctx, s, true)
}

func (l *RedisLimiter) acquire(ctx context.Context, s Slot, failOnBackoff bool) (func(), time.Duration, error) {
	capS := s.Cap
	if capS <= 0 {
		capS = l.opts.SessionsPerHost
	}
	leave, err := l.gate.enter(ctx, s.Server, capS)
	if err != nil {
		return nil, 0, err
	}
	rel, wait, err := l.acquireRedis(ctx, s, capS, failOnBackoff)
	if rel == nil {
		leave()
		return nil, wait, err
	}
	var once sync.Once
	return func() { once.Do(func() { rel(); leave() }) }, 0, nil
}

func (l *RedisLimiter) acquireRedis(ctx context.Context, s Slot, capS int, failOnBackoff bool) (func(), time.Duration, error) {
	keys := l.serverKeys(s.Server)
	var pkeys []string
	if s.Provider != "" {
		pkeys = []string{l.key(s.Provider, "holders"), l.key(s.Provider, "backoff")}
	}
	var idb [12]byte
	_, _ = rand.Read(idb[:])
	id := hex.EncodeToString(idb[:])
	intervalMS := max(l.opts.interval().Milliseconds(), 1)
	leaseMS := l.opts.LeaseTTL.Milliseconds()
	fallback := func() (func(), time.Duration, error) {
		if failOnBackoff {
			return l.fallback.AcquireSlot(ctx, s)
		}
		rel, err := l.fallback.acquire(ctx, s, false)
		return rel, 0, err
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, 0, err
		}
		var res []int64
		var err error
		provHeld := false
		if pkeys != nil {
			res, err = providerScript.Run(ctx, l.rdb, pkeys, id, s.ProviderCap, leaseMS).Int64Slice()
			provHeld = err == nil && len(res) == 2 && res[0] == 0 && s.ProviderCap > 0
		}
		if err == nil && (pkeys == nil || (len(res) == 2 && res[0] == 0)) {
			res, err = acquireScript.Run(ctx, l.rdb, keys, id, capS, intervalMS, capS, leaseMS).Int64Slice()
			if provHeld && (err != nil || len(res) != 2 || res[0] != 0) {
				// Not holding the provider's slot while waiting for the
				// server's (a failed ZREM costs the slot until its lease
				// expires).
				_ = l.rdb.ZRem(context.WithoutCancel(ctx), pkeys[0], id).Err()
				provHeld = false
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, 0, ctx.Err()
			}
			return fallback()
		}
		if len(res) != 2 {
			return nil, 0, fmt.Errorf("smtp limiter: unexpected script reply %v", res)
		}
		wait := time.Duration(res[1]) * time.Millisecond
		switch res[0] {
		case 0:
			held := [][]string{keys[:1]}
			if provHeld {
				held = append(held, pkeys[:1])
			}
			return l.holder(held, id), 0, nil
		case 1:
			if failOnBackoff {
				return nil, wait, nil
			}
		case 2:
			wait = min(max(wait, time.Millisecond), capPoll)
		}
		if res[0] != 2 && beyondDeadline(ctx, wait) {
			return nil, 0, &WaitError{Host: s.Server, RetryAfter: wait}
		}
		if err := sleep(ctx, wait, nil); err != nil {
			return nil, 0, err
		}
	}
}

// holder starts renewing the leases (one holders key per element of held,
// each in its own slot) and returns its release.
func (l *RedisLimiter) holder(held [][]string, id string) func() {
	stop := make(chan struct{})
	done := make(chan struct{})
	leaseMS := l.opts.LeaseTTL.Milliseconds()
	go func() {
		defer close(done)
		t := time.NewTicker(l.opts.LeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), l.opts.LeaseTTL/3)
				for _, k := range held {
					_ = renewScript.Run(ctx, l.rdb, k, id, leaseMS).Err()
				}
				cancel()
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(stop)
			<-done
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			// A failed ZREM only costs the slot until the lease expires.
			for _, k := range held {
				_ = l.rdb.ZRem(ctx, k[0], id).Err()
			}
		})
	}
}

// Backoff implements HostLimiter.
func (l *RedisLimiter) Backoff(ctx context.Context, host string, d time.Duration) error {
	ms := d.Milliseconds()
	if ms <= 0 {
		return nil
	}
	_ = l.fallback.Backoff(ctx, host, d)
	if err := backoffScript.Run(ctx, l.rdb, []string{l.key(host, "backoff")}, ms).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("smtp limiter: back off %s: %w", host, err)
	}
	return nil
}

// Holders returns the number of live sessions of a limiter key (ServerKey,
// ProviderKey; for tests and operators).
func (l *RedisLimiter) Holders(ctx context.Context, host string) (int64, error) {
	k := l.key(host, "holders")
	now := time.Now().UnixMilli()
	n, err := l.rdb.ZCount(ctx, k, fmt.Sprint(now), "+inf").Result()
	if err != nil {
		return 0, fmt.Errorf("smtp limiter: holders of %s: %w", host, err)
	}
	return n, nil
}

// LimitSharer is implemented by limiters that share what one process
// learned about a server's limits with every process (RedisLimiter): the
// RCPTs per session it answers (from 452s, or a drop without a reply
// after that many RCPTs). Its host arguments are limiter keys (limitKey):
// the verifier shares RCPT limits by provider, else server address, of
// AnyEgress.
//
// It also keeps which servers and providers blocked us (a reply blaming
// the client) for as long as their back-off, so a process refused by that
// back-off answers blocked rather than rate_limited.
type LimitSharer interface {
	ShareRcptLimit(ctx context.Context, host string, n int, ttl time.Duration) error
	SharedRcptLimit(ctx context.Context, host string) (int, error)
	ShareBlock(ctx context.Context, host string, d time.Duration) error
	SharedBlock(ctx context.Context, host string) (bool, error)
}

func (l *RedisLimiter) blockKey(host string) string { return l.key(host, "blocked") }

// ShareBlock implements LimitSharer.
func (l *RedisLimiter) ShareBlock(ctx context.Context, host string, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	if err := l.rdb.Set(ctx, l.blockKey(host), "1", d).Err(); err != nil {
		return fmt.Errorf("smtp limiter: share the block of %s: %w", host, err)
	}
	return nil
}

// SharedBlock implements LimitSharer.
func (l *RedisLimiter) SharedBlock(ctx context.Context, host string) (bool, error) {
	n, err := l.rdb.Exists(ctx, l.blockKey(host)).Result()
	if err != nil {
		return false, fmt.Errorf("smtp limiter: the block of %s: %w", host, err)
	}
	return n > 0, nil
}

// lowerScript sets KEYS[1] to ARGV[1] (for ARGV[2] ms) unless it holds a
// lower value: a learned limit only ever lowers while it lives.
var lowerScript = redis.NewScript(`
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local n = tonumber(ARGV[1])
if cur > 0 and cur <= n then return cur end
redis.call('SET', KEYS[1], n, 'PX', ARGV[2])
return n
`)

func (l *RedisLimiter) rcptKey(host string) string { return l.key(host, "rcpts") }

// ShareRcptLimit implements LimitSharer.
func (l *RedisLimiter) ShareRcptLimit(ctx context.Context, host string, n int, ttl time.Duration) error {
	if n <= 0 || ttl <= 0 {
		return nil
	}
	if err := lowerScript.Run(ctx, l.rdb, []string{l.rcptKey(host)}, n, ttl.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("smtp limiter: share the RCPT limit of %s: %w", host, err)
	}
	return nil
}

// SharedRcptLimit implements LimitSharer: 0 when none is known.
func (l *RedisLimiter) SharedRcptLimit(ctx context.Context, host string) (int, error) {
	n, err := l.rdb.Get(ctx, l.rcptKey(host)).Int()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("smtp limiter: the RCPT limit of %s: %w", host, err)
	}
	return n, nil
}
