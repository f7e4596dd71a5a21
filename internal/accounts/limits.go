package accounts

// Per-account limits (docs/security.md, "Free ways to fill Redis"): what
// one account may hold at once, so that no customer fills a Redis that runs
// with noeviction (a full Redis fails every write, for everyone) or takes
// the whole request budget with many keys. Each limit has a process-wide
// default (a flag of the server, config.Limits) and may be overridden for
// one account (`bulkd admin account limits`): the override is a field of
// the account's own hash, so the scripts that enforce a limit read it in
// the same atomic step as the count they check, on the account's hash
// slot.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Limit names: what `bulkd admin account limits` shows and sets, the
// suffix of the account hash's override field, and what a refusal names.
const (
	// LimitActiveJobs: jobs of the account not completed yet (running,
	// retrying or settling).
	LimitActiveJobs = "active_jobs"
	// LimitStoredBytes: bytes of job data (row maps, inputs, answers) the
	// account's retained jobs hold in Redis.
	LimitStoredBytes = "stored_bytes"
	// LimitDrafts: dashboard uploads waiting between their steps.
	LimitDrafts = "drafts"
	// LimitDraftBytes: bytes of those uploads.
	LimitDraftBytes = "draft_bytes"
	// LimitKeys: API keys of the account that are not revoked.
	LimitKeys = "keys"
	// LimitRequestRate: requests per second of all the account's keys
	// together, on top of each key's own limit.
	LimitRequestRate = "request_rate"
	// LimitIdempotencyBytes: bytes of the answers the account's keys keep
	// for their Idempotency-Keys (internal/idempotency, account.go).
	LimitIdempotencyBytes = "idempotency_bytes"
)

// LimitNames lists every limit, in the order they are shown.
var LimitNames = []string{LimitActiveJobs, LimitStoredBytes, LimitDrafts, LimitDraftBytes, LimitKeys, LimitRequestRate, LimitIdempotencyBytes}

// Limits are the per-account limits; 0 means no limit.
type Limits struct {
	ActiveJobs  int64
	StoredBytes int64
	Drafts      int64
	DraftBytes  int64
	Keys        int64
	RequestRate int64
	// IdempotencyBytes: the default is the servers'
	// --account-max-idempotency-bytes.
	IdempotencyBytes int64
}

func (l *Limits) field(name string) *int64 {
	switch name {
	case LimitActiveJobs:
		return &l.ActiveJobs
	case LimitStoredBytes:
		return &l.StoredBytes
	case LimitDrafts:
		return &l.Drafts
	case LimitDraftBytes:
		return &l.DraftBytes
	case LimitKeys:
		return &l.Keys
	case LimitRequestRate:
		return &l.RequestRate
	case LimitIdempotencyBytes:
		return &l.IdempotencyBytes
	}
	return nil
}

// Get returns the limit called name (0 for an unknown name).
func (l Limits) Get(name string) int64 {
	if p := l.field(name); p != nil {
		return *p
	}
	return 0
}

// Set sets the limit called name.
func (l *Limits) Set(name string, v int64) error {
	p := l.field(name)
	if p == nil {
		return fmt.Errorf("unknown limit %q (want one of %s)", name, strings.Join(LimitNames, ", "))
	}
	if v < 0 {
		return fmt.Errorf("limit %s: %d is negative (0 means no limit)", name, v)
	}
	*p = v
	return nil
}

// With returns l with overrides applied: the account's effective limits.
func (l Limits) With(overrides map[string]int64) Limits {
	for name, v := range overrides {
		_ = l.Set(name, v)
	}
	return l
}

// LimitField is the field of the account hash that overrides a limit.
func LimitField(name string) string { return "limit:" + name }

// overridesFrom reads the override fields of an account hash (as HGETALL
// or HMGET read it: a missing or empty field is no override).
func overridesFrom(m map[string]string) map[string]int64 {
	var out map[string]int64
	for _, name := range LimitNames {
		s, ok := m[LimitField(name)]
		if !ok || s == "" {
			continue
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			continue
		}
		if out == nil {
			out = map[string]int64{}
		}
		out[name] = v
	}
	return out
}

// LimitOverrides reads an account's overrides (name -> value; a limit not
// overridden is absent).
func (s *Store) LimitOverrides(ctx context.Context, accountID string) (map[string]int64, error) {
	a, err := s.Account(ctx, accountID)
	if err != nil {
		return nil, err
	}
	return a.Overrides, nil
}

// SetLimit overrides one limit of an account (0: no limit for it).
func (s *Store) SetLimit(ctx context.Context, accountID, name string, v int64) error {
	var l Limits
	if err := l.Set(name, v); err != nil {
		return err
	}
	if _, err := s.Account(ctx, accountID); err != nil {
		return err
	}
	return s.rdb.HSet(ctx, AccountKey(accountID), LimitField(name), v).Err()
}

// ClearLimit drops an account's override of one limit: the default
// applies again.
func (s *Store) ClearLimit(ctx context.Context, accountID, name string) error {
	var l Limits
	if err := l.Set(name, 0); err != nil {
		return err
	}
	if _, err := s.Account(ctx, accountID); err != nil {
		return err
	}
	return s.rdb.HDel(ctx, AccountKey(accountID), LimitField(name)).Err()
}

// LimitError is a request refused because the account is at one of its
// limits. Nothing was charged or stored.
type LimitError struct {
	Limit     string // one of the Limit names
	Max       int64  // the account's limit
	Used      int64  // what the account holds now
	Requested int64  // what the request needed (1 job, N bytes, 1 key)
	// RetryAfter is when the request may succeed if retried unchanged:
	// when enough of the account's data expires, or a guess for
	// things that end on their own (jobs completing); 0 when only a
	// change of the request or of the limit can help.
	RetryAfter time.Duration
}

func (e *LimitError) Error() string {
	switch e.Limit {
	case LimitStoredBytes, LimitDraftBytes, LimitIdempotencyBytes:
		return fmt.Sprintf("account limit %s reached: %d of %d bytes held, %d more requested", e.Limit, e.Used, e.Max, e.Requested)
	}
	return fmt.Sprintf("account limit %s reached: %d of %d in use", e.Limit, e.Used, e.Max)
}

// revokedKeysKey is the set of an account's revoked key ids (a subset of
// AccountKeysKey): the key-limit script counts the keys that are not
// revoked from the two sets' sizes, on the account's slot (the keys' own
// records live in other slots).
func revokedKeysKey(id string) string { return prefix + "acct:{" + id + "}:keys:revoked" }

// maxRevokedKept bounds the records of revoked keys an account keeps (the
// dashboard lists them): past it, the oldest revoked records are deleted
// when a key is made, so creating and revoking keys in a loop cannot grow
// Redis either.
const maxRevokedKept = 50

// addKeyScript lists a new key id under its account unless the account is
// at its key limit. KEYS = account hash, key ids, revoked key ids.
// ARGV = key id, default limit. Returns {status, keys not revoked, limit}:
// 0 listed, -1 at the limit, -2 no account.
var addKeyScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return {-2, 0, 0} end
local max = tonumber(redis.call('HGET', KEYS[1], 'limit:keys') or ARGV[2]) or 0
local n = redis.call('SCARD', KEYS[2]) - redis.call('SCARD', KEYS[3])
if max > 0 and n >= max then return {-1, n, max} end
redis.call('SADD', KEYS[2], ARGV[1])
return {0, n + 1, max}
`)

// listKey runs addKeyScript; a refusal is checked once against the keys'
// own records (a revocation whose second step was lost, or keys revoked
// before the revoked set existed, make the sets' sizes overcount) before
// it stands.
func (s *Store) listKey(ctx context.Context, accountID, id string) error {
	for try := 0; ; try++ {
		res, err := addKeyScript.Run(ctx, s.rdb, []string{AccountKey(accountID), AccountKeysKey(accountID), revokedKeysKey(accountID)},
			id, s.Limits.Keys).Int64Slice()
		if err != nil {
			return fmt.Errorf("create key: %w", err)
		}
		switch res[0] {
		case 0:
			return nil
		case -2:
			return ErrNotFound
		}
		if try == 0 {
			if fixed, err := s.syncRevoked(ctx, accountID); err != nil {
				return err
			} else if fixed {
				continue
			}
		}
		return &LimitError{Limit: LimitKeys, Max: res[2], Used: res[1], Requested: 1}
	}
}

// syncRevoked makes the account's revoked set agree with its keys'
// records; it reports whether it changed anything.
func (s *Store) syncRevoked(ctx context.Context, accountID string) (bool, error) {
	keys, err := s.Keys(ctx, accountID)
	if err != nil {
		return false, err
	}
	listed, err := s.rdb.SMembers(ctx, revokedKeysKey(accountID)).Result()
	if err != nil {
		return false, fmt.Errorf("create key: %w", err)
	}
	in := make(map[string]bool, len(listed))
	for _, id := range listed {
		in[id] = true
	}
	var add, drop []any
	for _, k := range keys {
		if k.Revoked && !in[k.ID] {
			add = append(add, k.ID)
		}
		delete(in, k.ID)
	}
	for id := range in { // revoked ids no longer listed as keys
		drop = append(drop, id)
	}
	pipe := s.rdb.Pipeline()
	if len(add) > 0 {
		pipe.SAdd(ctx, revokedKeysKey(accountID), add...)
	}
	if len(drop) > 0 {
		pipe.SRem(ctx, revokedKeysKey(accountID), drop...)
	}
	if len(add)+len(drop) == 0 {
		return false, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return false, fmt.Errorf("create key: %w", err)
	}
	return true, nil
}

// pruneRevoked deletes the oldest revoked key records of an account past
// maxRevokedKept. Best effort: a failure leaves a few more records.
func (s *Store) pruneRevoked(ctx context.Context, accountID string) {
	n, err := s.rdb.SCard(ctx, revokedKeysKey(accountID)).Result()
	if err != nil || n <= maxRevokedKept {
		return
	}
	keys, err := s.Keys(ctx, accountID)
	if err != nil {
		return
	}
	var revoked []Key
	for _, k := range keys {
		if k.Revoked {
			revoked = append(revoked, k)
		}
	}
	if len(revoked) <= maxRevokedKept {
		return
	}
	// Oldest revocation first.
	for i := 1; i < len(revoked); i++ {
		for j := i; j > 0 && revoked[j].RevokedAt.Before(revoked[j-1].RevokedAt); j-- {
			revoked[j], revoked[j-1] = revoked[j-1], revoked[j]
		}
	}
	for _, k := range revoked[:len(revoked)-maxRevokedKept] {
		// Unlisted first, then the record: a crash in between leaves a
		// revoked record nobody lists, never a listed key without one.
		pipe := s.rdb.Pipeline()
		pipe.SRem(ctx, AccountKeysKey(accountID), k.ID)
		pipe.SRem(ctx, revokedKeysKey(accountID), k.ID)
		if _, err := pipe.Exec(ctx); err != nil {
			return
		}
		if err := s.rdb.Del(ctx, apiKeyKey(k.ID)).Err(); err != nil {
			return
		}
	}
}

// ActiveKeys is how many of an account's keys are not revoked (the key
// limit's usage).
func (s *Store) ActiveKeys(ctx context.Context, accountID string) (int64, error) {
	keys, err := s.Keys(ctx, accountID)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, k := range keys {
		if !k.Revoked {
			n++
		}
	}
	return n, nil
}

// PruneExpiredLua is the Lua that starts every script of a sized
// reservation set (an account's stored jobs, its dashboard drafts): a zset
// of ids scored by their expiry in ms (KEYS[zset]) and a hash of each id's
// bytes with their total under "*" (KEYS[sizes]). It drops the entries past
// ARGV[2] (now, in ms), at most 1,000 a call (the rest go on the next), and
// leaves the local "now" for the script that follows.
func PruneExpiredLua(zset, sizes int) string {
	return fmt.Sprintf(`
local now = tonumber(ARGV[2])
local gone = redis.call('ZRANGEBYSCORE', KEYS[%[1]d], '-inf', now, 'LIMIT', 0, 1000)
local freed = 0
for _, id in ipairs(gone) do
  freed = freed + tonumber(redis.call('HGET', KEYS[%[2]d], id) or '0')
  redis.call('HDEL', KEYS[%[2]d], id)
  redis.call('ZREM', KEYS[%[1]d], id)
end
if freed > 0 then redis.call('HINCRBY', KEYS[%[2]d], '*', -freed) end
`, zset, sizes)
}

// FreedAtLua is the Lua, for the same sized reservation sets, that says
// when a refused reservation would fit: it sets the local "at" to the
// expiry (ms) by which enough of the oldest entries leave for used + want
// to fit bmax (locals of the script before it), or -1 when want alone is
// larger than bmax or the first 1,000 entries are not enough (a script
// holds Redis: it reads no more).
func FreedAtLua(zset, sizes int) string {
	return fmt.Sprintf(`
local at = -1
if want <= bmax then
  local need = used + want - bmax
  local z = redis.call('ZRANGE', KEYS[%[1]d], 0, 999, 'WITHSCORES')
  for i = 1, #z, 2 do
    need = need - tonumber(redis.call('HGET', KEYS[%[2]d], z[i]) or '0')
    if need <= 0 then at = tonumber(z[i + 1]); break end
  end
end
`, zset, sizes)
}
