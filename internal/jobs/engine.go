package jobs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/rowcache"
)

// Executor runs a stored job's shards: in-process (Local) or as Kubernetes
// Jobs. Enqueue must not block on the work itself.
type Executor interface {
	// Enqueue makes a stored job's shards runnable; an error refuses the job.
	Enqueue(ctx context.Context, j *Job) error
	// Cancel stops and forgets a job's work (its submission was rolled back,
	// or the job was deleted).
	Cancel(ctx context.Context, jobID string) error
}

// StatusReader is an optional Executor interface: an executor that keeps
// its own record of a job's progress (the BulkJob status in Kubernetes
// mode) reports it, and Get shows that record. Local does not implement it:
// standalone status comes from the job's counters in Redis.
type StatusReader interface {
	// ReadStatus overwrites j's progress fields (Status, RowsProcessed,
	// Outcomes, ShardsDone, CompletedAt) with the executor's record of the
	// job. It returns false, leaving j as stored, when it has no record of
	// the job (yet).
	ReadStatus(ctx context.Context, j *Job) (bool, error)
}

// Metering is how a submission is paid for: a credit price per distinct
// input, or units of an unlimited plan's quota. It is also a family's
// declaration of what it charges (family.Metering is this type: the family
// sets Price and RefundOutcome, the API sets Quota on unlimited-plan
// mounts).
type Metering struct {
	Price credits.Amount // per distinct input; used when Quota is nil
	Quota *Quota
	// RefundOutcome, when set on a credit-metered job, names an outcome
	// that is not charged: when the job completes, Price times the rows
	// answered with it is refunded, in the same atomic step as the
	// completion (email verification does not charge unknown results).
	// Only for families with one row per distinct input.
	RefundOutcome string
}

// Quota meters against a plan quota instead of credits.
type Quota struct {
	Window billing.Window
	Limit  int64
}

// Engine submits jobs and reads them back.
type Engine struct {
	Store    *Store
	Billing  *billing.Billing
	Executor Executor
	Log      *slog.Logger
	Now      func() time.Time

	ShardSize int // distinct inputs per shard
	// MaxShards caps the shards of one job (0: no cap): a larger job gets
	// larger shards instead of more. Where each shard costs a fixed start-up
	// (a pod in Kubernetes mode, seconds), this keeps a 100,000-input job
	// from paying that start-up a hundred times.
	MaxShards int
	Retention time.Duration // how long a job's data is kept after submission
	// RowCache, when set, keeps the rendered rows of completed jobs
	// (Results); nil renders every page from Redis.
	RowCache *rowcache.Cache
	// Limits are the default per-account limits a submission must fit
	// (usage.go: ActiveJobs and StoredBytes; an account's overrides in
	// its hash win). Zero: no limit.
	Limits accounts.Limits
	// AnswerBytes is the bytes reserved per distinct input for its answer
	// until the job completes (0: DefaultAnswerBytes).
	AnswerBytes int64
	// Deleted, when set, is told of each job deleted (DeleteJob), after
	// its keys are gone: the webhook service announces job.deleted.
	Deleted func(ctx context.Context, d *Deletion)

	// failpoint, when set (tests only), is called before each step of a
	// submission; an error there behaves like a failure of that step.
	failpoint func(step string) error
}

// NewEngine returns an engine with defaults: shards of 1,000 inputs,
// retention 30 days.
func NewEngine(st *Store, bl *billing.Billing, ex Executor, log *slog.Logger) *Engine {
	if log == nil {
		log = slog.Default()
	}
	return &Engine{Store: st, Billing: bl, Executor: ex, Log: log, Now: time.Now, ShardSize: 1000, Retention: 30 * 24 * time.Hour}
}

// SetFailpoint installs a failure injector (tests).
func (e *Engine) SetFailpoint(f func(step string) error) { e.failpoint = f }

func (e *Engine) fail(step string) error {
	if e.failpoint == nil {
		return nil
	}
	if err := e.failpoint(step); err != nil {
		return fmt.Errorf("%s: %w", step, err)
	}
	return nil
}

// Submission steps, in order (the failpoint names).
const (
	StepMark    = "mark"
	StepReserve = "reserve"
	StepCharge  = "charge"
	StepStore   = "store"
	StepEnqueue = "enqueue"
	StepCommit  = "commit"
)

// Submit charges for b's distinct inputs, stores the job and hands it to the
// executor. Either all of that happens, or the charge is reversed and no job
// remains (SPEC section 3): on an error return there is nothing to clean up.
// A process that dies half-way leaves a mark the janitor (ReclaimAbandoned)
// finds and rolls back.
//
// A *billing.InsufficientError or *billing.QuotaError means the account
// cannot pay, and a *accounts.LimitError that the job does not fit the
// account's limits (usage.go); nothing was taken.
func (e *Engine) Submit(ctx context.Context, p *accounts.Principal, b *Builder, m Metering) (*Job, error) {
	now := e.Now().UTC()
	j, err := e.newJob(ctx, p, b, m, now)
	if err != nil {
		return nil, err
	}
	// The bytes the job will hold: its row map and inputs exactly (encoded
	// once here; create writes these same chunks), and an estimate for
	// its answers, replaced by their exact size when it completes.
	enc, err := b.encode(j.ShardSize)
	if err != nil {
		return nil, err
	}
	answerBytes := cmp.Or(e.AnswerBytes, DefaultAnswerBytes)
	reserveBytes := enc.bytes + j.Distinct*answerBytes

	if err := e.fail(StepMark); err != nil {
		return nil, err
	}
	if err := e.Store.markPending(ctx, j.ID, j.AccountID, now); err != nil {
		return nil, fmt.Errorf("mark submission: %w", err)
	}
	sub := &submission{e: e, j: j}
	// The account's limits before its money: a submission that does not
	// fit is refused with nothing charged and nothing in the ledger.
	if err := e.fail(StepReserve); err != nil {
		return nil, sub.rollback(ctx, err)
	}
	if err := e.reserve(ctx, j, reserveBytes); err != nil {
		// A refusal reserved nothing; after any other error the script
		// may have run (a lost reply): release in case it did.
		var le *accounts.LimitError
		sub.reserved = !errors.As(err, &le)
		return nil, sub.rollback(ctx, err)
	}
	sub.reserved = true

	if err := e.fail(StepCharge); err != nil {
		return nil, sub.rollback(ctx, err)
	}
	if err := e.charge(ctx, j, m); err != nil {
		var ie *billing.InsufficientError
		var qe *billing.QuotaError
		if errors.As(err, &ie) || errors.As(err, &qe) {
			_ = sub.rollback(ctx, err)
			return nil, err
		}
		// The script may have run even though we saw an error (a timeout on
		// the reply): reverse in case it did.
		sub.charged = true
		return nil, sub.rollback(ctx, err)
	}
	sub.charged = true
	if err := sub.storeAndCommit(ctx, b); err != nil {
		return nil, sub.rollback(ctx, err)
	}
	e.Log.Info("job accepted", "job", j.ID, "family", j.Family, "account", j.AccountID, "key", "bkd_"+j.KeyID,
		"rows", j.TotalRows, "distinct", j.Distinct, "invalid", j.TotalInvalid, "shards", j.Shards,
		"charge", j.Charge.String(), "quota_units", j.QuotaUnits)
	return j, nil
}

// newJob is the job b makes for p's account, dated now and paid for as m
// says (its charge or quota units; not taken yet).
func (e *Engine) newJob(ctx context.Context, p *accounts.Principal, b *Builder, m Metering, now time.Time) (*Job, error) {
	// The account's retention, if it chose one (docs/privacy.md): read
	// here, not from the principal, so that a change applies to the next
	// submission whatever authenticated it.
	days, err := e.Store.rdb.HGet(ctx, accounts.AccountKey(p.Account.ID), "retention_days").Int()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read the account's retention: %w", err)
	}
	j := &Job{
		ID: cmp.Or(b.ID, uuid.NewString()), Family: b.Family, AccountID: p.Account.ID, KeyID: p.Key.ID, Status: StatusRunning,
		TotalRows: int64(b.Rows()), TotalInvalid: b.Invalid(), Distinct: int64(b.Distinct()),
		ShardSize: e.shardSizeFor(b.Distinct()), CreatedAt: now, ExpiresAt: now.Add(accounts.Retention(days, e.Retention)),
	}
	j.Shards = (b.Distinct() + j.ShardSize - 1) / j.ShardSize
	// Inputs naming a suppressed person are answered already (Suppress)
	// and paid for by nobody.
	payable := j.Distinct - int64(b.Suppressed())
	if payable == 0 { // nothing to answer: the job is complete on arrival
		j.Status, j.CompletedAt = StatusCompleted, now
	}
	if m.Quota != nil {
		j.QuotaUnits, j.QuotaWindow = payable, m.Quota.Window.Name
		return j, nil
	}
	amt, err := m.Price.Mul(payable)
	if err != nil {
		return nil, err
	}
	j.Charge = amt
	j.RefundOutcome, j.Price = m.RefundOutcome, m.Price
	return j, nil
}

// submission is one Submit past its mark: what it has done so far, so
// that a rollback undoes exactly that.
type submission struct {
	e                 *Engine
	j                 *Job
	charged, reserved bool
	// enqueued: the executor may have heard of the job (Enqueue was
	// called, whatever it returned: a Kubernetes create that timed out may
	// still have made the BulkJob). Only then is there anything to cancel;
	// a submission refused before (403 insufficient credits, 429 quota, a
	// failed store) must not cost the executor a call, which in Kubernetes
	// mode is a DELETE to the API server per rejection.
	enqueued bool
}

// storeAndCommit stores the paid job, hands a running one to the executor
// and drops the submission's mark.
func (s *submission) storeAndCommit(ctx context.Context, b *Builder) error {
	e, j := s.e, s.j
	if err := e.fail(StepStore); err != nil {
		return err
	}
	if err := e.Store.create(ctx, j, b); err != nil {
		return err
	}
	if err := e.fail(StepEnqueue); err != nil {
		return err
	}
	if j.Status == StatusRunning {
		s.enqueued = true
		if err := e.Executor.Enqueue(ctx, j); err != nil {
			return fmt.Errorf("executor refused the job: %w", err)
		}
	}
	if err := e.fail(StepCommit); err != nil {
		return err
	}
	return e.Store.commit(ctx, j.ID, j.AccountID)
}

// rollback undoes what the submission did and returns cause. It is
// detached from the request: a client that hung up must not stop the
// refund. An incomplete rollback keeps the mark, and the janitor finishes
// it.
func (s *submission) rollback(ctx context.Context, cause error) error {
	e, j := s.e, s.j
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var errs []error
	if s.enqueued {
		if err := e.Executor.Cancel(rctx, j.ID); err != nil {
			errs = append(errs, fmt.Errorf("cancel in executor: %w", err))
		}
	}
	if err := e.Store.Delete(rctx, j.ID); err != nil {
		errs = append(errs, err)
	}
	if s.reserved {
		if err := e.Store.releaseUsage(rctx, j.AccountID, j.ID, "gone", -1); err != nil {
			errs = append(errs, err)
		}
	}
	if s.charged {
		if _, err := e.Billing.Reverse(rctx, j.AccountID, j.ID, "submission failed: "+cause.Error()); err != nil && !errors.Is(err, billing.ErrChargeNotFound) {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		// Only a complete rollback may drop the mark.
		if err := e.Store.dropPending(rctx, j.ID, j.AccountID); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		e.Log.Error("submission rollback incomplete; the janitor will finish it", "job", j.ID, "err", errors.Join(errs...))
	} else {
		e.Log.Warn("submission rolled back", "job", j.ID, "account", j.AccountID, "cause", cause)
	}
	return cause
}

// shardSizeFor is the shard size of a job of distinct inputs: ShardSize,
// grown just enough that the job has at most MaxShards shards.
func (e *Engine) shardSizeFor(distinct int) int {
	size := e.ShardSize
	if e.MaxShards > 0 && distinct > size*e.MaxShards {
		size = (distinct + e.MaxShards - 1) / e.MaxShards
	}
	return size
}

func (e *Engine) charge(ctx context.Context, j *Job, m Metering) error {
	if m.Quota != nil {
		if j.QuotaUnits == 0 {
			return nil
		}
		_, err := e.Billing.Consume(ctx, billing.Consumption{AccountID: j.AccountID, KeyID: j.KeyID, ChargeID: j.ID,
			Window: m.Quota.Window, N: j.QuotaUnits, Limit: m.Quota.Limit})
		return err
	}
	_, err := e.Billing.Charge(ctx, billing.Charge{AccountID: j.AccountID, KeyID: j.KeyID, ChargeID: j.ID,
		Amount: j.Charge, Note: j.Family})
	return err
}

// Get returns a job if keyID owns it; another key's job is ErrJobNotFound
// (SPEC 5.7: a job belongs to the key that created it).
func (e *Engine) Get(ctx context.Context, keyID, jobID string) (*Job, error) {
	j, err := e.Store.Get(ctx, jobID)
	if err != nil {
		return nil, err
	}
	if j.KeyID != keyID {
		return nil, ErrJobNotFound
	}
	e.readStatus(ctx, j)
	return j, nil
}

// Page returns rows [offset, offset+limit) of a job keyID owns.
func (e *Engine) Page(ctx context.Context, keyID, jobID string, offset, limit int) (*Page, error) {
	p, err := e.Store.ReadPage(ctx, jobID, offset, limit)
	if err != nil {
		return nil, err
	}
	if p.Job.KeyID != keyID {
		return nil, ErrJobNotFound
	}
	return p, nil
}

// ReclaimAbandoned rolls back submissions whose process died between the
// charge and the commit: marked more than olderThan ago and never committed.
// Whoever takes the mark out of the pending set first owns the job (commit
// or reclaim), so a slow submission and the janitor never both win. The
// janitor moves the mark into a reclaiming set in the same step and clears
// it only when the rollback is complete, so a janitor that dies half-way
// leaves the mark where the next pass finds it: the refund is never lost.
// Every rollback step is idempotent, so doing one twice is harmless.
func (e *Engine) ReclaimAbandoned(ctx context.Context, olderThan time.Duration) (int, error) {
	now := e.Now()
	if _, err := e.Store.claimStale(ctx, now.Add(-olderThan), now); err != nil {
		return 0, err
	}
	// Everything in the reclaiming set: just claimed, or left by a janitor
	// that died (a live one finishes within seconds).
	claimed, err := e.Store.reclaiming(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error // one job that keeps failing must not hold up the others' refunds
	for _, c := range claimed {
		if err := e.reclaimOne(ctx, c[0], c[1], "submission abandoned"); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// reclaimOne rolls back a submission whose mark is in the reclaiming set:
// cancel, delete its data, reverse its charge, drop the mark. Every step is
// idempotent.
func (e *Engine) reclaimOne(ctx context.Context, jobID, accountID, note string) error {
	if err := e.Executor.Cancel(ctx, jobID); err != nil {
		e.Log.Error("reclaim: cancel", "job", jobID, "err", err)
	}
	err := e.Store.Delete(ctx, jobID)
	if err == nil {
		err = e.Store.releaseUsage(ctx, accountID, jobID, "gone", -1)
	}
	if err == nil {
		_, err = e.Billing.Reverse(ctx, accountID, jobID, note)
		if errors.Is(err, billing.ErrChargeNotFound) {
			err = nil
		}
	}
	if err == nil {
		err = e.Store.doneReclaiming(ctx, jobID, accountID)
	}
	if err != nil {
		return fmt.Errorf("reclaim %s: %w", jobID, err)
	}
	e.Log.Warn("reclaimed abandoned submission", "job", jobID, "account", accountID, "why", note)
	return nil
}

// Takeover settles a submission that a request recorded before charging
// (an Idempotency-Key's claim) and whose process then stopped answering
// (its claim's lease ran out): the retry of that request calls it with the
// recorded id. It returns the job when the submission was committed (the
// retry answers with it: the client pays once), or nil when it was not:
// then a submission still pending is rolled back here and now, its mark
// taken first so that a process that was only slow can no longer commit
// it, and the retry runs anew.
func (e *Engine) Takeover(ctx context.Context, accountID, keyID, jobID string) (*Job, error) {
	taken, err := e.Store.claimMark(ctx, jobID, accountID, e.Now())
	if err != nil {
		return nil, err
	}
	if !taken {
		// Not pending: committed, never marked, or already being rolled
		// back (by the janitor or an earlier takeover: finish it).
		if taken, err = e.Store.isReclaiming(ctx, jobID, accountID); err != nil {
			return nil, err
		}
	}
	if taken {
		return nil, e.reclaimOne(ctx, jobID, accountID, "submission taken over by a retry with its Idempotency-Key")
	}
	j, err := e.Get(ctx, keyID, jobID)
	if errors.Is(err, ErrJobNotFound) {
		return nil, nil
	}
	return j, err
}
