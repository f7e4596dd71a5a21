package jobs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// A job submitted with a webhook_url is announced when it becomes retrying
// (once) and when it completes (internal/webhook). What makes that survive
// a crash:
//   - the job's own state, written in the same atomic step as each
//     transition: status completed (settle), and for retrying the mark
//     wh_retrying_at that the record script sets with the status;
//   - webhookJobsKey, the jobs that may still owe an event: a job joins it
//     when it is stored (create, before its submission is committed) and
//     leaves it only once its completion event is enqueued.
//
// The webhook sweeper reads the jobs of that set, enqueues the events they
// owe (idempotently: an event's id is stable per job and transition) and
// only then notes it (wh_retrying_sent) or drops the job from the set.
const webhookJobsKey = prefix + "jobs:webhooks" // zset: job id -> submitted (ms)

// expiringKey holds the jobs with a webhook that are owed a job.expiring
// event a day before they expire (docs/privacy.md), scored by when (ms).
const expiringKey = prefix + "jobs:expiring"

// ExpiringNotice is how long before its expiry a job with a webhook is
// announced as expiring.
const ExpiringNotice = 24 * time.Hour

// watchWebhook queues, on pipe, a job with a webhook's entry in the set of
// jobs that may owe an event.
func watchWebhook(ctx context.Context, pipe redis.Pipeliner, j *Job) {
	if j.WebhookURL != "" {
		pipe.ZAdd(ctx, webhookJobsKey, redis.Z{Score: float64(j.CreatedAt.UnixMilli()), Member: j.ID})
		// A job kept a day or less is announced at once.
		at := max(j.ExpiresAt.Add(-ExpiringNotice).UnixMilli(), j.CreatedAt.UnixMilli())
		pipe.ZAdd(ctx, expiringKey, redis.Z{Score: float64(at), Member: j.ID})
	}
}

// webhookFromMap reads the webhook fields of a job's metadata.
func webhookFromMap(j *Job, m map[string]string) {
	j.WebhookURL = m["webhook_url"]
	j.WebhookRetryingAt = retryingAt(m["wh_retrying_at"])
	j.WebhookRetryingSent = m["wh_retrying_sent"] != ""
}

// retryingAt reads the wh_retrying_at mark (ms; zero when unset).
func retryingAt(ms string) time.Time {
	if v, _ := strconv.ParseInt(ms, 10, 64); v > 0 {
		return time.UnixMilli(v).UTC()
	}
	return time.Time{}
}

// WebhookJobs lists up to n jobs that may owe a webhook event, from
// position start (by submission time).
func (s *Store) WebhookJobs(ctx context.Context, start, n int) ([]string, error) {
	ids, err := s.rdb.ZRange(ctx, webhookJobsKey, int64(start), int64(start+n-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("list jobs with webhooks: %w", err)
	}
	return ids, nil
}

// GetMany reads the metadata of jobs in one round trip: nil for a job
// that is gone.
func (s *Store) GetMany(ctx context.Context, ids []string) ([]*Job, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HGetAll(ctx, metaKey(id))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read jobs: %w", err)
	}
	out := make([]*Job, len(ids))
	for i, c := range cmds {
		if m := c.Val(); len(m) > 0 && m["id"] != "" {
			out[i] = jobFromMap(m)
		}
	}
	return out, nil
}

// WebhookState is what the webhook sweeper reads of a job on every pass
// (a few fields, not the whole hash): whether it owes an event now.
type WebhookState struct {
	Exists     bool
	URL        string
	Completed  bool // status completed (settled)
	RetryingAt time.Time
	Sent       bool // the retrying event is enqueued
}

// Owes reports whether the job owes an event now (its retrying event not
// yet enqueued, or completion).
func (w WebhookState) Owes() bool {
	return w.Completed || (!w.RetryingAt.IsZero() && !w.Sent)
}

// WebhookStates reads the webhook state of jobs in one round trip.
func (s *Store) WebhookStates(ctx context.Context, ids []string) ([]WebhookState, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HMGet(ctx, metaKey(id), "id", "status", "webhook_url", "wh_retrying_at", "wh_retrying_sent")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read webhook state of jobs: %w", err)
	}
	out := make([]WebhookState, len(ids))
	for i, c := range cmds {
		v := c.Val()
		str := func(k int) string {
			if k < len(v) {
				x, _ := v[k].(string)
				return x
			}
			return ""
		}
		out[i] = WebhookState{Exists: str(0) != "", Completed: str(1) == StatusCompleted,
			URL: str(2), RetryingAt: retryingAt(str(3)), Sent: str(4) != ""}
	}
	return out, nil
}

// markSentScript notes that a job's retrying event is enqueued, unless the
// job is gone (the hash would come back without an expiry). KEYS = meta.
var markSentScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'wh_retrying_sent', '1')
return 1
`)

// MarkWebhookRetryingSent notes that a job's retrying event is enqueued.
func (s *Store) MarkWebhookRetryingSent(ctx context.Context, id string) error {
	if err := markSentScript.Run(ctx, s.rdb, []string{metaKey(id)}).Err(); err != nil {
		return fmt.Errorf("mark webhook event of %s: %w", id, err)
	}
	return nil
}

// UnwatchWebhook drops a job from the set of jobs that may owe an event
// (its completion event is enqueued, or it is gone).
func (s *Store) UnwatchWebhook(ctx context.Context, id string) error {
	if err := s.rdb.ZRem(ctx, webhookJobsKey, id).Err(); err != nil {
		return fmt.Errorf("drop %s from the jobs with webhooks: %w", id, err)
	}
	return nil
}

// ExpiringDue lists up to n jobs whose job.expiring event is due at now.
func (s *Store) ExpiringDue(ctx context.Context, now time.Time, n int64) ([]string, error) {
	ids, err := s.rdb.ZRangeByScore(ctx, expiringKey, &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(now.UnixMilli(), 10), Count: n}).Result()
	if err != nil {
		return nil, fmt.Errorf("list expiring jobs: %w", err)
	}
	return ids, nil
}

// DoneExpiring drops a job from the expiring set: its event is enqueued,
// or it is gone.
func (s *Store) DoneExpiring(ctx context.Context, id string) error {
	return s.rdb.ZRem(ctx, expiringKey, id).Err()
}
