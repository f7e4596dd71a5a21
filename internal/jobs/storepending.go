package jobs

// Pending marks: a submission in flight is marked until it commits; the
// janitor rolls back one whose mark outlives it (Store, store.go).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// mark is a submission's member in the pending and reclaiming sets.
func mark(jobID, accountID string) string { return jobID + "|" + accountID }

// markPending notes a submission in flight; commit removes the mark. A mark
// that outlives its submission means the process died in between: the
// janitor reverses the charge and deletes what was stored.
func (s *Store) markPending(ctx context.Context, jobID, accountID string, now time.Time) error {
	return s.rdb.ZAdd(ctx, pendingKey, redis.Z{Score: float64(now.UnixMilli()), Member: mark(jobID, accountID)}).Err()
}

func (s *Store) commit(ctx context.Context, jobID, accountID string) error {
	n, err := s.rdb.ZRem(ctx, pendingKey, mark(jobID, accountID)).Result()
	if err != nil {
		return fmt.Errorf("commit %s: %w", jobID, err)
	}
	if n != 1 {
		return fmt.Errorf("commit %s: submission mark gone (reclaimed as abandoned)", jobID)
	}
	return nil
}

// claimScript moves marks older than the cutoff from the pending set to the
// reclaiming set, atomically per mark. KEYS = pending, reclaiming.
// ARGV = cutoff ms, now ms, max marks.
var claimScript = redis.NewScript(`
local marks = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[3])
for _, m in ipairs(marks) do
  redis.call('ZREM', KEYS[1], m)
  redis.call('ZADD', KEYS[2], ARGV[2], m)
end
return #marks
`)

// claimStale moves up to 1,000 marks made before cutoff into the reclaiming
// set.
func (s *Store) claimStale(ctx context.Context, cutoff, now time.Time) (int, error) {
	if err := s.adoptLegacyMarks(ctx, cutoff); err != nil {
		return 0, err
	}
	n, err := claimScript.Run(ctx, s.rdb, []string{pendingKey, reclaimingKey}, cutoff.UnixMilli(), now.UnixMilli(), 1000).Int()
	if err != nil {
		return 0, fmt.Errorf("claim abandoned submissions: %w", err)
	}
	return n, nil
}

// adoptLegacyMarks moves marks that a version before the hash-tagged keys
// left in the old pending set (only those older than cutoff: a live old
// process still commits the others there) and old reclaiming set into the
// new ones. Each mark is added to the new set before it leaves the old
// one, so a crash in between leaves it in both, and rolling a submission
// back twice is harmless. Costs two empty reads once the old sets are
// gone.
func (s *Store) adoptLegacyMarks(ctx context.Context, cutoff time.Time) error {
	for _, m := range []struct {
		from, to string
		stop     string
	}{
		{legacyPendingKey, pendingKey, strconv.FormatInt(cutoff.UnixMilli(), 10)},
		{legacyReclaimingKey, reclaimingKey, "+inf"},
	} {
		zs, err := s.rdb.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: m.from, Start: "-inf", Stop: m.stop, ByScore: true, Count: 1000}).Result()
		if err != nil {
			return fmt.Errorf("adopt marks of %s: %w", m.from, err)
		}
		for _, z := range zs {
			if err := s.rdb.ZAdd(ctx, m.to, z).Err(); err != nil {
				return fmt.Errorf("adopt mark %v: %w", z.Member, err)
			}
			if err := s.rdb.ZRem(ctx, m.from, z.Member).Err(); err != nil {
				return fmt.Errorf("adopt mark %v: %w", z.Member, err)
			}
		}
	}
	return nil
}

// reclaiming lists marks whose rollback is not finished.
func (s *Store) reclaiming(ctx context.Context) ([][2]string, error) {
	ms, err := s.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: reclaimingKey, Start: 0, Stop: 999}).Result()
	if err != nil {
		return nil, fmt.Errorf("list reclaiming submissions: %w", err)
	}
	out := make([][2]string, 0, len(ms))
	for _, m := range ms {
		if j, a, ok := strings.Cut(m, "|"); ok {
			out = append(out, [2]string{j, a})
		}
	}
	return out, nil
}

// claimMarkScript moves one submission's mark from the pending set to the
// reclaiming set if it is pending. KEYS = pending, reclaiming.
// ARGV = mark, now ms. Returns 1 when moved.
var claimMarkScript = redis.NewScript(`
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
  return 1
end
return 0
`)

// claimMark takes one pending submission for rollback; true when it was
// pending (its commit can no longer succeed).
func (s *Store) claimMark(ctx context.Context, jobID, accountID string, now time.Time) (bool, error) {
	n, err := claimMarkScript.Run(ctx, s.rdb, []string{pendingKey, reclaimingKey}, mark(jobID, accountID), now.UnixMilli()).Int()
	if err != nil {
		return false, fmt.Errorf("claim submission %s: %w", jobID, err)
	}
	return n == 1, nil
}

// isReclaiming reports whether a submission's rollback is under way.
func (s *Store) isReclaiming(ctx context.Context, jobID, accountID string) (bool, error) {
	err := s.rdb.ZScore(ctx, reclaimingKey, mark(jobID, accountID)).Err()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read reclaiming mark %s: %w", jobID, err)
	}
	return true, nil
}

func (s *Store) doneReclaiming(ctx context.Context, jobID, accountID string) error {
	return s.rdb.ZRem(ctx, reclaimingKey, mark(jobID, accountID)).Err()
}

func (s *Store) dropPending(ctx context.Context, jobID, accountID string) error {
	return s.rdb.ZRem(ctx, pendingKey, mark(jobID, accountID)).Err()
}
