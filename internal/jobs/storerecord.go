package jobs

// Recording answers and settling a job once its last input is answered
// (Store, store.go).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/credits"
)

// Recorded is one answer to record.
type Recorded struct {
	Index   int
	Rows    int64 // rows pointing at the input
	Outcome string
	Data    []byte // the family's answer, JSON
	// RetryAt, when set, makes the answer provisional: it is shown (and
	// counts as the input's first answer) until a retry due then replaces
	// it.
	RetryAt time.Time
}

// recordScript writes answers and counts only what changed, so a shard
// that runs twice (a retried pod, a restarted process) never counts a row
// twice. In mode "new" it writes only answers that do not exist yet (a
// first pass, or a failed shard's error answers); in mode "replace" (a
// retry) it replaces only provisional answers, moving their rows from the
// old outcome to the new one. A provisional answer is also a member of the
// job's retry zset, scored by when it is due. The job is completed when
// every input has an answer and none is provisional; it is "retrying" when
// every input has one but some are provisional.
//
// It touches only the job's own keys (one hash slot, so it runs on Redis
// Cluster). What completing a job owes elsewhere, the refund of an
// uncharged outcome and leaving the active and retrying-jobs sets, cannot
// be in the same step, so the last answer makes the job "settling" (shown
// as running), with the refund it owes noted (refund_due), and settle
// pays it, leaves the sets and only then marks the job completed: whoever
// sees a job completed sees its refund in the balance. Every step is
// idempotent; a process that dies part-way leaves the job in the active
// set or the settling set, where SettleActive (the janitor) finishes it.
// KEYS = meta, answers, retry zset.
// ARGV = job id, now ms, expires ms, mode, then (index, rows, outcome,
// blob, retry-at ms or 0) per answer.
// Returns {answers written, retry state, completed now, refund due}: retry
// state -1 when the retry zset was not touched, else its earliest due time
// (ms), 0 when it is empty; completed now 1 when this call answered the
// job's last input (it is settling); refund due the credits (milli) its
// uncharged outcome gives back.
var recordScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], 'deleted_at') == 1 then return {-1, -1, 0, 0} end
local replace = ARGV[4] == 'replace'
local rows, fresh, changed, retrying, touched, abytes = 0, 0, 0, 0, false, 0
for i = 5, #ARGV, 5 do
  local idx, m, out, due = ARGV[i], tonumber(ARGV[i+1]), ARGV[i+2], tonumber(ARGV[i+4])
  local val = out .. '\n' .. ARGV[i+3]
  if not replace then
    if redis.call('HSETNX', KEYS[2], idx, val) == 1 then
      rows = rows + m
      fresh = fresh + 1
      abytes = abytes + #val
      redis.call('HINCRBY', KEYS[1], 'out:' .. out, m)
      if due > 0 then
        redis.call('ZADD', KEYS[3], due, idx)
        retrying = retrying + 1
        touched = true
      end
    end
  elseif redis.call('ZSCORE', KEYS[3], idx) then
    local prev = redis.call('HGET', KEYS[2], idx)
    local pout = string.match(prev or '', '^([^\n]*)')
    redis.call('HSET', KEYS[2], idx, val)
    abytes = abytes + #val - #(prev or '')
    if pout ~= out then
      redis.call('HINCRBY', KEYS[1], 'out:' .. pout, -m)
      redis.call('HINCRBY', KEYS[1], 'out:' .. out, m)
    end
    if due > 0 then
      redis.call('ZADD', KEYS[3], due, idx)
    else
      redis.call('ZREM', KEYS[3], idx)
      retrying = retrying - 1
    end
    changed = changed + 1
    touched = true
  end
end
if fresh > 0 then
  redis.call('HINCRBY', KEYS[1], 'rows_processed', rows)
  redis.call('HINCRBY', KEYS[1], 'distinct_processed', fresh)
end
if retrying ~= 0 then redis.call('HINCRBY', KEYS[1], 'retrying', retrying) end
if abytes ~= 0 then redis.call('HINCRBY', KEYS[1], 'answer_bytes', abytes) end
local state, completed, due = -1, 0, 0
if fresh > 0 or changed > 0 then
  redis.call('PEXPIREAT', KEYS[2], ARGV[3])
  local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  if first[2] then redis.call('PEXPIREAT', KEYS[3], ARGV[3]) end
  if touched then state = tonumber(first[2] or '0') end
  local done = tonumber(redis.call('HGET', KEYS[1], 'distinct_processed'))
  if done >= tonumber(redis.call('HGET', KEYS[1], 'distinct')) then
    if first[2] then
      -- A job with a webhook notes when it first became retrying: the
      -- event is built from this mark (internal/webhook), so it survives
      -- any crash after this step.
      if redis.call('HEXISTS', KEYS[1], 'webhook_url') == 1 then redis.call('HSETNX', KEYS[1], 'wh_retrying_at', ARGV[2]) end
      redis.call('HSET', KEYS[1], 'status', 'retrying')
    else
      local st = redis.call('HGET', KEYS[1], 'status')
      if st ~= 'completed' and st ~= 'settling' then
        redis.call('HSET', KEYS[1], 'status', 'settling', 'completed_at', ARGV[2])
        completed = 1
        -- An outcome that is not charged is refunded with the completion:
        -- the amount is fixed here, in the same step, and settle pays it
        -- exactly once (billing.RefundPart).
        local ro = redis.call('HGET', KEYS[1], 'refund_outcome')
        if ro and ro ~= '' then
          local n = tonumber(redis.call('HGET', KEYS[1], 'out:' .. ro) or '0')
          due = math.min(n * tonumber(redis.call('HGET', KEYS[1], 'price') or '0'), tonumber(redis.call('HGET', KEYS[1], 'charge') or '0'))
          if due > 0 then
            redis.call('HSET', KEYS[1], 'refund_due', due, 'refund_note', n .. ' ' .. ro .. ' results are not charged')
          end
        end
      end
    end
  end
end
return {fresh + changed, state, completed, due}
`)

// Record stores first answers exactly once (a provisional one included)
// and returns how many were new.
func (s *Store) Record(ctx context.Context, j *Job, now time.Time, answers []Recorded) (int, error) {
	return s.record(ctx, j, now, "new", answers)
}

// Replace stores retry answers: each replaces the input's provisional
// answer, and only that (an input already answered for good keeps its
// answer). It returns how many were replaced.
func (s *Store) Replace(ctx context.Context, j *Job, now time.Time, answers []Recorded) (int, error) {
	return s.record(ctx, j, now, "replace", answers)
}

func (s *Store) record(ctx context.Context, j *Job, now time.Time, mode string, answers []Recorded) (int, error) {
	if len(answers) == 0 {
		return 0, nil
	}
	res, err := s.writeAnswers(ctx, j, now, mode, answers)
	if err != nil {
		return 0, err
	}
	switch {
	case res[1] > 0:
		err = s.rdb.ZAdd(ctx, retryingKey, redis.Z{Score: float64(res[1]), Member: j.ID}).Err()
	case res[1] == 0:
		_, err = s.dropRetrying(ctx, j.ID)
	}
	if err != nil {
		// The answers are stored; SettleActive puts the job's place in the
		// retrying-jobs set right.
		return int(res[0]), fmt.Errorf("record answers of %s: retrying-jobs set: %w", j.ID, err)
	}
	if res[2] == 1 {
		if err := s.settle(ctx, j.ID, j.AccountID, j.KeyID, credits.Amount(res[3])); err != nil {
			return int(res[0]), err
		}
	}
	return int(res[0]), nil
}

// writeAnswers runs recordScript: the job's own keys only. See its reply.
func (s *Store) writeAnswers(ctx context.Context, j *Job, now time.Time, mode string, answers []Recorded) ([]int64, error) {
	args := make([]any, 0, 4+5*len(answers))
	args = append(args, j.ID, now.UnixMilli(), j.ExpiresAt.UnixMilli(), mode)
	for _, a := range answers {
		var due int64
		if !a.RetryAt.IsZero() {
			due = max(a.RetryAt.UnixMilli(), 1)
		}
		args = append(args, a.Index, a.Rows, a.Outcome, a.Data, due)
	}
	keys := []string{metaKey(j.ID), answersKey(j.ID), retryKey(j.ID)}
	res, err := recordScript.Run(ctx, s.rdb, keys, args...).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("record answers of %s: %w", j.ID, err)
	}
	if len(res) != 4 {
		return nil, fmt.Errorf("record answers of %s: unexpected reply %v", j.ID, res)
	}
	if res[0] < 0 {
		return nil, ErrJobNotFound
	}
	return res, nil
}

// settlingKey lists jobs between their last answer and their completion
// (settle), by when settling began (ms): a job leaves the active set before
// it is marked completed, and this is where SettleActive finds one whose
// process died in between.
const settlingKey = prefix + "jobs:settling"

// completeScript marks a settling job completed with what was refunded.
// KEYS = meta. ARGV = refunded (milli-credits). A job in any other state
// (deleted: no hash at all) is left alone.
var completeScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'status') ~= 'settling' then return 0 end
redis.call('HSET', KEYS[1], 'status', 'completed', 'refunded', ARGV[1])
redis.call('HDEL', KEYS[1], 'refund_due')
return 1
`)

// settle finishes a job whose last input was answered, each step
// idempotent, in an order that lets SettleActive pick up after a crash at
// any point: note it in the settling set; pay the refund noted as
// refund_due (once per charge, whoever runs it); leave the retrying-jobs
// and active sets; mark it completed; drop it from the settling set.
func (s *Store) settle(ctx context.Context, jobID, accountID, keyID string, due credits.Amount) error {
	if err := s.rdb.ZAdd(ctx, settlingKey, redis.Z{Score: float64(time.Now().UnixMilli()), Member: jobID}).Err(); err != nil {
		return fmt.Errorf("settle %s: %w", jobID, err)
	}
	var paid credits.Amount
	if due > 0 {
		note, _ := s.rdb.HGet(ctx, metaKey(jobID), "refund_note").Result()
		var err error
		if paid, err = s.billing.RefundPart(ctx, accountID, keyID, jobID, due, note); err != nil {
			return fmt.Errorf("settle %s: %w", jobID, err)
		}
	}
	pipe := s.rdb.Pipeline()
	pipe.ZRem(ctx, retryingKey, jobID)
	pipe.SRem(ctx, activeKey, jobID)
	sizes := pipe.HMGet(ctx, metaKey(jobID), "base_bytes", "answer_bytes")
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("settle %s: %w", jobID, err)
	}
	// Its place among the account's active jobs ends, and its reserved
	// bytes become what it holds (usage.go).
	if err := s.releaseUsage(ctx, accountID, jobID, "done", storedBytes(sizes.Val())); err != nil {
		return fmt.Errorf("settle %s: %w", jobID, err)
	}
	if err := completeScript.Run(ctx, s.rdb, []string{metaKey(jobID)}, int64(paid)).Err(); err != nil {
		return fmt.Errorf("settle %s: complete: %w", jobID, err)
	}
	if err := s.rdb.ZRem(ctx, settlingKey, jobID).Err(); err != nil {
		return fmt.Errorf("settle %s: %w", jobID, err)
	}
	return nil
}

// settleJob settles a job read with Get whose last input is answered.
func (s *Store) settleJob(ctx context.Context, j *Job) error {
	due, err := s.rdb.HGet(ctx, metaKey(j.ID), "refund_due").Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("settle %s: %w", j.ID, err)
	}
	return s.settle(ctx, j.ID, j.AccountID, j.KeyID, credits.Amount(due))
}

// SettleActive finishes what processes left half done among the jobs of
// the active and settling sets: a job whose last input was answered but
// that was not settled (refund, set updates, completion), a job gone
// (expired, deleted) that is still listed, and a job whose place in the
// retrying-jobs set disagrees with its retry zset. It runs with the
// janitor and returns how many jobs it repaired.
func (s *Store) SettleActive(ctx context.Context) (int, error) {
	ids, err := s.ActiveJobs(ctx)
	if err != nil {
		return 0, fmt.Errorf("settle: %w", err)
	}
	settling, err := s.rdb.ZRange(ctx, settlingKey, 0, -1).Result()
	if err != nil {
		return 0, fmt.Errorf("settle: %w", err)
	}
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		seen[id] = true
	}
	for _, id := range settling {
		if !seen[id] {
			ids = append(ids, id)
		}
	}
	n := 0
	var errs []error
	for start := 0; start < len(ids); start += 500 {
		batch := ids[start:min(start+500, len(ids))]
		pipe := s.rdb.Pipeline()
		metas := make([]*redis.SliceCmd, len(batch))
		firsts := make([]*redis.ZSliceCmd, len(batch))
		scores := make([]*redis.FloatCmd, len(batch))
		for i, id := range batch {
			metas[i] = pipe.HMGet(ctx, metaKey(id), "id", "status", "account", "key", "refund_due")
			firsts[i] = pipe.ZRangeWithScores(ctx, retryKey(id), 0, 0)
			scores[i] = pipe.ZScore(ctx, retryingKey, id)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return n, fmt.Errorf("settle: %w", err)
		}
		for i, id := range batch {
			v := metas[i].Val()
			str := func(k int) string { x, _ := v[k].(string); return x }
			if len(v) < 5 || str(0) == "" { // gone
				p := s.rdb.Pipeline()
				p.SRem(ctx, activeKey, id)
				p.ZRem(ctx, settlingKey, id)
				if _, err := p.Exec(ctx); err != nil {
					errs = append(errs, err)
				}
				n++
				continue
			}
			if st := str(1); st == statusSettling || st == StatusCompleted {
				due, _ := strconv.ParseInt(str(4), 10, 64)
				if err := s.settle(ctx, id, str(2), str(3), credits.Amount(due)); err != nil {
					errs = append(errs, err)
				}
				n++
				continue
			}
			first, indexed := firsts[i].Val(), scores[i].Err() == nil
			switch {
			case len(first) > 0 && (!indexed || scores[i].Val() > first[0].Score):
				if err := s.rdb.ZAdd(ctx, retryingKey, redis.Z{Score: first[0].Score, Member: id}).Err(); err != nil {
					errs = append(errs, err)
				}
				n++
			case len(first) == 0 && indexed:
				if _, err := s.dropRetrying(ctx, id); err != nil {
					errs = append(errs, err)
				}
				n++
			}
		}
	}
	return n, errors.Join(errs...)
}
