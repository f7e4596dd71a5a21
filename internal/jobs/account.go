package jobs

import (
	"context"
	"errors"
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

// index adds a stored job to its account's index and drops the entries
// that are past retention (their jobs have expired with their keys).
func (s *Store) index(ctx context.Context, j *Job) error {
	pipe := s.rdb.Pipeline()
	pipe.ZAdd(ctx, accountJobsKey(j.AccountID), redis.Z{Score: float64(j.CreatedAt.UnixMilli()), Member: j.ID})
	// Expired jobs' ids: anything created before the oldest job that can
	// still exist (this one's retention, counted back from its creation).
	horizon := j.CreatedAt.Add(-j.ExpiresAt.Sub(j.CreatedAt))
	pipe.ZRemRangeByScore(ctx, accountJobsKey(j.AccountID), "-inf", fmt.Sprintf("(%d", horizon.UnixMilli()))
	pipe.PExpireAt(ctx, accountJobsKey(j.AccountID), j.ExpiresAt)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("index job %s of account %s: %w", j.ID, j.AccountID, err)
	}
	return nil
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
	// Pipelined reads, a page at a time: a page of metadata is one round
	// trip (on Redis Cluster the client splits it by slot).
	for lo := 0; lo < len(ids) && len(out) < limit; lo += limit {
		hi := min(lo+limit, len(ids))
		pipe := e.Store.rdb.Pipeline()
		cmds := make([]*redis.MapStringStringCmd, hi-lo)
		for i, id := range ids[lo:hi] {
			cmds[i] = pipe.HGetAll(ctx, metaKey(id))
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("list jobs of account %s: %w", accountID, err)
		}
		for i, c := range cmds {
			m := c.Val()
			if len(m) == 0 || m["id"] == "" || m["account"] != accountID {
				stale = append(stale, ids[lo+i])
				continue
			}
			if len(out) < limit {
				out = append(out, jobFromMap(m))
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

// PageInAccount returns rows [offset, offset+limit) of a job of the
// account.
func (e *Engine) PageInAccount(ctx context.Context, accountID, jobID string, offset, limit int) (*Page, error) {
	p, err := e.Store.ReadPage(ctx, jobID, offset, limit)
	if err != nil {
		return nil, err
	}
	if p.Job.AccountID != accountID {
		return nil, ErrJobNotFound
	}
	return p, nil
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
