package controllers

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/batchjob"
	"github.com/bulkd/bulkd/internal/jobs"
)

// Condition reasons.
const (
	ReasonPending            = "Pending"
	ReasonQueued             = "Queued"
	ReasonRunning            = "Running"
	ReasonAllShardsSucceeded = "AllShardsSucceeded"
	ReasonShardsFailed       = "ShardsFailed"
	ReasonJobDataMissing     = "JobDataMissing"
	ReasonRetrying           = "Retrying"
	ReasonRetryJobFailed     = "RetryJobFailed"
	ReasonRetryJobSucceeded  = "RetryJobSucceeded"
	ReasonUnknownFamily      = "UnknownFamily"
)

// observation is what one reconcile pass saw: the job's counters in Redis
// and its batch Job, with the shards the Job has settled.
type observation struct {
	data *jobs.Job    // nil: the job's data is not in Redis
	job  *batchv1.Job // nil: no Job (yet, or no longer)

	succeeded map[int32]bool // shards whose index succeeded
	failed    map[int32]bool // shards failed for good

	createdJob bool  // this pass created the Job
	answered   []int // shards this pass answered with the family's error outcome
	// errorOutcome is the outcome the family answers a failed shard's
	// unanswered rows as (ShardFailer.ErrorOutcome), named by the
	// ShardsFailed condition.
	errorOutcome string

	// retryJob is the Job of the latest retry round (retryRound), nil when
	// there is none (or it is gone: TTL); createdRetry says this pass
	// created it. retryEnded is the Job of the latest round as this pass
	// found it finished (before it started the next one): its outcome is
	// the RetryFailed condition.
	retryJob     *batchv1.Job
	retryRound   int32
	createdRetry bool
	retryEnded   *batchv1.Job
	// retryWait is how long until the next retry is due (0: not waiting
	// for one).
	retryWait time.Duration

	// Admission (budgets or Kueue): queued says no shard of the Job has
	// been admitted yet, position is its place in line (0: unknown), and
	// active, when known, the shards running (not gated).
	queued   bool
	position int32
	active   *int32
}

// computeStatus folds an observation into the BulkJob's status. It is pure:
// the same inputs give the same status, so a pass that sees nothing new
// writes nothing. The reconciler writes it once, then emits the pass's
// events (emit).
func computeStatus(bj *v1alpha1.BulkJob, o *observation, now time.Time) v1alpha1.BulkJobStatus {
	st := *bj.Status.DeepCopy()
	st.ObservedGeneration = bj.Generation
	c := conditions{st: &st, generation: bj.Generation, now: now}
	if o.data == nil {
		st.Phase = v1alpha1.PhaseFailed
		st.ShardsActive = 0
		if st.CompletionTime == nil {
			st.CompletionTime = ptrTime(now)
		}
		c.set(v1alpha1.ConditionFailed, metav1.ConditionTrue, ReasonJobDataMissing,
			"the job's data is not in Redis (expired or deleted); it cannot be completed")
		c.set(v1alpha1.ConditionComplete, metav1.ConditionFalse, ReasonJobDataMissing, "the job cannot be completed")
		return st
	}
	d := o.data
	st.ProcessedRows = d.RowsProcessed
	st.Progress = progress(d.RowsProcessed, d.TotalRows)
	st.Outcomes = outcomeCounts(d.Outcomes)
	st.Invalid = d.TotalInvalid
	st.Retrying = max(d.Retrying, 0)
	st.RetryRounds = max(st.RetryRounds, o.retryRound)
	st.NextRetryTime = nil
	if d.Status == jobs.StatusRetrying && !d.NextRetryAt.IsZero() {
		st.NextRetryTime = ptrTime(d.NextRetryAt)
	}
	sh := countShards(&st, bj.Spec.Shards, o)
	setPhase(&st, o, sh, now)
	c.retryRound(o.retryEnded)
	if sh.failed > 0 {
		c.set(v1alpha1.ConditionShardsFailed, metav1.ConditionTrue, ReasonShardsFailed,
			fmt.Sprintf("%d of %d shards failed after retries; their unanswered rows are answered as %s", sh.failed, sh.shards, o.errorOutcome))
	}
	c.complete(d, o, sh)
	return st
}

// shardCounts is where a BulkJob's shards stand.
type shardCounts struct {
	shards, done, failed int32
	// complete: every row has its final answer and every Job has ended;
	// retrying: every row has an answer, some wait for a retry.
	complete, retrying bool
}

// countShards sets the shard counters of st and says whether the job is
// complete or retrying.
func countShards(st *v1alpha1.BulkJobStatus, shards int32, o *observation) shardCounts {
	d := o.data
	// Shards settle for good: the counts never go down, even once the
	// finished Job is gone (its TTL) while retries go on.
	sh := shardCounts{shards: shards, failed: max(int32(len(o.failed)), st.ShardsFailed), done: int32(min(d.ShardsDone, int64(shards)))}
	// The data says completed (or retrying) when the last input has its
	// first answer, a moment before the shard is marked done.
	settled := sh.done == shards || (o.job != nil && batchjob.Finished(o.job))
	// The retry pass that answers the last provisional answer completes
	// the data a moment before its Job ends, and that Job's outcome is the
	// RetryFailed condition: the job stays Retrying until the Job has
	// ended (its end is an event), or a finished BulkJob would keep the
	// condition of an earlier, failed round for good.
	retryRunning := o.retryJob != nil && !batchjob.Finished(o.retryJob)
	sh.complete = d.Status == jobs.StatusCompleted && settled && !retryRunning
	sh.retrying = settled && (d.Status == jobs.StatusRetrying || (d.Status == jobs.StatusCompleted && retryRunning))
	st.ShardsFailed = sh.failed
	st.ShardsActive = 0
	if sh.complete || sh.retrying {
		st.ShardsSucceeded = shards - sh.failed
		sh.done = shards
	} else {
		st.ShardsSucceeded = max(int32(len(o.succeeded)), st.ShardsSucceeded)
		switch {
		case o.active != nil:
			st.ShardsActive = *o.active
		case o.job != nil:
			st.ShardsActive = o.job.Status.Active
		}
	}
	st.ShardProgress = fmt.Sprintf("%d/%d", sh.done, shards)
	return sh
}

// setPhase sets st's phase, place in line and start time.
func setPhase(st *v1alpha1.BulkJobStatus, o *observation, sh shardCounts, now time.Time) {
	started := o.job != nil && (o.job.Status.StartTime != nil || o.job.Status.Active > 0 || len(o.succeeded)+len(o.failed) > 0)
	st.QueuePosition = 0
	switch {
	case sh.complete:
		st.Phase = v1alpha1.PhaseCompleted
	case sh.retrying:
		st.Phase = v1alpha1.PhaseRetrying
	case o.queued && sh.done == 0 && st.Phase != v1alpha1.PhaseRunning:
		// Once admitted, a BulkJob whose shards wait for their turn again
		// stays Running.
		st.Phase = v1alpha1.PhaseQueued
		st.QueuePosition = o.position
		st.ShardsActive = 0
	case started || sh.done > 0:
		st.Phase = v1alpha1.PhaseRunning
	default:
		st.Phase = v1alpha1.PhasePending
	}
	if st.Phase != v1alpha1.PhasePending && st.Phase != v1alpha1.PhaseQueued && st.StartTime == nil {
		if o.job != nil && o.job.Status.StartTime != nil {
			st.StartTime = o.job.Status.StartTime.DeepCopy()
		} else {
			st.StartTime = ptrTime(now)
		}
	}
}

// conditions sets the conditions of a status being computed.
type conditions struct {
	st         *v1alpha1.BulkJobStatus
	generation int64
	now        time.Time
}

func (c conditions) set(typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&c.st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason,
		Message: msg, ObservedGeneration: c.generation, LastTransitionTime: metav1.NewTime(c.now)})
}

// retryRound sets RetryFailed from the latest finished retry round's Job
// (nil: none ended this pass): a failed one is retried by the next.
func (c conditions) retryRound(rj *batchv1.Job) {
	switch {
	case rj == nil:
	case batchjob.Failed(rj):
		c.set(v1alpha1.ConditionRetryFailed, metav1.ConditionTrue, ReasonRetryJobFailed,
			fmt.Sprintf("retry Job %s failed; its retries come due again and the next round retries them", rj.Name))
	case batchjob.Finished(rj):
		c.set(v1alpha1.ConditionRetryFailed, metav1.ConditionFalse, ReasonRetryJobSucceeded,
			fmt.Sprintf("retry Job %s succeeded", rj.Name))
	}
}

// complete sets the Complete condition (and the completion time) of the
// phase.
func (c conditions) complete(d *jobs.Job, o *observation, sh shardCounts) {
	st := c.st
	switch st.Phase {
	case v1alpha1.PhaseCompleted:
		if st.CompletionTime == nil {
			t := c.now
			if !d.CompletedAt.IsZero() {
				t = d.CompletedAt
			}
			st.CompletionTime = ptrTime(t)
		}
		if sh.failed > 0 {
			c.set(v1alpha1.ConditionComplete, metav1.ConditionTrue, ReasonShardsFailed,
				fmt.Sprintf("all %d rows answered; %d of %d shards failed and their unanswered rows are answered as %s", d.TotalRows, sh.failed, sh.shards, o.errorOutcome))
		} else {
			c.set(v1alpha1.ConditionComplete, metav1.ConditionTrue, ReasonAllShardsSucceeded,
				fmt.Sprintf("all %d rows answered", d.TotalRows))
		}
	case v1alpha1.PhaseRetrying:
		c.set(v1alpha1.ConditionComplete, metav1.ConditionFalse, ReasonRetrying,
			"every row has an answer; some answers are provisional and wait for a retry")
	case v1alpha1.PhaseRunning:
		c.set(v1alpha1.ConditionComplete, metav1.ConditionFalse, ReasonRunning, "shards are running")
	case v1alpha1.PhaseQueued:
		c.set(v1alpha1.ConditionComplete, metav1.ConditionFalse, ReasonQueued, "waiting for admission (see queuePosition)")
	default:
		c.set(v1alpha1.ConditionComplete, metav1.ConditionFalse, ReasonPending, "no shard has started yet")
	}
}

// progress is processed rows as a whole percentage of rows, rounded down:
// "100%" only once every row has an answer.
func progress(processed, rows int64) string {
	if rows <= 0 {
		return "0%"
	}
	return fmt.Sprintf("%d%%", min(max(processed, 0), rows)*100/rows)
}

// outcomeCounts lists the rows per outcome sorted by name, without the
// outcomes that have none: the same counters give the same list.
func outcomeCounts(m map[string]int64) []v1alpha1.OutcomeCount {
	var out []v1alpha1.OutcomeCount
	for _, name := range slices.Sorted(maps.Keys(m)) {
		// The CRD's limits (a name of 63 characters, 64 outcomes) are far
		// above any family's; what would break them is left out rather
		// than have every status write refused.
		if name != "" && len(name) <= 63 && m[name] > 0 && len(out) < 64 {
			out = append(out, v1alpha1.OutcomeCount{Name: name, Rows: m[name]})
		}
	}
	return out
}

// formatOutcomes is "found 12, not_found 8" (or "none").
func formatOutcomes(oc []v1alpha1.OutcomeCount) string {
	if len(oc) == 0 {
		return "none"
	}
	parts := make([]string, len(oc))
	for i, o := range oc {
		parts[i] = fmt.Sprintf("%s %d", o.Name, o.Rows)
	}
	return strings.Join(parts, ", ")
}

func ptrTime(t time.Time) *metav1.Time {
	mt := metav1.NewTime(t.Truncate(time.Second))
	return &mt
}
