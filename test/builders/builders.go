// Package builders makes the objects of BulkJob tests in the style of
// Kueue's testingjobs: MakeX(...).Option(...).Obj(), so tests read like
// scenarios.
package builders

import (
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/jobs"
)

// BulkJobWrapper builds a BulkJob.
type BulkJobWrapper struct{ v1alpha1.BulkJob }

// MakeBulkJob starts a valid company-enrichment BulkJob of 25 rows, 20
// distinct inputs in 2 shards of 10, parallelism 2. name is also its job
// id.
func MakeBulkJob(name, namespace string) *BulkJobWrapper {
	return &BulkJobWrapper{v1alpha1.BulkJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: types.UID("uid-" + name), Generation: 1,
			CreationTimestamp: metav1.NewTime(time.Now().Truncate(time.Second))},
		Spec: v1alpha1.BulkJobSpec{
			Family: v1alpha1.FamilyCompanyEnrichment, Metering: v1alpha1.MeteringCredits, OwnerKeyID: "key123",
			JobID: name, Rows: 25, DistinctInputs: 20, Shards: 2, ShardSize: 10, Parallelism: 2,
		},
	}}
}

// Obj returns the BulkJob.
func (w *BulkJobWrapper) Obj() *v1alpha1.BulkJob { return &w.BulkJob }

// Family sets the family.
func (w *BulkJobWrapper) Family(f v1alpha1.Family) *BulkJobWrapper {
	w.Spec.Family = f
	return w
}

// Metering sets the metering.
func (w *BulkJobWrapper) Metering(m v1alpha1.Metering) *BulkJobWrapper {
	w.Spec.Metering = m
	return w
}

// JobID sets the job id (and not the name).
func (w *BulkJobWrapper) JobID(id string) *BulkJobWrapper {
	w.Spec.JobID = id
	return w
}

// Rows sets rows and distinct inputs.
func (w *BulkJobWrapper) Rows(rows, distinct int64) *BulkJobWrapper {
	w.Spec.Rows, w.Spec.DistinctInputs = rows, distinct
	return w
}

// Shards sets the shard count and size as given (even inconsistent ones).
func (w *BulkJobWrapper) Shards(shards, size int32) *BulkJobWrapper {
	w.Spec.Shards, w.Spec.ShardSize = shards, size
	return w
}

// Parallelism sets the parallelism.
func (w *BulkJobWrapper) Parallelism(p int32) *BulkJobWrapper {
	w.Spec.Parallelism = p
	return w
}

// Finalizer adds the data finalizer.
func (w *BulkJobWrapper) Finalizer() *BulkJobWrapper {
	w.Finalizers = append(w.Finalizers, v1alpha1.Finalizer)
	return w
}

// Created sets the creation time.
func (w *BulkJobWrapper) Created(t time.Time) *BulkJobWrapper {
	w.CreationTimestamp = metav1.NewTime(t)
	return w
}

// Phase sets the status phase.
func (w *BulkJobWrapper) Phase(p v1alpha1.BulkJobPhase) *BulkJobWrapper {
	w.Status.Phase = p
	return w
}

// StartTime sets the status start time.
func (w *BulkJobWrapper) StartTime(t time.Time) *BulkJobWrapper {
	w.Status.StartTime = ptr.To(metav1.NewTime(t))
	return w
}

// Progress sets the status's processed rows.
func (w *BulkJobWrapper) Progress(processed int64) *BulkJobWrapper {
	w.Status.ProcessedRows = processed
	return w
}

// Outcome adds (or sets) the status's rows of one outcome, keeping them
// sorted by name.
func (w *BulkJobWrapper) Outcome(name string, rows int64) *BulkJobWrapper {
	for i, o := range w.Status.Outcomes {
		if o.Name == name {
			w.Status.Outcomes[i].Rows = rows
			return w
		}
	}
	w.Status.Outcomes = append(w.Status.Outcomes, v1alpha1.OutcomeCount{Name: name, Rows: rows})
	slices.SortFunc(w.Status.Outcomes, func(a, b v1alpha1.OutcomeCount) int { return strings.Compare(a.Name, b.Name) })
	return w
}

// Retrying sets the status's inputs waiting for a retry and the retry
// rounds started.
func (w *BulkJobWrapper) Retrying(inputs int64, rounds int32) *BulkJobWrapper {
	w.Status.Retrying, w.Status.RetryRounds = inputs, rounds
	return w
}

// JobWrapper builds a batch Job as the Job controller would report it.
type JobWrapper struct{ batchv1.Job }

// MakeJob starts an Indexed Job of completions indexes.
func MakeJob(name, namespace string, completions int32) *JobWrapper {
	return &JobWrapper{batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: batchv1.JobSpec{
			CompletionMode: ptr.To(batchv1.IndexedCompletion), Completions: ptr.To(completions),
			Parallelism: ptr.To(completions), BackoffLimitPerIndex: ptr.To[int32](3),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "c", Image: "i"}}}},
		},
	}}
}

// Obj returns the Job.
func (w *JobWrapper) Obj() *batchv1.Job { return &w.Job }

// Label sets a label.
func (w *JobWrapper) Label(k, v string) *JobWrapper {
	if w.Labels == nil {
		w.Labels = map[string]string{}
	}
	w.Labels[k] = v
	return w
}

// OwnedBy makes owner the Job's controller.
func (w *JobWrapper) OwnedBy(apiVersion, kind, name string, uid types.UID) *JobWrapper {
	w.OwnerReferences = append(w.OwnerReferences, metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: name,
		UID: uid, Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)})
	return w
}

// Started sets the start time.
func (w *JobWrapper) Started(t time.Time) *JobWrapper {
	w.Status.StartTime = ptr.To(metav1.NewTime(t))
	return w
}

// Active sets the running pods.
func (w *JobWrapper) Active(n int32) *JobWrapper {
	w.Status.Active = n
	return w
}

// CompletedIndexes sets completedIndexes ("0-2,5") and succeeded.
func (w *JobWrapper) CompletedIndexes(s string, succeeded int32) *JobWrapper {
	w.Status.CompletedIndexes, w.Status.Succeeded = s, succeeded
	return w
}

// FailedIndexes sets failedIndexes.
func (w *JobWrapper) FailedIndexes(s string) *JobWrapper {
	w.Status.FailedIndexes = ptr.To(s)
	return w
}

// NonIndexed makes it a NonIndexed Job (a retry Job) with a backoffLimit.
func (w *JobWrapper) NonIndexed(backoffLimit int32) *JobWrapper {
	w.Spec.CompletionMode = ptr.To(batchv1.NonIndexedCompletion)
	w.Spec.BackoffLimitPerIndex = nil
	w.Spec.BackoffLimit = ptr.To(backoffLimit)
	return w
}

// Succeeded sets the succeeded pods.
func (w *JobWrapper) Succeeded(n int32) *JobWrapper {
	w.Status.Succeeded = n
	return w
}

// Condition adds a True condition (Complete, Failed, ...).
func (w *JobWrapper) Condition(t batchv1.JobConditionType, reason string) *JobWrapper {
	w.Status.Conditions = append(w.Status.Conditions, batchv1.JobCondition{Type: t, Status: corev1.ConditionTrue, Reason: reason})
	return w
}

// JobDataWrapper builds the engine's view of a job (its hash in Redis).
type JobDataWrapper struct{ jobs.Job }

// MakeJobData starts a running company-enrichment job of 25 rows (5
// invalid, already counted as processed), 20 distinct inputs in 2 shards.
func MakeJobData(id string) *JobDataWrapper {
	return &JobDataWrapper{jobs.Job{ID: id, Family: "company_enrichment", KeyID: "key123", Status: jobs.StatusRunning,
		TotalRows: 25, TotalInvalid: 5, Distinct: 20, RowsProcessed: 5, Shards: 2, ShardSize: 10,
		Outcomes: map[string]int64{}}}
}

// Obj returns the job.
func (w *JobDataWrapper) Obj() *jobs.Job { return &w.Job }

// Answered records rows answered per outcome (and distinct inputs).
func (w *JobDataWrapper) Answered(outcome string, rows, distinct int64) *JobDataWrapper {
	w.Outcomes[outcome] += rows
	w.RowsProcessed += rows
	w.DistinctProcessed += distinct
	return w
}

// ShardsDone sets the shards marked done.
func (w *JobDataWrapper) ShardsDone(n int64) *JobDataWrapper {
	w.Job.ShardsDone = n
	return w
}

// Completed marks the job completed at t.
func (w *JobDataWrapper) Completed(t time.Time) *JobDataWrapper {
	w.Status, w.CompletedAt = jobs.StatusCompleted, t
	w.Job.Retrying, w.NextRetryAt = 0, time.Time{}
	return w
}

// Family sets the family.
func (w *JobDataWrapper) Family(f string) *JobDataWrapper {
	w.Job.Family = f
	return w
}

// Retrying marks the job retrying: every input has a first answer, inputs
// of them are provisional, the earliest due at next (zero: none).
func (w *JobDataWrapper) Retrying(inputs int64, next time.Time) *JobDataWrapper {
	w.Status, w.Job.Retrying, w.NextRetryAt = jobs.StatusRetrying, inputs, next
	return w
}

// Reanswered moves rows from one outcome to another (a retry replacing a
// provisional answer); done says the input is no longer waiting.
func (w *JobDataWrapper) Reanswered(from, to string, rows int64, done bool) *JobDataWrapper {
	w.Outcomes[from] -= rows
	w.Outcomes[to] += rows
	if done {
		w.Job.Retrying--
	}
	return w
}
