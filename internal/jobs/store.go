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

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/credits"
)

// Store is the Redis side of the engine: one method per state transition,
// each one atomic.
type Store struct {
	rdb redis.UniversalClient
}

// NewStore returns a store on rdb.
func NewStore(rdb redis.UniversalClient) *Store { return &Store{rdb: rdb} }

// create writes a whole job in one MULTI/EXEC: metadata, row map, shard
// inputs, membership of the active set. Every key expires with the job.
func (s *Store) create(ctx context.Context, j *Job, b *Builder) error {
	rows, err := b.rowChunks()
	if err != nil {
		return err
	}
	shards, err := b.shardChunks(j.ShardSize)
	if err != nil {
		return err
	}
	exp := j.ExpiresAt
	pipe := s.rdb.TxPipeline()
	meta := map[string]any{
		"id": j.ID, "family": j.Family, "account": j.AccountID, "key": j.KeyID, "status": j.Status,
		"total_rows": j.TotalRows, "total_invalid": j.TotalInvalid, "distinct": j.Distinct,
		"rows_processed": j.TotalInvalid, "distinct_processed": 0,
		"shards": j.Shards, "shard_size": j.ShardSize, "shards_done": 0,
		"charge": int64(j.Charge), "quota_units": j.QuotaUnits, "quota_window": j.QuotaWindow,
		"price": int64(j.Price), "refund_outcome": j.RefundOutcome, "refunded": 0,
		"created_at": j.CreatedAt.UnixMilli(), "completed_at": 0, "expires_at": exp.UnixMilli(),
	}
	if j.Status == StatusCompleted {
		meta["completed_at"] = j.CompletedAt.UnixMilli()
	}
	pipe.HSet(ctx, metaKey(j.ID), meta)
	hsetChunks(ctx, pipe, rowsKey(j.ID), rows)
	hsetChunks(ctx, pipe, inputsKey(j.ID), shards)
	for _, k := range []string{metaKey(j.ID), rowsKey(j.ID), inputsKey(j.ID)} {
		pipe.PExpireAt(ctx, k, exp)
	}
	if j.Status == StatusRunning {
		pipe.SAdd(ctx, activeKey, j.ID)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("store job %s: %w", j.ID, err)
	}
	return nil
}

// hsetChunks queues chunks as fields "0", "1", … of a hash, 20 per HSET,
// so no single command carries a whole job.
func hsetChunks(ctx context.Context, pipe redis.Pipeliner, key string, chunks [][]byte) {
	for start := 0; start < len(chunks); start += 20 {
		args := make([]any, 0, 40)
		for c := start; c < min(start+20, len(chunks)); c++ {
			args = append(args, strconv.Itoa(c), chunks[c])
		}
		pipe.HSet(ctx, key, args...)
	}
}

// Delete removes every key of a job.
func (s *Store) Delete(ctx context.Context, id string) error {
	pipe := s.rdb.TxPipeline()
	pipe.Del(ctx, jobKeys(id)...)
	pipe.SRem(ctx, activeKey, id)
	pipe.ZRem(ctx, retryingKey, id)
	_, err := pipe.Exec(ctx)
	if err != nil {
		return fmt.Errorf("delete job %s: %w", id, err)
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
		TotalRows: i("total_rows"), TotalInvalid: i("total_invalid"), Distinct: i("distinct"),
		RowsProcessed: i("rows_processed"), DistinctProcessed: i("distinct_processed"),
		Shards: int(i("shards")), ShardSize: int(i("shard_size")), ShardsDone: i("shards_done"),
		Retrying: i("retrying"), Price: credits.Amount(i("price")), RefundOutcome: m["refund_outcome"],
		Refunded: credits.Amount(i("refunded")),
		Charge:   credits.Amount(i("charge")), QuotaUnits: i("quota_units"), QuotaWindow: m["quota_window"],
		CreatedAt: t("created_at"), CompletedAt: t("completed_at"), ExpiresAt: t("expires_at"),
		Outcomes: map[string]int64{},
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
// Completing a job whose metering names an uncharged outcome refunds it.
// KEYS = meta, answers, active set, retry zset, retrying-jobs zset,
// account hash, charge record, ledger.
// ARGV = job id, now ms, expires ms, mode, then (index, rows, outcome,
// blob, retry-at ms or 0) per answer.
var recordScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local replace = ARGV[4] == 'replace'
local rows, fresh, changed, retrying = 0, 0, 0, 0
for i = 5, #ARGV, 5 do
  local idx, m, out, due = ARGV[i], tonumber(ARGV[i+1]), ARGV[i+2], tonumber(ARGV[i+4])
  local val = out .. '\n' .. ARGV[i+3]
  if not replace then
    if redis.call('HSETNX', KEYS[2], idx, val) == 1 then
      rows = rows + m
      fresh = fresh + 1
      redis.call('HINCRBY', KEYS[1], 'out:' .. out, m)
      if due > 0 then
        redis.call('ZADD', KEYS[4], due, idx)
        retrying = retrying + 1
      end
    end
  elseif redis.call('ZSCORE', KEYS[4], idx) then
    local prev = redis.call('HGET', KEYS[2], idx)
    local pout = string.match(prev or '', '^([^\n]*)')
    redis.call('HSET', KEYS[2], idx, val)
    if pout ~= out then
      redis.call('HINCRBY', KEYS[1], 'out:' .. pout, -m)
      redis.call('HINCRBY', KEYS[1], 'out:' .. out, m)
    end
    if due > 0 then
      redis.call('ZADD', KEYS[4], due, idx)
    else
      redis.call('ZREM', KEYS[4], idx)
      retrying = retrying - 1
    end
    changed = changed + 1
  end
end
if fresh > 0 then
  redis.call('HINCRBY', KEYS[1], 'rows_processed', rows)
  redis.call('HINCRBY', KEYS[1], 'distinct_processed', fresh)
end
if retrying ~= 0 then redis.call('HINCRBY', KEYS[1], 'retrying', retrying) end
if fresh > 0 or changed > 0 then
  redis.call('PEXPIREAT', KEYS[2], ARGV[3])
  local first = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
  if first[2] then
    redis.call('PEXPIREAT', KEYS[4], ARGV[3])
    redis.call('ZADD', KEYS[5], first[2], ARGV[1])
  else
    redis.call('ZREM', KEYS[5], ARGV[1])
  end
  local done = tonumber(redis.call('HGET', KEYS[1], 'distinct_processed'))
  if done >= tonumber(redis.call('HGET', KEYS[1], 'distinct')) then
    if first[2] then
      redis.call('HSET', KEYS[1], 'status', 'retrying')
    elseif redis.call('HGET', KEYS[1], 'status') ~= 'completed' then
      redis.call('HSET', KEYS[1], 'status', 'completed', 'completed_at', ARGV[2])
      redis.call('SREM', KEYS[3], ARGV[1])
      -- An outcome that is not charged is refunded with the completion,
      -- in this same step: exactly once, whatever crashes afterwards.
      local ro = redis.call('HGET', KEYS[1], 'refund_outcome')
      if ro and ro ~= '' then
        local n = tonumber(redis.call('HGET', KEYS[1], 'out:' .. ro) or '0')
        local amt = math.min(n * tonumber(redis.call('HGET', KEYS[1], 'price') or '0'), tonumber(redis.call('HGET', KEYS[1], 'charge') or '0'))
        if amt > 0 and redis.call('EXISTS', KEYS[6]) == 1 and redis.call('HGET', KEYS[7], 'refunded') ~= '1' then
          local after = redis.call('HINCRBY', KEYS[6], 'balance', amt)
          redis.call('HSET', KEYS[7], 'part_refunded', amt)
          redis.call('HSET', KEYS[1], 'refunded', amt)
          redis.call('XADD', KEYS[8], '*', 'ts', ARGV[2], 'kind', 'refund', 'key', redis.call('HGET', KEYS[1], 'key'), 'job', ARGV[1],
            'unit', 'credits', 'amount', amt, 'after', after, 'note', n .. ' ' .. ro .. ' results are not charged')
        end
      end
    end
  end
end
return fresh + changed
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
	args := make([]any, 0, 4+5*len(answers))
	args = append(args, j.ID, now.UnixMilli(), j.ExpiresAt.UnixMilli(), mode)
	for _, a := range answers {
		var due int64
		if !a.RetryAt.IsZero() {
			due = max(a.RetryAt.UnixMilli(), 1)
		}
		args = append(args, a.Index, a.Rows, a.Outcome, a.Data, due)
	}
	keys := []string{metaKey(j.ID), answersKey(j.ID), activeKey, retryKey(j.ID), retryingKey,
		accounts.AccountKey(j.AccountID), accounts.ChargeKey(j.AccountID, j.ID), accounts.LedgerKey(j.AccountID)}
	n, err := recordScript.Run(ctx, s.rdb, keys, args...).Int()
	if err != nil {
		return 0, fmt.Errorf("record answers of %s: %w", j.ID, err)
	}
	if n < 0 {
		return 0, ErrJobNotFound
	}
	return n, nil
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

// syncRetryingScript sets a job's score in the retrying-jobs zset to its
// earliest due retry (claims move retries later without touching it), or
// drops the job when it has none. KEYS = retry zset, retrying-jobs zset.
// ARGV = job id. Returns the earliest due time (ms) or 0.
var syncRetryingScript = redis.NewScript(`
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if first[2] then
  redis.call('ZADD', KEYS[2], first[2], ARGV[1])
  return tonumber(first[2])
end
redis.call('ZREM', KEYS[2], ARGV[1])
return 0
`)

// syncRetrying re-scores jobID in the retrying-jobs zset and returns when
// its next retry is due (zero: none).
func (s *Store) syncRetrying(ctx context.Context, jobID string) (time.Time, error) {
	ms, err := syncRetryingScript.Run(ctx, s.rdb, []string{retryKey(jobID), retryingKey}, jobID).Int64()
	if err != nil {
		return time.Time{}, fmt.Errorf("sync retries of %s: %w", jobID, err)
	}
	if ms == 0 {
		return time.Time{}, nil
	}
	return time.UnixMilli(ms).UTC(), nil
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
	n, err := claimScript.Run(ctx, s.rdb, []string{pendingKey, reclaimingKey}, cutoff.UnixMilli(), now.UnixMilli(), 1000).Int()
	if err != nil {
		return 0, fmt.Errorf("claim abandoned submissions: %w", err)
	}
	return n, nil
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

func (s *Store) doneReclaiming(ctx context.Context, jobID, accountID string) error {
	return s.rdb.ZRem(ctx, reclaimingKey, mark(jobID, accountID)).Err()
}

func (s *Store) dropPending(ctx context.Context, jobID, accountID string) error {
	return s.rdb.ZRem(ctx, pendingKey, mark(jobID, accountID)).Err()
}
