package jobs

// Provisional answers waiting for a retry: claiming the due ones, and the
// set of jobs that have some (Store, store.go).

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// dropRetrying takes a job out of the retrying-jobs set because its retry
// zset looked empty, then looks again: a provisional answer recorded in
// between (by another process, whose ZADD may have come before this ZREM)
// puts it back. It returns the earliest due retry (zero: none).
func (s *Store) dropRetrying(ctx context.Context, jobID string) (time.Time, error) {
	if err := s.rdb.ZRem(ctx, retryingKey, jobID).Err(); err != nil {
		return time.Time{}, fmt.Errorf("drop %s from the retrying jobs: %w", jobID, err)
	}
	next, err := s.nextRetry(ctx, jobID)
	if err != nil || next.IsZero() {
		return time.Time{}, err
	}
	if err := s.rdb.ZAdd(ctx, retryingKey, redis.Z{Score: float64(next.UnixMilli()), Member: jobID}).Err(); err != nil {
		return time.Time{}, fmt.Errorf("re-add %s to the retrying jobs: %w", jobID, err)
	}
	return next, nil
}

// claimRetriesScript takes up to ARGV[2] retries due at ARGV[1] (ms) and
// pushes each one's due time ARGV[3] ms into the future, so a concurrent
// runner does not take it too and a runner that dies leaves it to be taken
// again later; it counts the attempt. KEYS = retry zset, tries hash.
// Returns index, attempts (the first answer was attempt 1), ...
var claimRetriesScript = redis.NewScript(`
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
local out = {}
for _, idx in ipairs(due) do
  redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + tonumber(ARGV[3]), idx)
  local n = redis.call('HINCRBY', KEYS[2], idx, 1)
  out[#out+1] = idx
  out[#out+1] = n + 1
end
if #due > 0 then redis.call('PEXPIREAT', KEYS[2], ARGV[4]) end
return out
`)

// claimRetries takes up to n retries of j due at now; each comes back with
// its attempt number. A claimed retry becomes due again after hold unless
// it is answered before then.
func (s *Store) claimRetries(ctx context.Context, j *Job, now time.Time, n int, hold time.Duration) (idx []int, attempts []int, err error) {
	vals, err := claimRetriesScript.Run(ctx, s.rdb, []string{retryKey(j.ID), triesKey(j.ID)},
		now.UnixMilli(), n, hold.Milliseconds(), j.ExpiresAt.UnixMilli()).Int64Slice()
	if err != nil {
		return nil, nil, fmt.Errorf("claim retries of %s: %w", j.ID, err)
	}
	for i := 0; i+1 < len(vals); i += 2 {
		idx = append(idx, int(vals[i]))
		attempts = append(attempts, int(vals[i+1]))
	}
	return idx, attempts, nil
}

// nextRetry is when j's earliest provisional answer is due (zero: none).
func (s *Store) nextRetry(ctx context.Context, jobID string) (time.Time, error) {
	zs, err := s.rdb.ZRangeWithScores(ctx, retryKey(jobID), 0, 0).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("read retries of %s: %w", jobID, err)
	}
	if len(zs) == 0 {
		return time.Time{}, nil
	}
	return time.UnixMilli(int64(zs[0].Score)).UTC(), nil
}

// syncRetrying sets jobID's score in the retrying-jobs set to its earliest
// due retry (claims move retries later without touching it), or drops the
// job when it has none, and returns when its next retry is due (zero:
// none). Two steps, the retry zset and the set of jobs being in different
// hash slots: a score read here can be overtaken by a concurrent record of
// an earlier retry and written after it, which only delays that retry
// until this score comes due (the runner then finds it due and answers it
// too); a job is never dropped while it has retries (dropRetrying).
func (s *Store) syncRetrying(ctx context.Context, jobID string) (time.Time, error) {
	next, err := s.nextRetry(ctx, jobID)
	if err != nil {
		return time.Time{}, err
	}
	if next.IsZero() {
		return s.dropRetrying(ctx, jobID)
	}
	if err := s.rdb.ZAdd(ctx, retryingKey, redis.Z{Score: float64(next.UnixMilli()), Member: jobID}).Err(); err != nil {
		return time.Time{}, fmt.Errorf("sync retries of %s: %w", jobID, err)
	}
	return next, nil
}

// DueRetryJobs lists up to n jobs with a retry due at now.
func (s *Store) DueRetryJobs(ctx context.Context, now time.Time, n int) ([]string, error) {
	ids, err := s.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: retryingKey, Start: "-inf", Stop: strconv.FormatInt(now.UnixMilli(), 10),
		ByScore: true, Count: int64(n)}).Result()
	if err != nil {
		return nil, fmt.Errorf("list jobs with due retries: %w", err)
	}
	return ids, nil
}
