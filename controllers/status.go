package controllers

import (
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/jobs"
)

// Condition reasons.
const (
	ReasonPending            = "Pending"
	ReasonRunning            = "Running"
	ReasonAllShardsSucceeded = "AllShardsSucceeded"
	ReasonShardsFailed       = "ShardsFailed"
	ReasonJobDataMissing     = "JobDataMissing"
)

// observation is what one reconcile pass saw: the job's counters in Redis
// and its batch Job, with the shards the Job has settled.
type observation struct {
	data *jobs.Job    // nil: the job's data is not in Redis
	job  *batchv1.Job // nil: no Job (yet, or no longer)

	succeeded map[int32]bool // shards whose index succeeded
	failed    map[int32]bool // shards failed for good

	createdJob bool  // this pass created the Job
	answered   []int // shards this pass answered as errors
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
	st.Found = d.Outcomes[jobs.OutcomeFound]
	st.NotFound = d.Outcomes[jobs.OutcomeNotFound]
	st.Errors = d.Outcomes[jobs.OutcomeError]
	st.Invalid = d.TotalInvalid

	shards := bj.Spec.Shards
	failed := int32(len(o.failed))
	done := int32(min(d.ShardsDone, int64(shards)))
	complete := d.Status == jobs.StatusCompleted && (done == shards || (o.job != nil && jobFinished(o.job)))
	st.ShardsFailed = failed
	st.ShardsActive = 0
	if complete {
		st.ShardsSucceeded = shards - failed
		done = shards
	} else {
		st.ShardsSucceeded = int32(len(o.succeeded))
		if o.job != nil {
			st.ShardsActive = o.job.Status.Active
		}
	}
	st.ShardProgress = fmt.Sprintf("%d/%d", done, shards)

	started := o.job != nil && (o.job.Status.StartTime != nil || o.job.Status.Active > 0 || len(o.succeeded)+len(o.failed) > 0)
	switch {
	case complete:
		st.Phase = v1alpha1.PhaseCompleted
	case started || done > 0:
		st.Phase = v1alpha1.PhaseRunning
	default:
		st.Phase = v1alpha1.PhasePending
	}
	if st.Phase != v1alpha1.PhasePending && st.StartTime == nil {
		if o.job != nil && o.job.Status.StartTime != nil {
			st.StartTime = o.job.Status.StartTime.DeepCopy()
		} else {
			st.StartTime = ptrTime(now)
		}
	}

	if failed > 0 {
		cond(v1alpha1.ConditionShardsFailed, metav1.ConditionTrue, ReasonShardsFailed,
			fmt.Sprintf("%d of %d shards failed after retries; their unanswered rows are answered as %s", failed, shards, jobs.OutcomeError))
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
				fmt.Sprintf("all %d rows answered; %d of %d shards failed and their unanswered rows are errors", d.TotalRows, failed, shards))
		} else {
			cond(v1alpha1.ConditionComplete, metav1.ConditionTrue, ReasonAllShardsSucceeded,
				fmt.Sprintf("all %d rows answered", d.TotalRows))
		}
	case v1alpha1.PhaseRunning:
		cond(v1alpha1.ConditionComplete, metav1.ConditionFalse, ReasonRunning, "shards are running")
	default:
		cond(v1alpha1.ConditionComplete, metav1.ConditionFalse, ReasonPending, "no shard has started yet")
	}
	return st
}

func ptrTime(t time.Time) *metav1.Time {
	mt := metav1.NewTime(t.Truncate(time.Second))
	return &mt
}
