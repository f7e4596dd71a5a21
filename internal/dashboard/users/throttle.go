package users

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sign-in throttle scripts. Each touches one key (Redis Cluster).
var (
	// pairScript: KEYS[1] the pair's record; ARGV now (ms), free
	// attempts, first delay (ms), longest delay (ms), memory (ms). It
	// returns how many ms the attempt must still wait (nothing counted),
	// or 0: the attempt is counted and goes ahead, and the next one's
	// earliest time is set.
	pairScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local nxt = tonumber(redis.call('HGET', KEYS[1], 'next') or '0')
if now < nxt then return nxt - now end
local n = redis.call('HINCRBY', KEYS[1], 'n', 1)
local free = tonumber(ARGV[2])
if n >= free then
  local d = math.min(tonumber(ARGV[3]) * 2 ^ math.min(n - free, 40), tonumber(ARGV[4]))
  redis.call('HSET', KEYS[1], 'next', string.format('%d', now + d))
end
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 0`)
	// clientScript: KEYS[1] the client's attempts (zset of times); ARGV
	// now ms, the window (ms), the limit, a unique member. A sliding
	// window: the attempts of the last window are counted; past the limit
	// it returns how many ms until the oldest leaves it (nothing counted:
	// the set never holds more than the limit), else 0 and the attempt is
	// counted.
	clientScript = redis.NewScript(slidingLua + `
if n >= tonumber(ARGV[3]) then return wait end
redis.call('ZADD', KEYS[1], now, ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 0`)
	// userScript: KEYS[1] the email's attempts (zset of times), KEYS[2]
	// its known clients (zset client -> last sign-in ms); ARGV now ms, the
	// window (ms), the limit, a unique member, the client, the known
	// clients' lifetime (ms). As clientScript, except that a known client
	// is never refused (its attempt is still counted, up to the limit).
	userScript = redis.NewScript(slidingLua + `
local seen = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[5]) or '0')
local known = seen > 0 and now - seen < tonumber(ARGV[6])
if n >= tonumber(ARGV[3]) then
  if known then return 0 end
  return wait
end
redis.call('ZADD', KEYS[1], now, ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 0`)
	// refundScript: KEYS[1] an attempts set; gives the newest attempt
	// back (a successful sign-in's own).
	refundScript = redis.NewScript(`
redis.call('ZPOPMAX', KEYS[1])
return 0`)
	// knownScript: KEYS[1] the email's known clients; ARGV the client, now
	// ms, how many to keep, their lifetime (ms). Records a sign-in.
	knownScript = redis.NewScript(`
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', tonumber(ARGV[2]) - tonumber(ARGV[4]))
local n = redis.call('ZCARD', KEYS[1])
local keep = tonumber(ARGV[3])
if n > keep then redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n - keep - 1) end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 0`)
)

// slidingLua starts the sliding-window scripts: it drops KEYS[1]'s
// attempts older than the window and sets n (those left) and wait (ms
// until the oldest leaves the window).
const slidingLua = `
local now, win = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - win)
local n = redis.call('ZCARD', KEYS[1])
local wait = 1
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if oldest[2] then wait = math.max(tonumber(oldest[2]) + win - now, 1) end
`

// Attempt asks whether a sign-in attempt for email from client (the
// caller's idea of the client: its IP, an IPv6 client's /64) may go
// ahead now, and counts it. When not, wait is how long until one may. An
// empty email (a sign-in link) counts against the client alone.
//
// Three limits, in this order: the client's (any emails), the pair's
// (delays), the email's (any clients, known clients excepted). An
// attempt refused by one is not counted by the next (a client held back
// by its pair's delays does not use the email's allowance up); the scripts each check and
// count in one step, so concurrent attempts cannot all pass.
func (s *Store) Attempt(ctx context.Context, email, client string) (bool, time.Duration, error) {
	now := s.now()
	win := s.Opts.AttemptWindow
	ms, err := clientScript.Run(ctx, s.rdb, []string{clientKey(client)},
		now.UnixMilli(), win.Milliseconds(), s.Opts.ClientAttempts, attemptMember(now)).Int64()
	if err != nil {
		return false, 0, fmt.Errorf("sign-in attempts: %w", err)
	}
	if ms > 0 {
		return false, time.Duration(ms) * time.Millisecond, nil
	}
	if email == "" {
		return true, 0, nil
	}
	ms, err = pairScript.Run(ctx, s.rdb, []string{pairKey(email, client)}, now.UnixMilli(), s.Opts.FreeAttempts,
		s.Opts.AttemptDelay.Milliseconds(), s.Opts.MaxAttemptDelay.Milliseconds(), win.Milliseconds()).Int64()
	if err != nil {
		return false, 0, fmt.Errorf("sign-in attempts: %w", err)
	}
	if ms > 0 {
		return false, time.Duration(ms) * time.Millisecond, nil
	}
	ms, err = userScript.Run(ctx, s.rdb, userKeys(email), now.UnixMilli(), s.Opts.UserWindow.Milliseconds(),
		s.Opts.UserAttempts, attemptMember(now), client, s.Opts.KnownClientTTL.Milliseconds()).Int64()
	if err != nil {
		return false, 0, fmt.Errorf("sign-in attempts: %w", err)
	}
	if ms > 0 {
		return false, time.Duration(ms) * time.Millisecond, nil
	}
	return true, 0, nil
}

// attemptMember is a unique member of an attempts set at now.
func attemptMember(now time.Time) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return strconv.FormatInt(now.UnixMilli(), 10) + "-" + hex.EncodeToString(b[:])
}

// Succeeded is told that an attempt signed in: the pair's count is
// forgotten, and the client gets its attempt back (many people may share
// one address; only failures should use its allowance up).
//
// The email's count gives its attempt back too, and the client becomes
// one the email is known from: the email's limit never refuses it.
func (s *Store) Succeeded(ctx context.Context, email, client string) error {
	if email != "" {
		if err := s.rdb.Del(ctx, pairKey(email, client)).Err(); err != nil {
			return err
		}
		uk := userKeys(email)
		if err := refundScript.Run(ctx, s.rdb, uk[:1]).Err(); err != nil {
			return err
		}
		if err := knownScript.Run(ctx, s.rdb, uk[1:], client, s.now().UnixMilli(), s.Opts.KnownClients,
			s.Opts.KnownClientTTL.Milliseconds()).Err(); err != nil {
			return err
		}
	}
	return refundScript.Run(ctx, s.rdb, []string{clientKey(client)}).Err()
}
