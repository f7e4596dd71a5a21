package jobs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// dueRetries is what the scheduler needs to queue a job's due retries
// fairly: whose job it is, when it was submitted (its place in its
// account's queue) and how many retries are due (what the pass is charged).
type dueRetries struct {
	ID      string
	Account string // "" when the job's metadata is gone (the pass then finds the job gone)
	Created int64  // submission time, ms
	Due     int64
}

// dueRetries reads, in one round trip, the account, submission time and
// number of retries due at now of each job in ids.
func (s *Store) dueRetries(ctx context.Context, ids []string, now time.Time) ([]dueRetries, error) {
	pipe := s.rdb.Pipeline()
	metas := make([]*redis.SliceCmd, len(ids))
	counts := make([]*redis.IntCmd, len(ids))
	until := strconv.FormatInt(now.UnixMilli(), 10)
	for i, id := range ids {
		metas[i] = pipe.HMGet(ctx, metaKey(id), "account", "created_at")
		counts[i] = pipe.ZCount(ctx, retryKey(id), "-inf", until)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read jobs with due retries: %w", err)
	}
	out := make([]dueRetries, len(ids))
	for i, id := range ids {
		d := dueRetries{ID: id, Due: counts[i].Val()}
		if v := metas[i].Val(); len(v) == 2 {
			d.Account, _ = v[0].(string)
			if c, ok := v[1].(string); ok {
				d.Created, _ = strconv.ParseInt(c, 10, 64)
			}
		}
		out[i] = d
	}
	return out, nil
}
