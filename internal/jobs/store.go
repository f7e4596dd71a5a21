package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
)

// Store is the Redis side of the engine: one method per state transition,
// each one atomic.
type Store struct {
	rdb redis.UniversalClient
	// billing pays what a completed job's uncharged outcome gives back
	// (settle).
	billing *billing.Billing
}

// NewStore returns a store on rdb that pays completion refunds through bl.
// The caller passes the same billing (and so the same clock) as the
// engine's, so a refund's ledger entry is dated like the charge it
// answers; the store used to build its own, on the wall clock.
func NewStore(rdb redis.UniversalClient, bl *billing.Billing) *Store {
	return &Store{rdb: rdb, billing: bl}
}

// Writes of a job's bulk data are cut so that no single command, and no
// transaction, holds Redis for long: each command carries one field (a
// 500-row chunk of the row map, or one shard's inputs), and a pipeline is
// sent once it holds createPipeBytes or createPipeCmds commands. A
// 100,000-row job used to be one MULTI/EXEC that kept every other client
// waiting for tens of milliseconds (docs/reliability.md has the numbers).
const (
	createPipeBytes = 1 << 20
	createPipeCmds  = 64
)

// create writes a whole job: first its row map and shard inputs, in
// pipelines of single-field writes (not transactional: nothing reads them
// before the job exists), then, in one MULTI on the job's hash slot, its
// metadata hash, which is what makes the job exist (Get, results, the
// processors), with the expiry of every key; then its membership of the
// active set (another slot). A process that dies part-way leaves keys
// that no job points at, which expire with the job and which the janitor
// deletes when it rolls the submission back (the pending mark is still
// there: commit comes after create).
func (s *Store) create(ctx context.Context, j *Job, b *Builder) error {
	enc, err := b.encode(j.ShardSize)
	if err != nil {
		return err
	}
	rows, shards := enc.rows, enc.shards
	exp := j.ExpiresAt
	pipe := s.rdb.Pipeline()
	queued, cmds := 0, 0
	flush := func() error {
		if cmds == 0 {
			return nil
		}
		_, err := pipe.Exec(ctx)
		queued, cmds = 0, 0
		return err
	}
	for _, part := range []struct {
		key    string
		chunks [][]byte
	}{{rowsKey(j.ID), rows}, {inputsKey(j.ID), shards}} {
		for c, chunk := range part.chunks {
			pipe.HSet(ctx, part.key, strconv.Itoa(c), chunk)
			if c == 0 {
				// Expire from the first write on, so a crash right after
				// it leaves nothing behind for good.
				pipe.PExpireAt(ctx, part.key, exp)
			}
			queued += len(chunk)
			cmds++
			if queued >= createPipeBytes || cmds >= createPipeCmds {
				if err := flush(); err != nil {
					return fmt.Errorf("store job %s: %w", j.ID, err)
				}
			}
		}
	}
	if err := flush(); err != nil {
		return fmt.Errorf("store job %s: %w", j.ID, err)
	}
	meta := map[string]any{
		"id": j.ID, "family": j.Family, "account": j.AccountID, "key": j.KeyID, "status": j.Status,
		"total_rows": j.TotalRows, "total_invalid": j.TotalInvalid, "distinct": j.Distinct,
		"rows_processed": j.TotalInvalid, "distinct_processed": 0,
		"shards": j.Shards, "shard_size": j.ShardSize, "shards_done": 0,
		"charge": int64(j.Charge), "quota_units": j.QuotaUnits, "quota_window": j.QuotaWindow,
		"price": int64(j.Price), "refund_outcome": j.RefundOutcome, "refunded": 0,
		"created_at": j.CreatedAt.UnixMilli(), "completed_at": 0, "expires_at": exp.UnixMilli(),
		// The bytes of the row map and inputs: with the answers' bytes
		// (answer_bytes, recordScript) what the job holds (usage.go).
		"base_bytes": enc.bytes,
	}
	if j.Status == StatusCompleted {
		meta["completed_at"] = j.CompletedAt.UnixMilli()
	}
	if j.WebhookURL = b.WebhookURL; j.WebhookURL != "" {
		meta["webhook_url"] = j.WebhookURL
	}
	tx := s.rdb.TxPipeline() // every key here carries the job's hash tag
	tx.HSet(ctx, metaKey(j.ID), meta)
	for _, k := range []string{metaKey(j.ID), rowsKey(j.ID), inputsKey(j.ID)} {
		tx.PExpireAt(ctx, k, exp)
	}
	if _, err := tx.Exec(ctx); err != nil {
		return fmt.Errorf("store job %s: %w", j.ID, err)
	}
	// Its memberships (other hash slots) in one round trip: the active
	// set, the jobs that may owe a webhook event (webhook.go), its
	// account's index (account.go).
	pipe = s.rdb.Pipeline()
	if j.Status == StatusRunning {
		pipe.SAdd(ctx, activeKey, j.ID)
	}
	watchWebhook(ctx, pipe, j)
	index(ctx, pipe, j)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("store job %s: its sets: %w", j.ID, err)
	}
	return nil
}

// Delete takes a job out of the engine's sets, then removes every key of
// it (other hash slots: not one transaction on Redis Cluster). In that
// order a job whose keys are gone is in no set; one that a crash left with
// its keys but out of the sets is deleted again by whoever retries the
// deletion (the janitor's rollback, the controller's finalizer), and
// expires with the job otherwise.
func (s *Store) Delete(ctx context.Context, id string) error {
	pipe := s.rdb.Pipeline()
	// Whose usage it was (usage.go): released once the keys are gone. A
	// job already gone has no account to read; its reservation, if any
	// was left, is released by whoever knows the account (a rollback,
	// the janitor), dropped by the next refusal's repair, or expires.
	pipe.SRem(ctx, activeKey, id)
	pipe.ZRem(ctx, retryingKey, id)
	pipe.ZRem(ctx, settlingKey, id)
	owner := pipe.HGet(ctx, metaKey(id), "account") // last: Exec reports the first error, and only this one may be redis.Nil
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("delete job %s: %w", id, err)
	}
	acct := owner.Val()
	if err := s.rdb.Del(ctx, jobKeys(id)...).Err(); err != nil {
		return fmt.Errorf("delete job %s: %w", id, err)
	}
	if acct != "" {
		return s.releaseUsage(ctx, acct, id, "gone", -1)
	}
	return nil
}

// Get reads a job's metadata.
func (s *Store) Get(ctx context.Context, id string) (*Job, error) {
	m, err := s.rdb.HGetAll(ctx, metaKey(id)).Result()
	if err != nil {
		return nil, fmt.Errorf("read job %s: %w", id, err)
	}
	if len(m) == 0 || m["id"] == "" {
		return nil, ErrJobNotFound
	}
	j := jobFromMap(m)
	if j.Status == StatusRetrying {
		if j.NextRetryAt, err = s.nextRetry(ctx, id); err != nil {
			return nil, err
		}
	}
	return j, nil
}

func jobFromMap(m map[string]string) *Job {
	i := func(k string) int64 { v, _ := strconv.ParseInt(m[k], 10, 64); return v }
	t := func(k string) time.Time {
		if v := i(k); v > 0 {
			return time.UnixMilli(v).UTC()
		}
		return time.Time{}
	}
	j := &Job{
		ID: m["id"], Family: m["family"], AccountID: m["account"], KeyID: m["key"], Status: m["status"],
		Settling:  m["status"] == statusSettling,
		TotalRows: i("total_rows"), TotalInvalid: i("total_invalid"), Distinct: i("distinct"),
		RowsProcessed: i("rows_processed"), DistinctProcessed: i("distinct_processed"),
		Shards: int(i("shards")), ShardSize: int(i("shard_size")), ShardsDone: i("shards_done"),
		Retrying: i("retrying"), Price: credits.Amount(i("price")), RefundOutcome: m["refund_outcome"],
		Refunded: credits.Amount(i("refunded")),
		Charge:   credits.Amount(i("charge")), QuotaUnits: i("quota_units"), QuotaWindow: m["quota_window"],
		CreatedAt: t("created_at"), CompletedAt: t("completed_at"), ExpiresAt: t("expires_at"),
		Outcomes: map[string]int64{},
	}
	webhookFromMap(j, m) // webhook.go
	if j.Settling {
		// Completed once settled (settle): until then it is running, and a
		// running job has no completion time.
		j.Status, j.CompletedAt = StatusRunning, time.Time{}
	}
	for k, v := range m {
		if name, ok := strings.CutPrefix(k, "out:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			j.Outcomes[name] = n
		}
	}
	return j
}

// ShardInputs reads one shard's distinct inputs. The first distinct index
// of shard s is s*ShardSize.
func (s *Store) ShardInputs(ctx context.Context, id string, shard int) ([]Input, error) {
	blob, err := s.rdb.HGet(ctx, inputsKey(id), strconv.Itoa(shard)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrJobNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read shard %d of %s: %w", shard, id, err)
	}
	var in []Input
	if err := json.Unmarshal(blob, &in); err != nil {
		return nil, fmt.Errorf("decode shard %d of %s: %w", shard, id, err)
	}
	return in, nil
}

// Answered reports which of the given distinct indices already have an
// answer, so a re-run shard only answers what is missing.
func (s *Store) Answered(ctx context.Context, id string, idx []int) ([]bool, error) {
	fields := make([]string, len(idx))
	for i, x := range idx {
		fields[i] = strconv.Itoa(x)
	}
	vals, err := s.rdb.HMGet(ctx, answersKey(id), fields...).Result()
	if err != nil {
		return nil, fmt.Errorf("read answers of %s: %w", id, err)
	}
	out := make([]bool, len(vals))
	for i, v := range vals {
		out[i] = v != nil
	}
	return out, nil
}

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
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1, -1, 0, 0} end
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

// markShardDoneScript: KEYS = meta, shard bitmap. ARGV = shard, expires ms.
var markShardDoneScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('SETBIT', KEYS[2], ARGV[1], 1) == 0 then
  redis.call('PEXPIREAT', KEYS[2], ARGV[2])
  return redis.call('HINCRBY', KEYS[1], 'shards_done', 1)
end
return redis.call('HGET', KEYS[1], 'shards_done')
`)

// MarkShardDone records that every input of a shard is answered.
func (s *Store) MarkShardDone(ctx context.Context, j *Job, shard int) error {
	n, err := markShardDoneScript.Run(ctx, s.rdb, []string{metaKey(j.ID), shardsDoneKey(j.ID)}, shard, j.ExpiresAt.UnixMilli()).Int()
	if err != nil {
		return fmt.Errorf("mark shard %d of %s done: %w", shard, j.ID, err)
	}
	if n < 0 {
		return ErrJobNotFound
	}
	return nil
}

// UnfinishedShards lists the shards of a job not marked done.
func (s *Store) UnfinishedShards(ctx context.Context, j *Job) ([]int, error) {
	bits, err := s.rdb.Get(ctx, shardsDoneKey(j.ID)).Bytes()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read shard bitmap of %s: %w", j.ID, err)
	}
	var out []int
	for sh := 0; sh < j.Shards; sh++ {
		byteIdx, bit := sh/8, 7-uint(sh%8)
		if byteIdx >= len(bits) || bits[byteIdx]&(1<<bit) == 0 {
			out = append(out, sh)
		}
	}
	return out, nil
}

// ActiveJobs lists running jobs.
func (s *Store) ActiveJobs(ctx context.Context) ([]string, error) {
	return s.rdb.SMembers(ctx, activeKey).Result()
}

// ForgetActive drops a job from the active set (it expired or was deleted).
func (s *Store) ForgetActive(ctx context.Context, id string) error {
	return s.rdb.SRem(ctx, activeKey, id).Err()
}

// acquireScript takes a lease that is free or already ours. "Ours" matters
// after a restart: an instance with a stable owner id (serve uses host and
// listen address) takes back the leases its previous life held instead of
// waiting for them to expire. In-process, Local never runs one shard twice.
var acquireScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur == false or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
`)

// AcquireLease takes shard's lease for ttl if nobody else holds it.
func (s *Store) AcquireLease(ctx context.Context, id string, shard int, owner string, ttl time.Duration) (bool, error) {
	n, err := acquireScript.Run(ctx, s.rdb, []string{leaseKey(id, shard)}, owner, ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("lease shard %d of %s: %w", shard, id, err)
	}
	return n == 1, nil
}

// extendScript extends a lease only when we still hold it.
var extendScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
`)

var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// ExtendLease keeps a lease alive while the shard runs.
func (s *Store) ExtendLease(ctx context.Context, id string, shard int, owner string, ttl time.Duration) error {
	return extendScript.Run(ctx, s.rdb, []string{leaseKey(id, shard)}, owner, ttl.Milliseconds()).Err()
}

// ReleaseLease gives a lease back.
func (s *Store) ReleaseLease(ctx context.Context, id string, shard int, owner string) error {
	return releaseScript.Run(ctx, s.rdb, []string{leaseKey(id, shard)}, owner).Err()
}

// Page is a window of a job's rows with the answers they point at.
type Page struct {
	Job         *Job
	Rows        []Row
	Answers     map[int32]StoredAnswer // by distinct index; missing = pending
	AnswerBytes int                    // total size of the answers' data (to size a response buffer)
}

// Answer is what an Answerer returns for one input.
type Answer struct {
	Outcome string
	Data    []byte // the family's answer fields, a JSON object
	// RetryAt, when set, makes the answer provisional: the input is
	// answered again (Retrier) from then on.
	RetryAt time.Time
}

// StoredAnswer is an answer read back for a results page. Data stays a
// string: the page copies it once, into the response.
type StoredAnswer struct {
	Outcome string
	Data    string
}

// ReadPage reads rows [offset, offset+limit) and their answers in two round
// trips: metadata and row chunks together, then the answers.
func (s *Store) ReadPage(ctx context.Context, id string, offset, limit int) (*Page, error) {
	first, last := offset/RowChunk, (offset+limit-1)/RowChunk
	fields := make([]string, 0, last-first+1)
	for c := first; c <= last; c++ {
		fields = append(fields, strconv.Itoa(c))
	}
	pipe := s.rdb.Pipeline()
	metaCmd := pipe.HGetAll(ctx, metaKey(id))
	rowsCmd := pipe.HMGet(ctx, rowsKey(id), fields...)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read page of %s: %w", id, err)
	}
	m := metaCmd.Val()
	if len(m) == 0 || m["id"] == "" {
		return nil, ErrJobNotFound
	}
	p := &Page{Job: jobFromMap(m), Answers: map[int32]StoredAnswer{}}
	if offset >= int(p.Job.TotalRows) {
		return p, nil
	}
	end := min(offset+limit, int(p.Job.TotalRows))
	for ci, v := range rowsCmd.Val() {
		if (first+ci)*RowChunk >= end {
			break // the window reaches past the last chunk
		}
		str, _ := v.(string)
		if str == "" {
			return nil, fmt.Errorf("job %s: row chunk %d missing", id, first+ci)
		}
		chunk, err := decodeRows([]byte(str))
		if err != nil {
			return nil, fmt.Errorf("job %s: row chunk %d: %w", id, first+ci, err)
		}
		base := (first + ci) * RowChunk
		lo, hi := max(offset-base, 0), min(end-base, len(chunk))
		if lo < hi {
			p.Rows = append(p.Rows, chunk[lo:hi]...)
		}
	}
	seen := map[int32]bool{}
	var want []string
	var wantIdx []int32
	for _, r := range p.Rows {
		if r.Index >= 0 && !seen[r.Index] {
			seen[r.Index] = true
			want = append(want, strconv.Itoa(int(r.Index)))
			wantIdx = append(wantIdx, r.Index)
		}
	}
	if len(want) == 0 {
		return p, nil
	}
	vals, err := s.rdb.HMGet(ctx, answersKey(id), want...).Result()
	if err != nil {
		return nil, fmt.Errorf("read answers of %s: %w", id, err)
	}
	for i, v := range vals {
		str, ok := v.(string)
		if !ok {
			continue
		}
		outcome, data, _ := strings.Cut(str, "\n")
		p.Answers[wantIdx[i]] = StoredAnswer{Outcome: outcome, Data: data}
		p.AnswerBytes += len(data)
	}
	return p, nil
}

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
