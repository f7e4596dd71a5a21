// Package kube is bulkd's Kubernetes executor: the jobs.Executor the API
// uses to turn accepted jobs into BulkJobs (and to read their status
// back), and the client configuration the Kubernetes commands share
// (RESTConfig). The commands themselves are elsewhere: `bulkd apiserver`
// is internal/kubeapi, `bulkd processor` internal/processor, `bulkd
// controller` the controllers package.
//
// The API server's service account needs, in its namespace:
// bulkjobs.bulkd.io create, delete, get, list, watch (list and watch feed
// the status cache). The processor pods need no Kubernetes access at all.
package kube

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/jobs"
)

// Executor is the jobs.Executor of Kubernetes mode: Enqueue creates the
// job's BulkJob (the controller runs it), Cancel deletes it (its finalizer
// deletes the job's data). It also implements jobs.StatusReader: a job's
// status is its BulkJob's.
type Executor struct {
	// Client creates and deletes BulkJobs and reads their status (from a
	// cache in `bulkd apiserver`).
	Client client.Client
	// APIReader reads straight from the API server, where a cache may not
	// have seen a BulkJob created a moment ago; defaults to Client.
	APIReader client.Reader
	// Namespace holds the BulkJobs.
	Namespace string
	// Parallelism of new BulkJobs (capped by their shard count).
	Parallelism int32

	// refused holds the jobs whose BulkJob the API server certainly did
	// not create, so the rollback's Cancel needs no call that could fail
	// the same way.
	refused sync.Map
}

var (
	_ jobs.Executor     = (*Executor)(nil)
	_ jobs.StatusReader = (*Executor)(nil)
)

// BulkJobFor is the BulkJob of an accepted job. It is created with the
// controller's finalizer, so that the controller's first pass does not
// spend a write (and a second pass) adding it.
func BulkJobFor(j *jobs.Job, namespace string, parallelism int32) *v1alpha1.BulkJob {
	metering := v1alpha1.MeteringCredits
	if j.QuotaWindow != "" {
		metering = v1alpha1.MeteringUnlimitedQuota
	}
	bj := &v1alpha1.BulkJob{
		ObjectMeta: metav1.ObjectMeta{
			Name:      j.ID,
			Namespace: namespace,
			Labels: map[string]string{
				v1alpha1.LabelName:      "bulkd",
				v1alpha1.LabelManagedBy: v1alpha1.ManagedByAPIServer,
				v1alpha1.LabelFamily:    j.Family,
			},
			Finalizers: []string{v1alpha1.Finalizer},
		},
		Spec: v1alpha1.BulkJobSpec{
			Family:         v1alpha1.Family(j.Family),
			Metering:       metering,
			OwnerKeyID:     j.KeyID,
			JobID:          j.ID,
			Rows:           j.TotalRows,
			DistinctInputs: j.Distinct,
			Shards:         int32(j.Shards),
			ShardSize:      int32(j.ShardSize),
			Parallelism:    max(1, min(parallelism, int32(j.Shards))),
		},
	}
	// The account's id (acct_..., never a key or a secret): whose budget
	// and turn its shards take (the controller's admission). An id that is
	// not a label value is left out rather than have the create refused;
	// the controller then reads the account from the job's data.
	if j.AccountID != "" && len(validation.IsValidLabelValue(j.AccountID)) == 0 {
		bj.Labels[v1alpha1.LabelAccount] = j.AccountID
	}
	if !j.ExpiresAt.IsZero() {
		bj.Annotations = map[string]string{v1alpha1.AnnotationExpiresAt: j.ExpiresAt.UTC().Format(time.RFC3339)}
	}
	return bj
}

// Enqueue creates the job's BulkJob. An error refuses the job: the engine
// then reverses the charge and deletes the job's data.
func (e *Executor) Enqueue(ctx context.Context, j *jobs.Job) error {
	bj := BulkJobFor(j, e.Namespace, e.Parallelism)
	err := e.Client.Create(ctx, bj)
	if err == nil {
		return nil
	}
	refused := certainlyNotCreated(err)
	if apierrors.IsAlreadyExists(err) {
		// A retried create whose first try went through is fine. Read past
		// any cache, which may not have seen that first try yet.
		r := e.APIReader
		if r == nil {
			r = e.Client
		}
		var cur v1alpha1.BulkJob
		switch gerr := r.Get(ctx, client.ObjectKeyFromObject(bj), &cur); {
		case gerr == nil && cur.Spec.JobID == j.ID && cur.DeletionTimestamp.IsZero():
			return nil
		case gerr == nil && cur.Spec.JobID != j.ID:
			refused = true // another object of this name: ours was not created, and theirs is not ours to delete
		}
		// Otherwise ours may exist (or be on its way out): the rollback's
		// Cancel deletes it.
	}
	if refused {
		e.refused.Store(j.ID, true)
	}
	return fmt.Errorf("create BulkJob %s/%s: %w", e.Namespace, j.ID, err)
}

// certainlyNotCreated tells the errors after which the object cannot
// exist; after a timeout or a lost connection it may.
func certainlyNotCreated(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || apierrors.IsNotFound(err) ||
		apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsMethodNotSupported(err)
}

// Cancel deletes the job's BulkJob; its finalizer deletes the job's data
// and the garbage collector its Job and pods.
func (e *Executor) Cancel(ctx context.Context, jobID string) error {
	if _, ok := e.refused.LoadAndDelete(jobID); ok {
		return nil
	}
	bj := &v1alpha1.BulkJob{ObjectMeta: metav1.ObjectMeta{Name: jobID, Namespace: e.Namespace}}
	err := e.Client.Delete(ctx, bj, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete BulkJob %s/%s: %w", e.Namespace, jobID, err)
	}
	return nil
}

// ReadStatus implements jobs.StatusReader: a job's status, progress and
// outcome counts are its BulkJob's. A BulkJob the controller has not
// reported on yet, or a Failed one, leaves the stored job as it is. The
// BulkJob's progress follows Redis by up to the controller's paced
// progress write (--progress-interval, 10 s, longer when more BulkJobs run
// than --progress-writes per second serve); its phase follows at once
// (seconds), and meanwhile the status may still say running while every
// row already reads answered.
func (e *Executor) ReadStatus(ctx context.Context, j *jobs.Job) (bool, error) {
	var bj v1alpha1.BulkJob
	err := e.Client.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: j.ID}, &bj)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return ApplyStatus(j, &bj), nil
}

// ApplyStatus overwrites j's progress with bj's status; false when the
// status says nothing usable. The outcome counts are the status's, by
// name, whatever the family.
func ApplyStatus(j *jobs.Job, bj *v1alpha1.BulkJob) bool {
	st := &bj.Status
	if bj.Spec.JobID != j.ID {
		return false
	}
	switch st.Phase {
	// Queued is running in the API's words (SPEC: running, in_progress for
	// verification): waiting for the processor budget is part of running.
	case v1alpha1.PhasePending, v1alpha1.PhaseQueued, v1alpha1.PhaseRunning:
		j.Status = jobs.StatusRunning
		j.CompletedAt = time.Time{}
		j.NextRetryAt = time.Time{}
	case v1alpha1.PhaseRetrying:
		j.Status = jobs.StatusRetrying
		j.CompletedAt = time.Time{}
		j.NextRetryAt = time.Time{}
		if st.NextRetryTime != nil {
			j.NextRetryAt = st.NextRetryTime.UTC()
		}
	case v1alpha1.PhaseCompleted:
		j.Status = jobs.StatusCompleted
		j.NextRetryAt = time.Time{}
		if j.CompletedAt.IsZero() && st.CompletionTime != nil {
			j.CompletedAt = st.CompletionTime.UTC()
		}
	default: // no status yet, or Failed: the stored job says more
		return false
	}
	j.RowsProcessed = st.ProcessedRows
	j.Outcomes = make(map[string]int64, len(st.Outcomes))
	for _, o := range st.Outcomes {
		j.Outcomes[o.Name] = o.Rows
	}
	j.Retrying = st.Retrying
	j.ShardsDone = int64(st.ShardsSucceeded + st.ShardsFailed)
	return true
}
