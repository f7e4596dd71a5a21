package jobs

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The account's job index: a zset of its job ids (every key's, the
// dashboard's included) scored by submission time (ms), for the account
// dashboard. A job is visible through the API only to the key that made
// it; the account's own users see all of them. The index carries the
// account's hash tag (the account's other keys live in that slot) and is
// written after the job's metadata, so an id in it may point at a job that
// was rolled back or has expired: readers skip and prune those.
func accountJobsKey(accountID string) string { return prefix + "acct:{" + accountID + "}:jobs" }

// maxAccountJobsScan bounds how many index entries one AccountJobs call
// reads past the ones it returns, pruning stale ids as it goes.
const maxAccountJobsScan = 200

// index queues, on pipe, a stored job's entry in its account's index and
// the removal of the entries past retention (their jobs have expired with
// their keys).
func index(ctx context.Context, pipe redis.Pipeliner, j *Job) {
	pipe.ZAdd(ctx, accountJobsKey(j.AccountID), redis.Z{Score: float64(j.CreatedAt.UnixMilli()), Member: j.ID})
	// Expired jobs' ids: anything created before the oldest job that can
	// still exist (this one's retention, counted back from its creation).
	horizon := j.CreatedAt.Add(-j.ExpiresAt.Sub(j.CreatedAt))
	pipe.ZRemRangeByScore(ctx, accountJobsKey(j.AccountID), "-inf", fmt.Sprintf("(%d", horizon.UnixMilli()))
	pipe.PExpireAt(ctx, accountJobsKey(j.AccountID), j.ExpiresAt)
}

// AccountJobs returns up to limit of an account's jobs, newest first.
func (e *Engine) AccountJobs(ctx context.Context, accountID string, limit int) ([]*Job, error) {
	if limit <= 0 {
		return nil, nil
	}
	key := accountJobsKey(accountID)
	ids, err := e.Store.rdb.ZRevRange(ctx, key, 0, int64(limit+maxAccountJobsScan-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("list jobs of account %s: %w", accountID, err)
	}
	out := make([]*Job, 0, min(limit, len(ids)))
	var stale []any
	// A page of metadata at a time, one round trip each (GetMany).
	for lo := 0; lo < len(ids) && len(out) < limit; lo += limit {
		page := ids[lo:min(lo+limit, len(ids))]
		js, err := e.Store.GetMany(ctx, page)
		if err != nil {
			return nil, fmt.Errorf("list jobs of account %s: %w", accountID, err)
		}
		for i, j := range js {
			if j == nil || j.AccountID != accountID {
				stale = append(stale, page[i])
			} else if len(out) < limit {
				out = append(out, j)
			}
		}
	}
	if len(stale) > 0 {
		if err := e.Store.rdb.ZRem(ctx, key, stale...).Err(); err != nil {
			e.Log.Warn("pruning the account's job index failed", "account", accountID, "err", err)
		}
	}
	for _, j := range out {
		if j.Status != StatusCompleted {
			e.readStatus(ctx, j)
		}
	}
	return out, nil
}

// GetInAccount returns a job of the account, whichever key made it; another
// account's job is ErrJobNotFound.
func (e *Engine) GetInAccount(ctx context.Context, accountID, jobID string) (*Job, error) {
	j, err := e.Store.Get(ctx, jobID)
	if err != nil {
		return nil, err
	}
	if j.AccountID != accountID {
		return nil, ErrJobNotFound
	}
	e.readStatus(ctx, j)
	return j, nil
}

// readStatus overlays the executor's record of a job's progress when it
// keeps one (Kubernetes mode); the stored job stays the answer when the
// executor cannot say.
func (e *Engine) readStatus(ctx context.Context, j *Job) {
	if sr, ok := e.Executor.(StatusReader); ok {
		if _, err := sr.ReadStatus(ctx, j); err != nil {
			e.Log.Warn("job status from the executor unavailable; using the stored counters", "job", j.ID, "err", err)
		}
	}
}
