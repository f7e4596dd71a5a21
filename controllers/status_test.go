package controllers

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/test/builders"
)

func TestComputeStatus(t *testing.T) {
	now := time.Date(2026, 3, 9, 12, 0, 0, 0, time.UTC)
	started := now.Add(-time.Minute)
	id := "0c6d7e7e-1111-4222-8333-944445555666"
	bj := builders.MakeBulkJob(id, "bulkd").Obj() // 25 rows, 20 distinct, 2 shards
	set := func(idx ...int32) map[int32]bool {
		m := map[int32]bool{}
		for _, i := range idx {
			m[i] = true
		}
		return m
	}
	oc := func(kv ...any) []v1alpha1.OutcomeCount {
		var out []v1alpha1.OutcomeCount
		for i := 0; i < len(kv); i += 2 {
			out = append(out, v1alpha1.OutcomeCount{Name: kv[i].(string), Rows: int64(kv[i+1].(int))})
		}
		return out
	}
	verification := func() *builders.JobDataWrapper {
		return builders.MakeJobData(id).Family("email_verification")
	}
	type want struct {
		phase                   v1alpha1.BulkJobPhase
		processed               int64
		outcomes                []v1alpha1.OutcomeCount
		pct                     string // status.progress
		retrying                int64
		nextRetry               bool
		succeeded, failed, act  int32
		progress                string
		complete                metav1.ConditionStatus
		completeReason          string
		shardsFailedCond        bool
		retryFailed             string // "": no RetryFailed condition, else its status
		startTime, completeTime bool
	}
	cases := []struct {
		name string
		obs  *observation
		want want
	}{
		{
			name: "accepted, Job not started",
			obs:  &observation{data: builders.MakeJobData(id).Obj(), job: builders.MakeJob(id, "bulkd", 2).Obj()},
			want: want{phase: v1alpha1.PhasePending, processed: 5, pct: "20%", progress: "0/2", complete: metav1.ConditionFalse, completeReason: ReasonPending},
		},
		{
			name: "running: counters come from Redis, shard counts from the Job",
			obs: &observation{data: builders.MakeJobData(id).Answered("found", 8, 7).Answered("error", 2, 2).ShardsDone(1).Obj(),
				job: builders.MakeJob(id, "bulkd", 2).Started(started).Active(1).CompletedIndexes("0", 1).Obj(), succeeded: set(0)},
			want: want{phase: v1alpha1.PhaseRunning, processed: 15, outcomes: oc("error", 2, "found", 8), pct: "60%", succeeded: 1, act: 1, progress: "1/2",
				complete: metav1.ConditionFalse, completeReason: ReasonRunning, startTime: true},
		},
		{
			name: "every input answered but the last shard not marked done yet: still running",
			obs: &observation{data: builders.MakeJobData(id).Answered("found", 20, 20).ShardsDone(1).Completed(now).Obj(),
				job: builders.MakeJob(id, "bulkd", 2).Started(started).Active(1).CompletedIndexes("0", 1).Obj(), succeeded: set(0)},
			want: want{phase: v1alpha1.PhaseRunning, processed: 25, outcomes: oc("found", 20), pct: "100%", succeeded: 1, act: 1, progress: "1/2",
				complete: metav1.ConditionFalse, completeReason: ReasonRunning, startTime: true},
		},
		{
			name: "completed",
			obs: &observation{data: builders.MakeJobData(id).Answered("found", 20, 20).ShardsDone(2).Completed(now).Obj(),
				job: builders.MakeJob(id, "bulkd", 2).Started(started).Active(1).CompletedIndexes("0", 1).Obj(), succeeded: set(0)},
			want: want{phase: v1alpha1.PhaseCompleted, processed: 25, outcomes: oc("found", 20), pct: "100%", succeeded: 2, progress: "2/2",
				complete: metav1.ConditionTrue, completeReason: ReasonAllShardsSucceeded, startTime: true, completeTime: true},
		},
		{
			name: "completed with a shard answered as errors",
			obs: &observation{data: builders.MakeJobData(id).Answered("found", 10, 10).Answered("error", 10, 10).ShardsDone(2).Completed(now).Obj(),
				job: builders.MakeJob(id, "bulkd", 2).Started(started).CompletedIndexes("0", 1).FailedIndexes("1").
					Condition(batchv1.JobFailureTarget, batchv1.JobReasonFailedIndexes).Condition(batchv1.JobFailed, batchv1.JobReasonFailedIndexes).Obj(),
				succeeded: set(0), failed: set(1), answered: []int{1}, errorOutcome: "error"},
			want: want{phase: v1alpha1.PhaseCompleted, processed: 25, outcomes: oc("error", 10, "found", 10), pct: "100%", succeeded: 1, failed: 1, progress: "2/2",
				complete: metav1.ConditionTrue, completeReason: ReasonShardsFailed, shardsFailedCond: true, startTime: true, completeTime: true},
		},
		{
			name: "another family's outcomes, zero counts left out",
			obs: &observation{data: verification().Answered("valid", 6, 5).Answered("invalid", 4, 4).Answered("catch_all", 0, 0).ShardsDone(0).Obj(),
				job: builders.MakeJob(id, "bulkd", 2).Started(started).Active(2).Obj()},
			want: want{phase: v1alpha1.PhaseRunning, processed: 15, outcomes: oc("invalid", 4, "valid", 6), pct: "60%", act: 2, progress: "0/2",
				complete: metav1.ConditionFalse, completeReason: ReasonRunning, startTime: true},
		},
		{
			name: "every input answered, some provisional: retrying, not finished",
			obs: &observation{data: verification().Answered("valid", 12, 12).Answered("unknown", 8, 8).ShardsDone(2).Retrying(3, now.Add(90*time.Second)).Obj(),
				job: builders.MakeJob(id, "bulkd", 2).Started(started).CompletedIndexes("0-1", 2).
					Condition(batchv1.JobSuccessCriteriaMet, batchv1.JobReasonCompletionsReached).Condition(batchv1.JobComplete, batchv1.JobReasonCompletionsReached).Obj(),
				succeeded: set(0, 1)},
			want: want{phase: v1alpha1.PhaseRetrying, processed: 25, outcomes: oc("unknown", 8, "valid", 12), pct: "100%", retrying: 3, nextRetry: true,
				succeeded: 2, progress: "2/2", complete: metav1.ConditionFalse, completeReason: ReasonRetrying, startTime: true},
		},
		{
			name: "retrying, the shard Job gone (TTL) and the last retry Job failed",
			obs: &observation{data: verification().Answered("valid", 12, 12).Answered("unknown", 8, 8).ShardsDone(2).Retrying(3, now.Add(time.Minute)).Obj(),
				retryRound: 2, retryEnded: builders.MakeJob(id+"-retry-2", "bulkd", 1).NonIndexed(3).Started(started).
						Condition(batchv1.JobFailureTarget, batchv1.JobReasonBackoffLimitExceeded).Condition(batchv1.JobFailed, batchv1.JobReasonBackoffLimitExceeded).Obj()},
			want: want{phase: v1alpha1.PhaseRetrying, processed: 25, outcomes: oc("unknown", 8, "valid", 12), pct: "100%", retrying: 3, nextRetry: true,
				succeeded: 2, progress: "2/2", complete: metav1.ConditionFalse, completeReason: ReasonRetrying, retryFailed: "True", startTime: true},
		},
		{
			name: "retries done: completed, the last retry Job succeeded",
			obs: &observation{data: verification().Answered("valid", 12, 12).Answered("unknown", 8, 8).ShardsDone(2).Retrying(3, now).
				Reanswered("unknown", "valid", 2, true).Reanswered("unknown", "invalid", 1, true).Completed(now).Obj(),
				retryRound: 3, retryEnded: builders.MakeJob(id+"-retry-3", "bulkd", 1).NonIndexed(3).Started(started).Succeeded(1).
						Condition(batchv1.JobSuccessCriteriaMet, batchv1.JobReasonCompletionsReached).Condition(batchv1.JobComplete, batchv1.JobReasonCompletionsReached).Obj()},
			want: want{phase: v1alpha1.PhaseCompleted, processed: 25, outcomes: oc("invalid", 1, "unknown", 5, "valid", 14), pct: "100%",
				succeeded: 2, progress: "2/2", complete: metav1.ConditionTrue, completeReason: ReasonAllShardsSucceeded, retryFailed: "False",
				startTime: true, completeTime: true},
		},
		{
			name: "retries done in Redis, their Job not ended yet: still retrying",
			obs: &observation{data: verification().Answered("valid", 12, 12).Answered("unknown", 8, 8).ShardsDone(2).Retrying(3, now).
				Reanswered("unknown", "valid", 2, true).Reanswered("unknown", "invalid", 1, true).Completed(now).Obj(),
				retryRound: 3, retryJob: builders.MakeJob(id+"-retry-3", "bulkd", 1).NonIndexed(3).Started(started).Active(1).Obj()},
			want: want{phase: v1alpha1.PhaseRetrying, processed: 25, outcomes: oc("invalid", 1, "unknown", 5, "valid", 14), pct: "100%",
				succeeded: 2, progress: "2/2", complete: metav1.ConditionFalse, completeReason: ReasonRetrying, startTime: true},
		},
		{
			name: "job data gone",
			obs:  &observation{},
			want: want{phase: v1alpha1.PhaseFailed, complete: metav1.ConditionFalse, completeReason: ReasonJobDataMissing, completeTime: true},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := computeStatus(bj, c.obs, now)
			w := c.want
			if st.Phase != w.phase || st.ProcessedRows != w.processed || !equality.Semantic.DeepEqual(st.Outcomes, w.outcomes) ||
				st.Progress != w.pct || st.Retrying != w.retrying || (st.NextRetryTime != nil) != w.nextRetry || st.RetryRounds != c.obs.retryRound ||
				st.ShardsSucceeded != w.succeeded || st.ShardsFailed != w.failed || st.ShardsActive != w.act || st.ShardProgress != w.progress {
				t.Fatalf("status %+v, want %+v", st, w)
			}
			if rc := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionRetryFailed); (rc == nil) != (w.retryFailed == "") || (rc != nil && string(rc.Status) != w.retryFailed) {
				t.Fatalf("RetryFailed condition %+v, want %q", rc, w.retryFailed)
			}
			cc := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionComplete)
			if cc == nil || cc.Status != w.complete || cc.Reason != w.completeReason || cc.ObservedGeneration != bj.Generation {
				t.Fatalf("Complete condition %+v", cc)
			}
			if meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionShardsFailed) != w.shardsFailedCond {
				t.Fatalf("ShardsFailed condition: %+v", st.Conditions)
			}
			if (st.StartTime != nil) != w.startTime || (st.CompletionTime != nil) != w.completeTime || st.ObservedGeneration != bj.Generation {
				t.Fatalf("times: start %v completion %v", st.StartTime, st.CompletionTime)
			}
			if w.phase == v1alpha1.PhaseFailed && !meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionFailed) {
				t.Fatal("want the Failed condition")
			}
			// Folding the same observation again changes nothing: a pass
			// that sees nothing new writes nothing.
			again := bj.DeepCopy()
			again.Status = st
			if st2 := computeStatus(again, c.obs, now.Add(time.Minute)); !equality.Semantic.DeepEqual(st, st2) {
				t.Fatalf("not idempotent:\n%+v\n%+v", st, st2)
			}
		})
	}
}
