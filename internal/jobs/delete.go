package jobs

// Deleting a job on its owner's request (docs/privacy.md): stop it, give
// back what it was paid for and did not do, and remove every trace of it.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/idempotency"
)

// Deletion is what deleting a job did.
type Deletion struct {
	// Job is the job as it was when it was stopped (status, counts).
	Job *Job
	// Unprocessed is the distinct inputs that had no answer yet when the
	// job was stopped: refunded, never answered.
	Unprocessed int64
	// Refunded is the credits the deletion gave back: the unprocessed
	// inputs and the answers of the job's uncharged outcome, at the
	// job's price (0 on a completed job, a quota-metered one, or a
	// deletion repeated after a crash that had already paid it).
	Refunded credits.Amount
	// Keys is how many Redis keys were removed (the job's own, its
	// Idempotency-Key record).
	Keys int64
	// At is when the job was stopped.
	At time.Time
	// By is who asked, for the audit log (DeleteJobBy); "": the job's
	// own key.
	By string
}

// tombstoneScript stops a job: from this step on the write scripts
// (recordScript, markShardDoneScript) refuse its answers, so a processor
// still running (a pod the executor has not stopped yet) writes nothing
// more, and the refund computed here is the exact complement of what was
// answered. KEYS = meta. ARGV = now ms.
// Returns {state, refund due (milli), unprocessed}: state -1 no such job, 0
// stopped now, 1 stopped before (a deletion retried; what that one fixed).
// The refund: a running job's unanswered inputs and its answers with the
// uncharged outcome, at the job's price, never more than its charge; a
// settling job (its last answer recorded, its completion being paid) owes
// exactly what settle pays (refund_due), so whichever of the two pays first
// pays the same amount (billing.RefundPart pays once per charge); a
// completed job owes nothing.
var tombstoneScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1, 0, 0} end
local m = redis.call('HMGET', KEYS[1], 'deleted_at', 'delete_refund', 'delete_unprocessed', 'status',
  'distinct', 'distinct_processed', 'price', 'charge', 'refund_outcome', 'refund_due')
if m[1] then return {1, tonumber(m[2] or '0'), tonumber(m[3] or '0')} end
local st, due, unproc = m[4], 0, 0
if st == 'settling' then
  due = tonumber(m[10] or '0')
elseif st ~= 'completed' then
  unproc = math.max(tonumber(m[5] or '0') - tonumber(m[6] or '0'), 0)
  local free = unproc
  if m[9] and m[9] ~= '' then
    free = free + tonumber(redis.call('HGET', KEYS[1], 'out:' .. m[9]) or '0')
  end
  due = math.min(free * tonumber(m[7] or '0'), tonumber(m[8] or '0'))
end
redis.call('HSET', KEYS[1], 'deleted_at', ARGV[1], 'delete_refund', due, 'delete_unprocessed', unproc)
return {0, due, unproc}
`)

// Delete deletes a job of family that keyID owns (another key's job, or
// another family's, is ErrJobNotFound, as for Get): see DeleteJob.
func (e *Engine) Delete(ctx context.Context, keyID, family, jobID string) (*Deletion, error) {
	// Read even a job already stopped: a deletion cut short (its client
	// hung up, a crash) is finished by asking again.
	m, err := e.Store.rdb.HGetAll(ctx, metaKey(jobID)).Result()
	if err != nil {
		return nil, fmt.Errorf("read job %s: %w", jobID, err)
	}
	if len(m) == 0 || m["id"] == "" {
		return nil, ErrJobNotFound
	}
	j := jobFromMap(m)
	if j.KeyID != keyID || j.Family != family {
		return nil, ErrJobNotFound
	}
	return e.DeleteJob(ctx, j, "deleted by its owner")
}

// DeleteJob stops job j and removes it. In order, each step idempotent, so
// a deletion cut short (a crash, Redis away) is finished by repeating it:
//  1. tombstone: processors can record nothing more; the refund is fixed;
//  2. the executor stops the job's work (Local: its queued and running
//     shards; Kubernetes: the BulkJob, and with it its Jobs and pods);
//  3. the refund is paid with its ledger entry (once per charge);
//  4. every key of the job goes (Store.Purge), and the cached rows;
//  5. Deleted, when set, is told (the job.deleted webhook).
//
// why is the ledger note's reason ("deleted by its owner", "erased").
func (e *Engine) DeleteJob(ctx context.Context, j *Job, why string) (*Deletion, error) {
	return e.DeleteJobBy(ctx, j, why, "")
}

// DeleteJobBy is DeleteJob on the request of by (Deletion.By: the audit
// log's actor, e.g. a dashboard user's id; "": the job's own key).
func (e *Engine) DeleteJobBy(ctx context.Context, j *Job, why, by string) (*Deletion, error) {
	// Detach: a client that hangs up half-way must not leave the job
	// stopped but unpaid.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	now := e.Now().UTC()
	res, err := tombstoneScript.Run(ctx, e.Store.rdb, []string{metaKey(j.ID)}, now.UnixMilli()).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("delete job %s: stop: %w", j.ID, err)
	}
	if res[0] < 0 {
		return nil, ErrJobNotFound
	}
	d := &Deletion{Job: j, Unprocessed: res[2], At: now, By: by}
	if err := e.Executor.Cancel(ctx, j.ID); err != nil {
		return nil, fmt.Errorf("delete job %s: stop its work: %w", j.ID, err)
	}
	if due := credits.Amount(res[1]); due > 0 {
		note := fmt.Sprintf("job %s: %d inputs not processed", why, d.Unprocessed)
		paid, err := e.Billing.RefundPart(ctx, j.AccountID, j.KeyID, j.ID, due, note)
		if err != nil && !errors.Is(err, billing.ErrAccountNotFound) {
			return nil, fmt.Errorf("delete job %s: refund: %w", j.ID, err)
		}
		d.Refunded = paid
	}
	if d.Keys, err = e.Store.Purge(ctx, j); err != nil {
		return nil, err
	}
	if e.RowCache != nil {
		e.RowCache.DropJob(cacheKey(j.Family, j.ID))
	}
	e.Log.Info("job deleted", "job", j.ID, "family", j.Family, "account", j.AccountID, "why", why,
		"rows", j.TotalRows, "unprocessed", d.Unprocessed, "refunded", d.Refunded.String(), "keys", d.Keys)
	if e.Deleted != nil {
		e.Deleted(ctx, d)
	}
	return d, nil
}

// Purge removes every key of job j and its place in every set: its data,
// leases, retry keys, the Idempotency-Key record that would replay its
// submission, its place in the engine's sets, its account's index and the
// webhook set, and its account's usage. Keys are UNLINKed: gone from the
// keyspace at once, their memory freed by Redis in the background, so a
// 100,000-row job does not hold Redis while its hashes are freed. It
// returns how many keys it removed.
func (s *Store) Purge(ctx context.Context, j *Job) (int64, error) {
	idem, err := s.rdb.HGet(ctx, metaKey(j.ID), "idem").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("purge job %s: %w", j.ID, err)
	}
	pipe := s.rdb.Pipeline()
	pipe.SRem(ctx, activeKey, j.ID)
	pipe.ZRem(ctx, retryingKey, j.ID)
	pipe.ZRem(ctx, settlingKey, j.ID)
	pipe.ZRem(ctx, webhookJobsKey, j.ID)
	pipe.ZRem(ctx, expiringKey, j.ID)
	pipe.ZRem(ctx, accountJobsKey(j.AccountID), j.ID)
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("purge job %s: its sets: %w", j.ID, err)
	}
	keys := jobKeys(j.ID)
	for sh := 0; sh < j.Shards; sh++ {
		keys = append(keys, leaseKey(j.ID, sh))
	}
	n, err := s.rdb.Unlink(ctx, keys...).Result()
	if err != nil {
		return 0, fmt.Errorf("purge job %s: %w", j.ID, err)
	}
	if idem != "" {
		// Only the record that still names this job (a record is the
		// key's for 24 h; it never names another job, but check anyway).
		m, err := delIfScript.Run(ctx, s.rdb, []string{idem}, "job", j.ID).Int64()
		if err != nil {
			return n, fmt.Errorf("purge job %s: idempotency record: %w", j.ID, err)
		}
		n += m
		if m > 0 {
			// Its bytes no longer count against the account's stored
			// answers (internal/idempotency, account.go).
			if _, err := idempotency.Forget(ctx, s.rdb, j.AccountID, idem); err != nil {
				return n, fmt.Errorf("purge job %s: idempotency usage: %w", j.ID, err)
			}
		}
	}
	return n, s.releaseUsage(ctx, j.AccountID, j.ID, "gone", -1)
}

// delIfScript deletes a hash whose field ARGV[1] is ARGV[2]. KEYS = hash.
var delIfScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('UNLINK', KEYS[1]) end
return 0
`)
