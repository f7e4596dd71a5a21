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
// writes nothing.
func computeStatus(bj *v1alpha1.BulkJob, o *observation, now time.Time) v1alpha1.BulkJobStatus {
	st := *bj.Status.DeepCopy()
	st.ObservedGeneration = bj.Generation
	cond := func(typ string, status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason,
			Message: msg, ObservedGeneration: bj.Generation, LastTransitionTime: metav1.NewTime(now)})
	}
	if o.data == nil {
		st.Phase = v1alpha1.PhaseFailed
		st.ShardsActive = 0
		if st.CompletionTime == nil {
			st.CompletionTime = ptrTime(now)
		}
		cond(v1alpha1.ConditionFailed, metav1.ConditionTrue, ReasonJobDataMissing,
			"the job's data is not in Redis (expired or deleted); it cannot be completed")
		cond(v1alpha1.ConditionComplete, metav1.ConditionFalse, ReasonJobDataMissing, "the job cannot be completed")
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

	shards := bj.Spec.Shards
	// Shards settle for good: the counts never go down, even once the
	// finished Job is gone (its TTL) while retries go on.
	failed := max(int32(len(o.failed)), st.ShardsFailed)
	done := int32(min(d.ShardsDone, int64(shards)))
	// The data says completed (or retrying) when the last input has its
	// first answer, a moment before the shard is marked done.
	settled := done == shards || (o.job != nil && batchjob.Finished(o.job))
	// The retry pass that answers the last provisional answer completes
	// the data a moment before its Job ends, and that Job's outcome is the
	// RetryFailed condition: the job stays Retrying until the Job has
	// ended (its end is an event), or a finished BulkJob would keep the
	// condition of an earlier, failed round for good.
	retryRunning := o.retryJob != nil && !batchjob.Finished(o.retryJob)
	complete := d.Status == jobs.StatusCompleted && settled && !retryRunning
	retrying := settled && (d.Status == jobs.StatusRetrying || (d.Status == jobs.StatusCompleted && retryRunning))
	st.ShardsFailed = failed
	st.ShardsActive = 0
	if complete || retrying {
		st.ShardsSucceeded = shards - failed
		done = shards
	} else {
		st.ShardsSucceeded = max(int32(len(o.succeeded)), st.ShardsSucceeded)
		switch {
		case o.active != nil:
			st.ShardsActive = *o.active
		case o.job != nil:
			st.ShardsActive = o.job.Status.Active
		}
	}
	st.ShardProgress = fmt.Sprintf("%d/%d", done, shards)

	started := o.job != nil && (o.job.Status.StartTime != nil || o.job.Status.Active > 0 || len(o.succeeded)+len(o.failed) > 0)
	st.QueuePosition = 0
	switch {
	case complete:
		st.Phase = v1alpha1.PhaseCompleted
	case retrying:
		st.Phase = v1alpha1.PhaseRetrying
	case o.queued && done == 0 && st.Phase != v1alpha1.PhaseRunning:
		// Once admitted, a BulkJob whose shards wait for their turn again
		// stays Running.
		st.Phase = v1alpha1.PhaseQueued
		st.QueuePosition = o.position
		st.ShardsActive = 0
	case started || done > 0:
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

	// The latest finished retry round: a failed one is retried by the next.
	if rj := o.retryEnded; rj != nil {
		switch {
		case batchjob.Failed(rj):
			cond(v1alpha1.ConditionRetryFailed, metav1.ConditionTrue, ReasonRetryJobFailed,
				fmt.Sprintf("retry Job %s failed; its retries come due again and the next round retries them", rj.Name))
		case batchjob.Finished(rj):
			cond(v1alpha1.ConditionRetryFailed, metav1.ConditionFalse, ReasonRetryJobSucceeded,
				fmt.Sprintf("retry Job %s succeeded", rj.Name))
		}
	}
	if failed > 0 {
		cond(v1alpha1.ConditionShardsFailed, metav1.ConditionTrue, ReasonShardsFailed,
			fmt.Sprintf("%d of %d shards failed after retries; their unanswered rows are answered as %s", failed, shards, o.errorOutcome))
	}
	switch st.Phase {
	case v1alpha1.PhaseCompleted:
		if st.CompletionTime == nil {
			t := now
			if !d.CompletedAt.IsZero() {
				t = d.CompletedAt
			}
			st.CompletionTime = ptrTime(t)
		}
		if failed > 0 {
			cond(v1alpha1.ConditionComplete, metav1.ConditionTrue, ReasonShardsFailed,
				fmt.Sprintf("all %d rows answered; %d of %d shards failed and their unanswered rows are answered as %s", d.TotalRows, failed, shards, o.errorOutcome))
		} else {
			cond(v1alpha1.ConditionComplete, metav1.ConditionTrue, ReasonAllShardsSucceeded,
				fmt.Sprintf("all %d rows answered", d.TotalRows))
		}
	case v1alpha1.PhaseRetrying:
		cond(v1alpha1.ConditionComplete, metav1.ConditionFalse, ReasonRetrying,
			"every row has an answer; some answers are provisional and wait for a retry")
	case v1alpha1.PhaseRunning:
		cond(v1alpha1.ConditionComplete, metav1.ConditionFalse, ReasonRunning, "shards are running")
	case v1alpha1.PhaseQueued:
		cond(v1alpha1.ConditionComplete, metav1.ConditionFalse, ReasonQueued, "waiting for admission (see queuePosition)")
	default:
		cond(v1alpha1.ConditionComplete, metav1.ConditionFalse, ReasonPending, "no shard has started yet")
	}
	return st
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
