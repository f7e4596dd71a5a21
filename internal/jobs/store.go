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
	exp := j.ExpiresAt
	if err := s.writeChunks(ctx, j.ID, exp, enc); err != nil {
		return fmt.Errorf("store job %s: %w", j.ID, err)
	}
	j.WebhookURL = b.WebhookURL
	meta := jobMeta(j, b, enc.bytes)
	if err := s.storeSuppressed(ctx, j, b, meta); err != nil {
		return fmt.Errorf("store job %s: %w", j.ID, err)
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
	pipe := s.rdb.Pipeline()
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

// writeChunks writes a job's row map and inputs, chunk by chunk, in
// pipelines of bounded size, each key expiring at exp from its first
// write on.
func (s *Store) writeChunks(ctx context.Context, id string, exp time.Time, enc *encoded) error {
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
	}{{rowsKey(id), enc.rows}, {inputsKey(id), enc.shards}} {
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
					return err
				}
			}
		}
	}
	return flush()
}

// jobMeta is the metadata hash of a new job; baseBytes are the bytes of
// its row map and inputs.
func jobMeta(j *Job, b *Builder, baseBytes int64) map[string]any {
	meta := map[string]any{
		"id": j.ID, "family": j.Family, "account": j.AccountID, "key": j.KeyID, "status": j.Status,
		"total_rows": j.TotalRows, "total_invalid": j.TotalInvalid, "distinct": j.Distinct,
		"rows_processed": j.TotalInvalid, "distinct_processed": 0,
		"shards": j.Shards, "shard_size": j.ShardSize, "shards_done": 0,
		"charge": int64(j.Charge), "quota_units": j.QuotaUnits, "quota_window": j.QuotaWindow,
		"price": int64(j.Price), "refund_outcome": j.RefundOutcome, "refunded": 0,
		"created_at": j.CreatedAt.UnixMilli(), "completed_at": 0, "expires_at": j.ExpiresAt.UnixMilli(),
		// The bytes of the row map and inputs: with the answers' bytes
		// (answer_bytes, recordScript) what the job holds (usage.go).
		"base_bytes": baseBytes,
	}
	if j.Status == StatusCompleted {
		meta["completed_at"] = j.CompletedAt.UnixMilli()
	}
	if j.WebhookURL != "" {
		meta["webhook_url"] = j.WebhookURL
	}
	if b.IdemKey != "" {
		meta["idem"] = b.IdemKey
	}
	return meta
}

// storeSuppressed writes the answers of the inputs answered at submission
// (Builder.Suppress) and counts them in meta as the record script would
// have counted them.
func (s *Store) storeSuppressed(ctx context.Context, j *Job, b *Builder, meta map[string]any) error {
	if len(b.suppressed) == 0 {
		return nil
	}
	meta["rows_processed"] = j.TotalInvalid + b.suppressedRows
	meta["distinct_processed"] = len(b.suppressed)
	var abytes int64
	answers := make(map[string]any, len(b.suppressed))
	for i, a := range b.suppressed {
		val := a.Outcome + "\n" + string(a.Data)
		answers[strconv.Itoa(int(i))] = val
		abytes += int64(len(val))
		meta["out:"+a.Outcome] = b.suppressedRows // one outcome for all of them
	}
	meta["answer_bytes"] = abytes
	if err := s.rdb.HSet(ctx, answersKey(j.ID), answers).Err(); err != nil {
		return err
	}
	return s.rdb.PExpireAt(ctx, answersKey(j.ID), j.ExpiresAt).Err()
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
	if len(m) == 0 || m["id"] == "" || m["deleted_at"] != "" { // a deleted job is gone from its tombstone on
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
		Refunded: credits.Amount(i("refunded")), Erased: i("erased"),
		Charge: credits.Amount(i("charge")), QuotaUnits: i("quota_units"), QuotaWindow: m["quota_window"],
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

// ActiveJobs lists running jobs.
func (s *Store) ActiveJobs(ctx context.Context) ([]string, error) {
	return s.rdb.SMembers(ctx, activeKey).Result()
}

// ForgetActive drops a job from the active set (it expired or was deleted).
func (s *Store) ForgetActive(ctx context.Context, id string) error {
	return s.rdb.SRem(ctx, activeKey, id).Err()
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
	if len(m) == 0 || m["id"] == "" || m["deleted_at"] != "" {
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
