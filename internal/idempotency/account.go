package idempotency

// Per-account accounting of stored answers (issue 26, item 3). A record is
// stored only for an answer worth replaying (one that kept a charge, a
// quota unit or a job), but a paying account could still fill a
// noeviction Redis with them: 20 requests a second, each with a new key,
// keep 1.7 million answers for 24 h. So every stored answer is counted
// against its account, and past the account's limit a new key is refused
// (the API answers 429 idempotency_records_limited) until enough of the
// account's answers expire; a key that already has an answer is still
// replayed, and a request without a key is not affected. The limit is
// Options.MaxAccountBytes unless the account overrides it (`bulkd admin
// account limits ACCOUNT --idempotency-bytes V`: the field
// limit:idempotency_bytes of the account's hash, internal/accounts), read
// by the check in the same step as the usage, on the account's slot.
//
// The records live on their API key's slot ({key id}); the account's
// usage lives on the account's ({account id}): two keys,
//
//	bulkd:acct:{A}:idem        zset   record key -> its expiry (ms)
//	bulkd:acct:{A}:idem:size   hash   record key -> bytes; "total" -> their sum
//
// so counting is a second script after Save, not the same step (Redis
// Cluster). What that costs: an answer stored by a process that dies
// before counting it is not counted (until it expires, 24 h), and a
// record deleted before its expiry (Forget not called) stays counted until
// then. Both err by one record; neither lets a flood through. The check
// (Admit) is made before the request runs and the answer counted after,
// so an account can pass its limit by the answers of the requests it has
// running when it reaches it (bounded by its request rate), never more.

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
)

// RecordOverhead is what a stored answer is counted for beyond its body
// and content type: the record's other fields (state, owner, first
// request time, fingerprint, status) and Redis's own per-key cost,
// rounded up: a 333-byte answer's record measured 1,200 bytes with MEMORY
// USAGE, and its usage entries add some more. It makes a flood of tiny
// answers count too.
const RecordOverhead = 1024

// usageKeys are an account's usage keys (account.go's doc comment).
func usageKeys(accountID string) []string {
	z := "bulkd:acct:{" + accountID + "}:idem"
	return []string{z, z + ":size"}
}

// pruneLua drops the account's records past their expiry (by the store's
// clock, ARGV[1]) from its usage, at most 1,000 a call (a script stays
// short; the next call takes the rest).
const pruneLua = `
local function prune(z, h, now)
  local old = redis.call('ZRANGEBYSCORE', z, '-inf', now, 'LIMIT', 0, 1000)
  if #old == 0 then return end
  local freed = 0
  for _, m in ipairs(old) do
    freed = freed + (tonumber(redis.call('HGET', h, m)) or 0)
    redis.call('HDEL', h, m)
  end
  redis.call('ZREM', z, unpack(old))
  redis.call('HINCRBY', h, 'total', -freed)
end
`

// admitScript: KEYS = zset, hash, the account's hash (its override).
// ARGV = now ms, the default max bytes. Returns {1, used, 0, max} (room),
// or {0, used, oldest expiry ms, max} (full); max is the account's
// effective limit (0: none).
var admitScript = redis.NewScript(pruneLua + `
prune(KEYS[1], KEYS[2], ARGV[1])
local used = tonumber(redis.call('HGET', KEYS[2], 'total') or '0')
local max = tonumber(redis.call('HGET', KEYS[3], '` + overrideField + `') or ARGV[2]) or 0
if max <= 0 or used < max then return {1, used, 0, max} end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, used, tonumber(first[2] or ARGV[1]), max}
`)

// overrideField is the account hash's field that overrides the limit.
var overrideField = accounts.LimitField(accounts.LimitIdempotencyBytes)

// usageScript prunes and returns the usage. KEYS = zset, hash. ARGV = now
// ms. Returns {bytes, records}.
var usageScript = redis.NewScript(pruneLua + `
prune(KEYS[1], KEYS[2], ARGV[1])
return {tonumber(redis.call('HGET', KEYS[2], 'total') or '0'), redis.call('ZCARD', KEYS[1])}
`)

// countScript counts (or recounts) a stored answer.
// KEYS = zset, hash. ARGV = now ms, record key, bytes, expiry ms, ttl ms.
var countScript = redis.NewScript(pruneLua + `
prune(KEYS[1], KEYS[2], ARGV[1])
local old = tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0')
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('HINCRBY', KEYS[2], 'total', tonumber(ARGV[3]) - old)
redis.call('ZADD', KEYS[1], ARGV[4], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return 1
`)

// forgetScript stops counting a record. KEYS = zset, hash. ARGV = record key.
var forgetScript = redis.NewScript(`
local b = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
if b ~= 0 then redis.call('HINCRBY', KEYS[2], 'total', -b) end
return b
`)

// Full is Admit's refusal: the account's stored answers hold Used bytes,
// at or past Max; the oldest of them expires in RetryAfter.
type Full struct {
	Used, Max  int64
	RetryAfter time.Duration
}

// Admit says whether accountID has room for another stored answer under
// its effective limit (its override, else Options.MaxAccountBytes): nil,
// or what holds it up. It reads Redis even when the default is no limit,
// since one account's override may set one.
func (s *Store) Admit(ctx context.Context, accountID string) (*Full, error) {
	now := s.now().UnixMilli()
	keys := append(usageKeys(accountID), accounts.AccountKey(accountID))
	res, err := admitScript.Run(ctx, s.rdb, keys, now, s.opts.MaxAccountBytes).Int64Slice()
	if err != nil {
		return nil, err
	}
	if len(res) != 4 || res[0] == 1 {
		return nil, nil
	}
	return &Full{Used: res[1], Max: res[3], RetryAfter: time.Duration(max(res[2]-now, 1000)) * time.Millisecond}, nil
}

// StoredBytes is what a stored answer of body and content type ct is
// counted for.
func StoredBytes(ct string, body []byte) int64 {
	return int64(len(body)+len(ct)) + RecordOverhead
}

// count counts record rk's stored answer against accountID until it
// expires (TTL after firstMs, the record's first request).
func (s *Store) count(ctx context.Context, accountID, rk string, bytes, expiresMs int64) error {
	now := s.now().UnixMilli()
	ttl := max(expiresMs-now, 1000) + time.Minute.Milliseconds()
	return countScript.Run(ctx, s.rdb, usageKeys(accountID), now, rk, bytes, expiresMs, ttl).Err()
}

// Usage is the bytes accountID's stored answers are counted for, and how
// many there are (expired ones pruned first, by the store's clock).
func (s *Store) Usage(ctx context.Context, accountID string) (bytes, records int64, err error) {
	return AccountUsage(ctx, s.rdb, accountID, s.now())
}

// AccountUsage is Usage without a Store (`bulkd admin account limits`):
// the bytes accountID's stored answers are counted for and how many there
// are, the ones expired by now pruned first.
func AccountUsage(ctx context.Context, rdb redis.UniversalClient, accountID string, now time.Time) (bytes, records int64, err error) {
	res, err := usageScript.Run(ctx, rdb, usageKeys(accountID), now.UnixMilli()).Int64Slice()
	if err != nil {
		return 0, 0, fmt.Errorf("read the idempotency usage of account %s: %w", accountID, err)
	}
	return res[0], res[1], nil
}

// Forget stops counting record rk against accountID (the record was
// deleted before its expiry: the job it replays was deleted). It returns
// the bytes it was counted for.
func Forget(ctx context.Context, rdb redis.UniversalClient, accountID, rk string) (int64, error) {
	return forgetScript.Run(ctx, rdb, usageKeys(accountID), rk).Int64()
}
