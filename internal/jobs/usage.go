package jobs

// What an account's jobs hold (docs/security.md): how many are not
// completed yet, and how many bytes of job data its retained jobs keep in
// Redis. A submission reserves both in one script on the account's hash
// slot before anything is charged or stored, under the account's limits
// (accounts.Limits, overrides read from the account's hash in the same
// step), so concurrent submissions of one account can never together pass
// a limit: exactly as many are admitted as fit.
//
// Where the reservations end:
//   - the active-job place when the job completes (Store.settle, after
//     its refund: crash-safe through SettleActive like the rest of
//     completing), or when the job is deleted or rolled back;
//   - the bytes when the job is deleted or rolled back, or when it
//     expires: each entry is scored by its job's expiry and a reservation
//     drops the entries past it first (nothing has to run at expiry).
//
// A reservation left behind by a crash between two steps (a job deleted
// whose release was lost) is found when it matters: a refused reservation
// checks the entries it counted against the jobs themselves once and
// drops those whose job is gone (or, for the active count, completed)
// before the refusal stands (repair).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
)

// The account's usage keys, on its hash slot (the account hash's tag).
func accountActiveKey(a string) string { return prefix + "acct:{" + a + "}:jobs:active" } // zset: job -> expiry ms
func accountStoredKey(a string) string { return prefix + "acct:{" + a + "}:jobs:stored" } // zset: job -> expiry ms
func accountBytesKey(a string) string  { return prefix + "acct:{" + a + "}:jobs:bytes" }  // hash: job -> bytes, "*" -> total

// DefaultAnswerBytes is the bytes reserved per distinct input for its
// answer until the job completes and its exact size is known: above the
// answers measured (a 100,000-row company job, 10% found: 456 bytes on
// average, a found company about 1 KB; docs/security.md), so a running
// job is rather over- than under-counted.
const DefaultAnswerBytes = 1024

// activeJobsRetryAfter is the Retry-After of a submission refused at the
// active-job limit: jobs end on their own, and a client that waits this
// long is not hammering the API meanwhile.
const activeJobsRetryAfter = 30 * time.Second

// usagePrelude drops the entries of jobs past their expiry from the
// account's usage (at most 1,000 per call; the rest go on the next).
// KEYS[2] active zset, KEYS[3] stored zset, KEYS[4] bytes hash; now ms
// in ARGV[2].
var usagePrelude = accounts.PruneExpiredLua(3, 4) + `
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local function expire(k, at)
  local ttl = redis.call('PTTL', k)
  if ttl < 0 or now + ttl < at then redis.call('PEXPIREAT', k, at) end
end
`

// reserveScript reserves a submission's place among the account's active
// jobs (when it has work to do) and its bytes, or says which limit it
// would pass. KEYS = account hash, active zset, stored zset, bytes hash.
// ARGV = job, now ms, expires ms, bytes, default active-job limit, default
// stored-bytes limit, 1 when the job takes an active place.
// Returns {0, active, bytes used} reserved (also when it already was: a
// retried call); {-1, active, limit, 0} at the active-job limit; {-2, used,
// limit, ms when enough expires to make room, or -1} at the bytes limit.
var reserveScript = redis.NewScript(usagePrelude + `
if redis.call('ZSCORE', KEYS[3], ARGV[1]) then return {0, 0, 0, 0} end
local want = tonumber(ARGV[4])
local amax = tonumber(redis.call('HGET', KEYS[1], 'limit:active_jobs') or ARGV[5]) or 0
local bmax = tonumber(redis.call('HGET', KEYS[1], 'limit:stored_bytes') or ARGV[6]) or 0
local active = redis.call('ZCARD', KEYS[2])
if ARGV[7] == '1' and amax > 0 and active >= amax then return {-1, active, amax, 0} end
local used = tonumber(redis.call('HGET', KEYS[4], '*') or '0')
if bmax > 0 and used + want > bmax then` + accounts.FreedAtLua(3, 4) + `
  return {-2, used, bmax, at}
end
local exp = tonumber(ARGV[3])
if ARGV[7] == '1' then
  redis.call('ZADD', KEYS[2], exp, ARGV[1])
  expire(KEYS[2], exp)
end
redis.call('ZADD', KEYS[3], exp, ARGV[1])
redis.call('HSET', KEYS[4], ARGV[1], want)
redis.call('HINCRBY', KEYS[4], '*', want)
expire(KEYS[3], exp)
expire(KEYS[4], exp)
return {0, active + tonumber(ARGV[7]), used + want, 0}
`)

// releaseUsageScript ends a job's reservations. KEYS = active zset, stored
// zset, bytes hash. ARGV = job, mode: "done" (completed: leave the active
// jobs; its bytes stay until it expires) or "gone" (deleted or rolled
// back: everything); in mode "done", the job's exact bytes (replacing the
// estimate reserved for its answers) or -1. Idempotent.
var releaseUsageScript = redis.NewScript(`
redis.call('ZREM', KEYS[1], ARGV[1])
if ARGV[2] == 'gone' then
  redis.call('ZREM', KEYS[2], ARGV[1])
  local b = redis.call('HGET', KEYS[3], ARGV[1])
  if b then
    redis.call('HDEL', KEYS[3], ARGV[1])
    redis.call('HINCRBY', KEYS[3], '*', -tonumber(b))
  end
  return 1
end
local exact = tonumber(ARGV[3])
local b = redis.call('HGET', KEYS[3], ARGV[1])
if exact >= 0 and b and redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  redis.call('HSET', KEYS[3], ARGV[1], exact)
  redis.call('HINCRBY', KEYS[3], '*', exact - tonumber(b))
end
return 1
`)

// usageScript reads an account's usage after dropping expired entries.
// KEYS = account hash (unused but for the slot), active zset, stored zset,
// bytes hash. ARGV = (unused), now ms. Returns {active jobs, bytes}.
var usageScript = redis.NewScript(usagePrelude + `
return {redis.call('ZCARD', KEYS[2]), tonumber(redis.call('HGET', KEYS[4], '*') or '0')}
`)

func usageKeys(accountID string) []string {
	return []string{accounts.AccountKey(accountID), accountActiveKey(accountID), accountStoredKey(accountID), accountBytesKey(accountID)}
}

// reserve takes j's active place and bytes under the account's limits; a
// *accounts.LimitError when it does not fit (nothing reserved).
func (e *Engine) reserve(ctx context.Context, j *Job, bytes int64) error {
	active := 0
	if j.Status == StatusRunning {
		active = 1
	}
	for try := 0; ; try++ {
		res, err := reserveScript.Run(ctx, e.Store.rdb, usageKeys(j.AccountID), j.ID, e.Now().UnixMilli(), j.ExpiresAt.UnixMilli(), bytes,
			e.Limits.ActiveJobs, e.Limits.StoredBytes, active).Int64Slice()
		if err != nil {
			return fmt.Errorf("reserve the account's usage: %w", err)
		}
		if res[0] == 0 {
			return nil
		}
		if try == 0 && e.Store.repairDue(ctx, j.AccountID) {
			if n, err := e.Store.repairUsage(ctx, j.AccountID, res[0] == -1); err != nil {
				e.Log.Warn("checking the account's usage against its jobs failed", "account", j.AccountID, "err", err)
			} else if n > 0 {
				e.Log.Warn("dropped usage of jobs that were gone or completed", "account", j.AccountID, "entries", n)
				continue
			}
		}
		if res[0] == -1 {
			return &accounts.LimitError{Limit: accounts.LimitActiveJobs, Max: res[2], Used: res[1], Requested: 1, RetryAfter: activeJobsRetryAfter}
		}
		le := &accounts.LimitError{Limit: accounts.LimitStoredBytes, Max: res[2], Used: res[1], Requested: bytes}
		if res[3] > 0 {
			le.RetryAfter = max(time.UnixMilli(res[3]).Sub(e.Now()), time.Second)
		}
		return le
	}
}

// releaseUsage ends a job's reservations (mode "gone" or "done", see
// releaseUsageScript).
func (s *Store) releaseUsage(ctx context.Context, accountID, jobID, mode string, exact int64) error {
	keys := []string{accountActiveKey(accountID), accountStoredKey(accountID), accountBytesKey(accountID)}
	if err := releaseUsageScript.Run(ctx, s.rdb, keys, jobID, mode, exact).Err(); err != nil {
		return fmt.Errorf("release the usage of job %s: %w", jobID, err)
	}
	return nil
}

// Usage is what an account's jobs hold now.
type Usage struct {
	ActiveJobs  int64
	StoredBytes int64
}

// AccountUsage reads an account's job usage at now (bulkd admin).
func AccountUsage(ctx context.Context, rdb redis.UniversalClient, accountID string, now time.Time) (Usage, error) {
	res, err := usageScript.Run(ctx, rdb, usageKeys(accountID), "", now.UnixMilli()).Int64Slice()
	if err != nil {
		return Usage{}, fmt.Errorf("read the usage of account %s: %w", accountID, err)
	}
	return Usage{ActiveJobs: res[0], StoredBytes: res[1]}, nil
}

// maxRepair bounds the entries one repair checks.
const maxRepair = 2000

// repairUsage checks the account's usage entries against the jobs: an
// entry whose job is gone (deleted, its release lost to a crash) is
// dropped, and so is the active place of a job that completed. A job
// reserved but not stored yet has no metadata: its submission's pending
// mark is what keeps it, so the marks are read before the metadata (a
// submission commits, dropping its mark, only after its metadata exists;
// read in the other order, a job could be stored and committed in
// between and look gone). It returns how many entries it dropped. active
// says whether the active set was what refused (else the bytes).
// repairEvery is the least time between two repairs of one account's
// usage: a refusal is the normal answer of an account at its limit, and
// each repair reads up to maxRepair entries and their jobs.
const repairEvery = 10 * time.Second

// repairDue reports whether the account's usage may be repaired now (at
// most once per repairEvery, over all processes); a Redis error says yes.
func (s *Store) repairDue(ctx context.Context, accountID string) bool {
	ok, err := s.rdb.SetNX(ctx, prefix+"acct:{"+accountID+"}:jobs:repaired", 1, repairEvery).Result()
	return ok || err != nil
}

func (s *Store) repairUsage(ctx context.Context, accountID string, active bool) (int, error) {
	key := accountStoredKey(accountID)
	if active {
		key = accountActiveKey(accountID)
	}
	ids, err := s.rdb.ZRange(ctx, key, 0, maxRepair-1).Result()
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	pipe := s.rdb.Pipeline()
	marks := make([]*redis.FloatCmd, len(ids))
	for i, id := range ids {
		marks[i] = pipe.ZScore(ctx, pendingKey, mark(id, accountID))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	var check []string
	for i, id := range ids {
		if marks[i].Err() != nil { // not pending: stored and committed, or gone
			check = append(check, id)
		}
	}
	if len(check) == 0 {
		return 0, nil
	}
	pipe = s.rdb.Pipeline()
	sts := make([]*redis.SliceCmd, len(check))
	for i, id := range check {
		sts[i] = pipe.HMGet(ctx, metaKey(id), "id", "status")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	n := 0
	for i, id := range check {
		v := sts[i].Val()
		idv, _ := v[0].(string)
		st, _ := v[1].(string)
		switch {
		case idv == "":
			err = s.releaseUsage(ctx, accountID, id, "gone", -1)
		case active && st == StatusCompleted:
			err = s.releaseUsage(ctx, accountID, id, "done", -1)
		default:
			continue
		}
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// storedBytes is the exact job data a completed job holds: what its
// submission wrote (row map and inputs, noted as base_bytes) and its
// answers (answer_bytes, counted by the record script); -1 when the job
// predates the count.
func storedBytes(m []any) int64 {
	base, ok := m[0].(string)
	if !ok || base == "" {
		return -1
	}
	b, _ := strconv.ParseInt(base, 10, 64)
	ans, _ := m[1].(string)
	a, _ := strconv.ParseInt(ans, 10, 64)
	return b + a
}
