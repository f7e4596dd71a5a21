package jobs

// Erasing a person from a job (docs/privacy.md, `bulkd admin erase`): the
// inputs naming them lose their payload, the rows pointing at those inputs
// their echo, and the answers become the family's suppressed answer. The
// job keeps its shape (row positions, counts), so pages do not shift.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Erased is one input of a job that an erasure removed: what it was, so
// that the caller can forget what was learned from it.
type Erased struct {
	Payload string // the input as the family's answerer read it
	Answer  string // the stored answer (outcome, newline, data); "" when unanswered
}

// Redaction is what Redact changed in one job.
type Redaction struct {
	Inputs int64 // distinct inputs erased
	Rows   int64 // rows whose echo was removed
	// Erased are the erased inputs as they were.
	Erased []Erased
}

// redactScanCount is the HSCAN batch: bounded memory per call whatever the
// job's size (a field is a 500-row chunk, a shard's inputs or one answer).
const redactScanCount = 500

// swapAnswerScript replaces an input's final answer with another, moving
// its rows between the outcome counters. KEYS = meta, answers. ARGV =
// index, rows, outcome, value. Returns 1 when it replaced something.
var swapAnswerScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local prev = redis.call('HGET', KEYS[2], ARGV[1])
if not prev then return 0 end
local pout = string.match(prev, '^([^\n]*)')
if pout == ARGV[3] then return 0 end
local m = tonumber(ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
redis.call('HINCRBY', KEYS[1], 'out:' .. pout, -m)
redis.call('HINCRBY', KEYS[1], 'out:' .. ARGV[3], m)
redis.call('HINCRBY', KEYS[1], 'answer_bytes', #ARGV[4] - #prev)
return 1
`)

// Redact erases from job j every input whose payload hitInput matches, or
// whose stored answer hitAnswer matches (an address found for a person),
// replacing its answer with ans, and removes the echo of every row
// pointing at one (and of invalid rows whose echo hitAnswer matches). It
// reads the job a batch of fields at a time (HSCAN), so memory stays
// bounded for any job size. Every step is idempotent: an erasure cut short
// is finished by running it again.
func (s *Store) Redact(ctx context.Context, j *Job, hitInput, hitAnswer func(string) bool, ans Answer) (*Redaction, error) {
	red := &Redaction{}
	// 1. Answers that name the subject (a lookup's found address).
	byAnswer := map[int]string{}
	answers := map[int]string{}
	if err := s.hscan(ctx, answersKey(j.ID), func(field, val string) error {
		if hitAnswer(val) {
			i, _ := strconv.Atoi(field)
			byAnswer[i] = val
		}
		return nil
	}); err != nil {
		return nil, err
	}
	// 2. Inputs: the hits, their rows; the payloads blanked.
	hits := map[int32]int64{} // distinct index -> rows
	if err := s.hscan(ctx, inputsKey(j.ID), func(field, val string) error {
		shard, _ := strconv.Atoi(field)
		var in []Input
		if err := json.Unmarshal([]byte(val), &in); err != nil {
			return fmt.Errorf("job %s shard %d: %w", j.ID, shard, err)
		}
		dirty := false
		for k := range in {
			idx := shard*j.ShardSize + k
			prev, named := byAnswer[idx]
			if !named && (in[k].Payload == "" || !hitInput(in[k].Payload)) {
				continue // not the subject, or erased (or suppressed) before
			}
			if !named {
				prev, _ = s.rdb.HGet(ctx, answersKey(j.ID), strconv.Itoa(idx)).Result()
			}
			red.Erased = append(red.Erased, Erased{Payload: in[k].Payload, Answer: prev})
			answers[idx] = prev
			hits[int32(idx)] = in[k].Rows
			in[k].Payload = ""
			dirty = true
		}
		if !dirty {
			return nil
		}
		blob, err := json.Marshal(in)
		if err != nil {
			return err
		}
		return s.rdb.HSet(ctx, inputsKey(j.ID), field, blob).Err()
	}); err != nil {
		return nil, err
	}
	red.Inputs = int64(len(hits))
	// 3. Answers: unanswered ones answered (counted, the job completed if
	// it was the last), provisional ones replaced, final ones swapped.
	if err := s.answerRedacted(ctx, j, hits, ans); err != nil {
		return nil, err
	}
	// 4. Rows: the echoes of the hits' rows, and of invalid rows naming
	// the subject.
	if err := s.redactRows(ctx, j, hits, hitAnswer, red); err != nil {
		return nil, err
	}
	if red.Inputs > 0 || red.Rows > 0 {
		// Cached rendered rows of this job are stale: results readers
		// compare this generation (results.go).
		if err := s.rdb.HIncrBy(ctx, metaKey(j.ID), "erased", 1).Err(); err != nil {
			return nil, fmt.Errorf("erase from job %s: %w", j.ID, err)
		}
	}
	return red, nil
}

// answerRedacted answers the erased inputs hits (distinct index -> rows)
// with ans, whatever their answer was: unanswered ones recorded (counted,
// the job completed if it was the last), provisional ones replaced, final
// ones swapped.
func (s *Store) answerRedacted(ctx context.Context, j *Job, hits map[int32]int64, ans Answer) error {
	if len(hits) == 0 {
		return nil
	}
	now := time.Now()
	recs := make([]Recorded, 0, len(hits))
	for idx, rows := range hits {
		recs = append(recs, Recorded{Index: int(idx), Rows: rows, Outcome: ans.Outcome, Data: ans.Data})
	}
	if _, err := s.Record(ctx, j, now, recs); err != nil && err != ErrJobNotFound {
		return err
	}
	if _, err := s.Replace(ctx, j, now, recs); err != nil && err != ErrJobNotFound {
		return err
	}
	val := ans.Outcome + "\n" + string(ans.Data)
	for _, r := range recs {
		if err := swapAnswerScript.Run(ctx, s.rdb, []string{metaKey(j.ID), answersKey(j.ID)}, r.Index, r.Rows, ans.Outcome, val).Err(); err != nil {
			return fmt.Errorf("erase from job %s: %w", j.ID, err)
		}
	}
	return nil
}

// redactRows removes the echoes of the rows of the erased inputs hits,
// and of invalid rows whose echo hitAnswer matches, counting them in red.
func (s *Store) redactRows(ctx context.Context, j *Job, hits map[int32]int64, hitAnswer func(string) bool, red *Redaction) error {
	return s.hscan(ctx, rowsKey(j.ID), func(field, val string) error {
		rows, err := decodeRows([]byte(val))
		if err != nil {
			return fmt.Errorf("job %s row chunk %s: %w", j.ID, field, err)
		}
		dirty := false
		for r := range rows {
			_, hit := hits[rows[r].Index]
			if rows[r].Echo == "" || !(hit && rows[r].Index >= 0 || rows[r].Index < 0 && hitAnswer(rows[r].Echo)) {
				continue
			}
			rows[r].Echo = ""
			red.Rows++
			dirty = true
		}
		if !dirty {
			return nil
		}
		return s.rdb.HSet(ctx, rowsKey(j.ID), field, encodeRows(rows)).Err()
	})
}

// hscan calls f with every field of hash key, redactScanCount at a time.
func (s *Store) hscan(ctx context.Context, key string, f func(field, val string) error) error {
	var cursor uint64
	for {
		kv, next, err := s.rdb.HScan(ctx, key, cursor, "*", redactScanCount).Result()
		if err != nil {
			return fmt.Errorf("scan %s: %w", key, err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if err := f(kv[i], kv[i+1]); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// AllJobs calls f with every job of every account (each account's job
// index, a page at a time): the jobs an erasure looks through. Ids whose
// job is gone are skipped.
func (s *Store) AllJobs(ctx context.Context, accounts []string, f func(*Job) error) error {
	for _, a := range accounts {
		var start int64
		for {
			ids, err := s.rdb.ZRange(ctx, accountJobsKey(a), start, start+redactScanCount-1).Result()
			if err != nil {
				return fmt.Errorf("jobs of account %s: %w", a, err)
			}
			for _, id := range ids {
				j, err := s.Get(ctx, id)
				if err == ErrJobNotFound {
					continue
				}
				if err != nil {
					return err
				}
				if err := f(j); err != nil {
					return err
				}
			}
			if len(ids) < redactScanCount {
				break
			}
			start += redactScanCount
		}
	}
	return nil
}
