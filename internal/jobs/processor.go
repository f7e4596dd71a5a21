package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"
)

// Answerer answers a family's distinct inputs. It returns exactly one Answer
// per input, in order. An error means the batch could not be answered at all
// (the store is down, say) and is retried; a per-input failure is an Answer
// with the family's error outcome.
type Answerer interface {
	Answer(ctx context.Context, payloads []string) ([]Answer, error)
	// ErrorAnswer is recorded for inputs still unanswered when a shard has
	// failed for good, so no row is silently lost.
	ErrorAnswer() Answer
}

// Retrier is an optional Answerer interface for families whose answers may
// be provisional (an Answer with RetryAt set): Retry answers inputs again,
// attempts[i] being the attempt number of payloads[i] (the first answer was
// attempt 1). A family decides when to stop: after its last attempt it
// returns a final answer.
type Retrier interface {
	Retry(ctx context.Context, payloads []string, attempts []int) ([]Answer, error)
}

// Streamer is an optional Answerer interface for families whose inputs are
// answered at different times (email verification: each mail server at its
// own pace): AnswerEach answers payloads, attempts[i] being payloads[i]'s
// attempt as for Retrier (nil: first answers), and calls emit(i, answer) as
// each answer is known, from one goroutine at a time. The processor records
// answers as they come (a row's result and the progress count as soon as it
// is known, not when its batch is), for first answers and retries alike.
// It returns once every input has been emitted, or with an error (ctx
// ended, say): inputs not emitted then are answered again later, and what
// was emitted stands (an answer emitted is the input's real answer).
type Streamer interface {
	AnswerEach(ctx context.Context, payloads []string, attempts []int, emit func(i int, a Answer)) error
}

// streamEvery is the least time between two record scripts of one
// streamed batch: answers that come meanwhile are recorded together, so a
// fast world costs a script per burst, not per address.
const streamEvery = 100 * time.Millisecond

// stream runs st over payloads and writes the answers as they come, in
// groups of at most BatchSize (record: one record or replace script),
// announcing progress after each.
func (p *Processor) stream(ctx context.Context, j *Job, st Streamer, payloads []string, attempts []int, shard int,
	rec func(k int, a Answer) Recorded, write func([]Recorded) error) error {
	var mu sync.Mutex
	var got []Recorded
	wake := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- st.AnswerEach(ctx, payloads, attempts, func(k int, a Answer) {
			r := rec(k, a)
			mu.Lock()
			got = append(got, r)
			mu.Unlock()
			select {
			case wake <- struct{}{}:
			default:
			}
		})
	}()
	flush := func() error {
		mu.Lock()
		batch := got
		got = nil
		mu.Unlock()
		for len(batch) > 0 {
			n := len(batch)
			if p.BatchSize > 0 {
				n = min(n, p.BatchSize)
			}
			if err := write(batch[:n]); err != nil {
				return err
			}
			batch = batch[n:]
		}
		p.announceProgress(ctx, j.ID, shard)
		return nil
	}
	var last time.Time
	var werr error
	for {
		select {
		case err := <-done:
			if werr == nil && ctx.Err() == nil {
				werr = flush()
			}
			if err != nil {
				return fmt.Errorf("answer %d inputs of %s: %w", len(payloads), j.ID, err)
			}
			return werr
		case <-wake:
			if werr != nil || ctx.Err() != nil {
				continue // drain until the answerer returns
			}
			if wait := time.Until(last.Add(streamEvery)); wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					continue
				}
			}
			last = time.Now()
			werr = flush()
		}
	}
}

// Processor answers shards. The same processor runs in-process (Local) and
// in processor pods (`bulkd processor`).
type Processor struct {
	Store     *Store
	Families  map[string]Answerer
	Log       *slog.Logger
	Now       func() time.Time
	BatchSize int // inputs per Answer call and per record script
	// BatchSizes overrides BatchSize per family (a family that answers a
	// whole shard at once, say).
	BatchSizes map[string]int
	// RetryHold is how long a claimed retry stays away from other runners;
	// a runner that dies releases it after that.
	RetryHold time.Duration
	LeaseTTL  time.Duration // how long a shard stays claimed without a heartbeat
	Owner     string        // lease owner id (process)
	// Announce, when set, tells the Kubernetes controller as answers are
	// recorded (progress.go); nil announces nothing (standalone mode).
	Announce *Announcer
}

// NewProcessor returns a processor with defaults.
func NewProcessor(st *Store, families map[string]Answerer, log *slog.Logger) *Processor {
	if log == nil {
		log = slog.Default()
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	return &Processor{Store: st, Families: families, Log: log, Now: time.Now, BatchSize: 500,
		RetryHold: 5 * time.Minute, LeaseTTL: 30 * time.Second, Owner: hex.EncodeToString(b[:])}
}

// Closer is what an Answerer may also implement: it holds something a
// process must give back before it exits (the verifier's parked SMTP
// sessions and their politeness slots, shared with other pods).
type Closer interface {
	Close()
}

// Close gives back what the families' answerers hold (Closer); a
// processor pod calls it when its shard is done, before it exits.
func (p *Processor) Close() {
	for _, a := range p.Families {
		if c, ok := a.(Closer); ok {
			c.Close()
		}
	}
}

// shardStore is everything answering a shard asks of the store, in the
// order of ProcessShard's walk: the shard's lease (taken, kept alive,
// given back), the job and the shard's inputs, which of a batch's inputs
// are answered already, the batch's answers recorded, the shard marked
// done. The walk reads in this file through this one interface; *Store
// implements it (storeleases.go: the lease and MarkShardDone; store.go:
// Get, ShardInputs, Answered; storerecord.go: Record, the record script).
type shardStore interface {
	AcquireLease(ctx context.Context, id string, shard int, owner string, ttl time.Duration) (bool, error)
	ExtendLease(ctx context.Context, id string, shard int, owner string, ttl time.Duration) error
	ReleaseLease(ctx context.Context, id string, shard int, owner string) error
	Get(ctx context.Context, id string) (*Job, error)
	ShardInputs(ctx context.Context, id string, shard int) ([]Input, error)
	Answered(ctx context.Context, id string, idx []int) ([]bool, error)
	Record(ctx context.Context, j *Job, now time.Time, answers []Recorded) (int, error)
	MarkShardDone(ctx context.Context, j *Job, shard int) error
}

// shards is the processor's store as the shard walk sees it.
func (p *Processor) shards() shardStore { return p.Store }

// ErrShardBusy means another worker holds the shard's lease.
var ErrShardBusy = errors.New("shard is being processed elsewhere")

// ProcessShard answers every unanswered input of one shard and marks it
// done. Running it twice, or concurrently with a crashed predecessor's
// leftovers, answers nothing twice: answers are recorded only where none
// exists.
func (p *Processor) ProcessShard(ctx context.Context, jobID string, shard int) error {
	ok, err := p.shards().AcquireLease(ctx, jobID, shard, p.Owner, p.LeaseTTL)
	if err != nil {
		return err
	}
	if !ok {
		return ErrShardBusy
	}
	defer func() { _ = p.shards().ReleaseLease(context.WithoutCancel(ctx), jobID, shard, p.Owner) }()
	hctx, stop := context.WithCancel(ctx)
	defer stop()
	go p.heartbeat(hctx, jobID, shard)

	j, fam, inputs, err := p.loadShard(ctx, jobID, shard)
	if err != nil {
		return err
	}
	base := shard * j.ShardSize
	size := p.batchSize(j.Family)
	for start := 0; start < len(inputs); start += size {
		if err := ctx.Err(); err != nil {
			return err
		}
		end := min(start+size, len(inputs))
		if err := p.answerBatch(ctx, j, fam, inputs[start:end], base+start); err != nil {
			return err
		}
		p.announceProgress(ctx, jobID, shard)
	}
	if err := p.shards().MarkShardDone(ctx, j, shard); err != nil {
		return err
	}
	p.announceDone(ctx, jobID, shard)
	return nil
}

func (p *Processor) answerBatch(ctx context.Context, j *Job, fam Answerer, batch []Input, first int) error {
	idx := make([]int, len(batch))
	for i := range batch {
		idx[i] = first + i
	}
	done, err := p.shards().Answered(ctx, j.ID, idx)
	if err != nil {
		return err
	}
	var todo []int // positions in batch
	payloads := make([]string, 0, len(batch))
	for i, d := range done {
		if !d {
			todo = append(todo, i)
			payloads = append(payloads, batch[i].Payload)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	if st, ok := fam.(Streamer); ok {
		return p.stream(ctx, j, st, payloads, nil, idx[0]/max(j.ShardSize, 1), func(k int, a Answer) Recorded {
			i := todo[k]
			return Recorded{Index: idx[i], Rows: batch[i].Rows, Outcome: a.Outcome, Data: a.Data, RetryAt: a.RetryAt}
		}, func(rec []Recorded) error {
			// As below: answers in hand are written, a Redis restart
			// costing a pause (Record writes only what is not recorded).
			return p.withStore(ctx, "record answers of "+j.ID, func() error {
				_, err := p.shards().Record(ctx, j, p.Now(), rec)
				return err
			})
		})
	}
	answers, err := fam.Answer(ctx, payloads)
	if err != nil {
		return fmt.Errorf("answer %d inputs of %s: %w", len(payloads), j.ID, err)
	}
	if err := ctx.Err(); err != nil {
		// Stopped while answering (shutdown, or the shard was preempted):
		// an answerer may have cut its work short without saying so, and
		// such answers must not be recorded as the inputs' answers.
		return err
	}
	if len(answers) != len(payloads) {
		return fmt.Errorf("answerer returned %d answers for %d inputs", len(answers), len(payloads))
	}
	rec := make([]Recorded, len(todo))
	for k, i := range todo {
		rec[k] = Recorded{Index: idx[i], Rows: batch[i].Rows, Outcome: answers[k].Outcome, Data: answers[k].Data, RetryAt: answers[k].RetryAt}
	}
	// The answers are in hand: a Redis restart must cost a pause, not
	// answering them again (Record writes only answers not yet recorded,
	// so writing again is safe).
	return p.withStore(ctx, "record answers of "+j.ID, func() error {
		_, err := p.shards().Record(ctx, j, p.Now(), rec)
		return err
	})
}

func (p *Processor) batchSize(family string) int {
	if n := p.BatchSizes[family]; n > 0 {
		return n
	}
	return p.BatchSize
}

// RetryDue answers every provisional answer of a job that is due now, in
// batches, and returns when the next one is due (zero when none is left).
// Runners may overlap: a retry is claimed before it is answered, and a
// retry answer replaces only a provisional answer.
func (p *Processor) RetryDue(ctx context.Context, jobID string) (time.Time, error) {
	j, err := p.Store.Get(ctx, jobID)
	if err != nil {
		return time.Time{}, err
	}
	fam, ok := p.Families[j.Family]
	if !ok {
		return time.Time{}, fmt.Errorf("job %s: no answerer for family %q", jobID, j.Family)
	}
	rt, ok := fam.(Retrier)
	if !ok {
		return time.Time{}, fmt.Errorf("job %s: family %q has provisional answers but cannot retry", jobID, j.Family)
	}
	shards := map[int][]Input{}
	// Bounded: each pass claims due retries and pushes them out by
	// RetryHold, so the loop ends when nothing more is due now.
	for {
		if err := ctx.Err(); err != nil {
			return time.Time{}, err
		}
		idx, attempts, err := p.Store.claimRetries(ctx, j, p.Now(), p.batchSize(j.Family), p.RetryHold)
		if err != nil {
			return time.Time{}, err
		}
		if len(idx) == 0 {
			break
		}
		payloads := make([]string, len(idx))
		rows := make([]int64, len(idx))
		for k, x := range idx {
			sh := x / j.ShardSize
			in, ok := shards[sh]
			if !ok {
				if in, err = p.Store.ShardInputs(ctx, jobID, sh); err != nil {
					return time.Time{}, err
				}
				shards[sh] = in
			}
			if x-sh*j.ShardSize >= len(in) {
				return time.Time{}, fmt.Errorf("job %s: retry of input %d past its shard", jobID, x)
			}
			payloads[k], rows[k] = in[x-sh*j.ShardSize].Payload, in[x-sh*j.ShardSize].Rows
		}
		if st, ok := fam.(Streamer); ok {
			if err := p.stream(ctx, j, st, payloads, attempts, -1, func(k int, a Answer) Recorded {
				return Recorded{Index: idx[k], Rows: rows[k], Outcome: a.Outcome, Data: a.Data, RetryAt: a.RetryAt}
			}, func(rec []Recorded) error {
				return p.withStore(ctx, "record retry answers of "+j.ID, func() error {
					_, err := p.Store.Replace(ctx, j, p.Now(), rec)
					return err
				})
			}); err != nil {
				return time.Time{}, err
			}
			continue
		}
		answers, err := rt.Retry(ctx, payloads, attempts)
		if err != nil {
			return time.Time{}, fmt.Errorf("retry %d inputs of %s: %w", len(payloads), jobID, err)
		}
		if len(answers) != len(payloads) {
			return time.Time{}, fmt.Errorf("retrier returned %d answers for %d inputs", len(answers), len(payloads))
		}
		rec := make([]Recorded, len(idx))
		for k := range idx {
			rec[k] = Recorded{Index: idx[k], Rows: rows[k], Outcome: answers[k].Outcome, Data: answers[k].Data, RetryAt: answers[k].RetryAt}
		}
		// These retries are claimed (held away from every runner for
		// RetryHold): their answers must be recorded now, Redis restart or
		// not (Replace replaces only provisional answers: safe to repeat).
		if err := p.withStore(ctx, "record retry answers of "+j.ID, func() error {
			_, err := p.Store.Replace(ctx, j, p.Now(), rec)
			return err
		}); err != nil {
			return time.Time{}, err
		}
		p.announceProgress(ctx, jobID, -1)
	}
	next, err := p.Store.syncRetrying(ctx, jobID)
	if err == nil {
		p.announceDone(ctx, jobID, -1)
	}
	return next, err
}

// FailShard answers every still-unanswered input of a shard with the
// family's error answer: the shard failed for good and its rows must not
// stay pending forever.
func (p *Processor) FailShard(ctx context.Context, jobID string, shard int) error {
	j, fam, inputs, err := p.loadShard(ctx, jobID, shard)
	if err != nil {
		return err
	}
	ea := fam.ErrorAnswer()
	base := shard * j.ShardSize
	rec := make([]Recorded, len(inputs))
	for i, in := range inputs {
		rec[i] = Recorded{Index: base + i, Rows: in.Rows, Outcome: ea.Outcome, Data: ea.Data}
	}
	for start := 0; start < len(rec); start += p.BatchSize {
		if _, err := p.Store.Record(ctx, j, p.Now(), rec[start:min(start+p.BatchSize, len(rec))]); err != nil {
			return err
		}
	}
	p.Log.Warn("shard failed for good; its unanswered rows are answered as the family's error outcome", "job", jobID, "shard", shard, "outcome", ea.Outcome)
	return p.Store.MarkShardDone(ctx, j, shard)
}

// ErrorOutcome is the outcome FailShard answers family's unanswered inputs
// as (the family's ErrorAnswer), false for a family this processor has no
// answerer for. The controller names it in its ShardsFailed condition.
func (p *Processor) ErrorOutcome(family string) (string, bool) {
	fam, ok := p.Families[family]
	if !ok {
		return "", false
	}
	return fam.ErrorAnswer().Outcome, true
}

// KnownFamilies lists the families this processor answers, sorted.
func (p *Processor) KnownFamilies() []string {
	return slices.Sorted(maps.Keys(p.Families))
}

// loadShard reads what answering a shard needs: the job, its family's
// answerer and the shard's inputs.
func (p *Processor) loadShard(ctx context.Context, jobID string, shard int) (*Job, Answerer, []Input, error) {
	j, err := p.shards().Get(ctx, jobID)
	if err != nil {
		return nil, nil, nil, err
	}
	fam, ok := p.Families[j.Family]
	if !ok {
		return nil, nil, nil, fmt.Errorf("job %s: %w %q (this build knows %v)", jobID, ErrUnknownFamily, j.Family, p.KnownFamilies())
	}
	inputs, err := p.shards().ShardInputs(ctx, jobID, shard)
	if err != nil {
		return nil, nil, nil, err
	}
	return j, fam, inputs, nil
}

func (p *Processor) heartbeat(ctx context.Context, jobID string, shard int) {
	every(ctx, p.LeaseTTL/3, func() {
		if err := p.shards().ExtendLease(ctx, jobID, shard, p.Owner, p.LeaseTTL); err != nil && ctx.Err() == nil {
			p.Log.Warn("lease heartbeat failed", "job", jobID, "shard", shard, "err", err)
		}
	})
}
