package kube

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/test/builders"
)

const id = "0c6d7e7e-1111-4222-8333-944445555666"

func accepted() *jobs.Job {
	return &jobs.Job{ID: id, Family: "company_enrichment", AccountID: "acct_0123456789abcdef", KeyID: "key123", Status: jobs.StatusRunning,
		TotalRows: 25, TotalInvalid: 5, Distinct: 20, RowsProcessed: 5, Shards: 2, ShardSize: 10,
		Outcomes: map[string]int64{}, CreatedAt: time.Now()}
}

func TestEnqueueCreatesTheBulkJob(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(v1alpha1.NewScheme()).Build()
	ex := &Executor{Client: c, Namespace: "bulkd", Parallelism: 8}
	ctx := context.Background()
	if err := ex.Enqueue(ctx, accepted()); err != nil {
		t.Fatal(err)
	}
	var bj v1alpha1.BulkJob
	if err := c.Get(ctx, client.ObjectKey{Namespace: "bulkd", Name: id}, &bj); err != nil {
		t.Fatal(err)
	}
	want := v1alpha1.BulkJobSpec{Family: v1alpha1.FamilyCompanyEnrichment, Metering: v1alpha1.MeteringCredits, OwnerKeyID: "key123",
		JobID: id, Rows: 25, DistinctInputs: 20, Shards: 2, ShardSize: 10, Parallelism: 2}
	if bj.Spec != want || bj.Labels[v1alpha1.LabelFamily] != "company_enrichment" || bj.Labels[v1alpha1.LabelAccount] != "acct_0123456789abcdef" ||
		!slices.Equal(bj.Finalizers, []string{v1alpha1.Finalizer}) {
		t.Fatalf("BulkJob %+v", bj)
	}
	// Enqueueing the same job again is not an error.
	if err := ex.Enqueue(ctx, accepted()); err != nil {
		t.Fatalf("second enqueue: %v", err)
	}
	quota := accepted()
	quota.ID, quota.QuotaWindow = "1c6d7e7e-1111-4222-8333-944445555666", "bulk_searches:20260309"
	if err := ex.Enqueue(ctx, quota); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "bulkd", Name: quota.ID}, &bj); err != nil || bj.Spec.Metering != v1alpha1.MeteringUnlimitedQuota {
		t.Fatalf("quota job metering %q (%v)", bj.Spec.Metering, err)
	}

	if err := ex.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	// Deleted: it waits only for its finalizer (the controller deletes the
	// job's data, then lets it go).
	if err := c.Get(ctx, client.ObjectKey{Namespace: "bulkd", Name: id}, &bj); err != nil || bj.DeletionTimestamp.IsZero() {
		t.Fatalf("BulkJob not being deleted: %v %v", err, bj.DeletionTimestamp)
	}
	if err := ex.Cancel(ctx, id); err != nil {
		t.Fatalf("cancel of a job with no BulkJob: %v", err)
	}
}

// After a refusal that proves nothing was created, the rollback's Cancel
// makes no call (it could fail the same way and leave the rollback
// incomplete); after one that proves nothing (a timeout), it deletes.
func TestCancelAfterARefusedCreate(t *testing.T) {
	gr := schema.GroupResource{Group: "bulkd.io", Resource: "bulkjobs"}
	for _, c := range []struct {
		name        string
		createErr   error
		wantsDelete bool
	}{
		{"forbidden", apierrors.NewForbidden(gr, id, errors.New("rbac")), false},
		{"namespace missing", apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "x"), false},
		{"timeout", apierrors.NewTimeoutError("slow", 1), true},
		{"connection lost", fmt.Errorf("connection reset"), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			deletes := 0
			cl := fake.NewClientBuilder().WithScheme(v1alpha1.NewScheme()).WithInterceptorFuncs(interceptor.Funcs{
				Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
					return c.createErr
				},
				Delete: func(context.Context, client.WithWatch, client.Object, ...client.DeleteOption) error {
					deletes++
					return apierrors.NewForbidden(gr, id, errors.New("rbac"))
				},
			}).Build()
			ex := &Executor{Client: cl, Namespace: "bulkd", Parallelism: 4}
			if err := ex.Enqueue(context.Background(), accepted()); err == nil {
				t.Fatal("enqueue succeeded")
			}
			err := ex.Cancel(context.Background(), id)
			if c.wantsDelete != (deletes == 1) || c.wantsDelete != (err != nil) {
				t.Fatalf("deletes %d, cancel error %v", deletes, err)
			}
		})
	}
}

func TestReadStatusComesFromTheBulkJob(t *testing.T) {
	done := time.Date(2026, 3, 9, 12, 0, 0, 0, time.UTC)
	due := done.Add(-time.Hour)
	for _, c := range []struct {
		name      string
		bj        *v1alpha1.BulkJob // nil: none
		ok        bool
		status    string
		processed int64
		outcomes  map[string]int64
		retrying  int64
		nextRetry time.Time
		completed bool
	}{
		{"no BulkJob (yet, or a job complete on arrival)", nil, false, jobs.StatusRunning, 5, map[string]int64{}, 0, time.Time{}, false},
		{"no status yet", builders.MakeBulkJob(id, "bulkd").Obj(), false, jobs.StatusRunning, 5, map[string]int64{}, 0, time.Time{}, false},
		{"running", builders.MakeBulkJob(id, "bulkd").Phase(v1alpha1.PhaseRunning).Progress(15).Outcome("found", 8).Outcome("not_found", 2).Obj(),
			true, jobs.StatusRunning, 15, map[string]int64{"found": 8, "not_found": 2}, 0, time.Time{}, false},
		// Waiting for the processor budget is running in the SPEC's words.
		{"queued", builders.MakeBulkJob(id, "bulkd").Phase(v1alpha1.PhaseQueued).Progress(5).Obj(),
			true, jobs.StatusRunning, 5, map[string]int64{}, 0, time.Time{}, false},
		{"completed", func() *v1alpha1.BulkJob {
			bj := builders.MakeBulkJob(id, "bulkd").Phase(v1alpha1.PhaseCompleted).Progress(25).Outcome("not_found", 8).Outcome("found", 12).Obj()
			bj.Status.CompletionTime = &metav1.Time{Time: done}
			return bj
		}(), true, jobs.StatusCompleted, 25, map[string]int64{"found": 12, "not_found": 8}, 0, time.Time{}, true},
		{"retrying: another family's outcomes, provisional answers waiting", func() *v1alpha1.BulkJob {
			bj := builders.MakeBulkJob(id, "bulkd").Family(v1alpha1.FamilyEmailVerification).Phase(v1alpha1.PhaseRetrying).Progress(25).
				Outcome("valid", 15).Outcome("unknown", 5).Retrying(4, 2).Obj()
			bj.Status.NextRetryTime = &metav1.Time{Time: due}
			return bj
		}(), true, jobs.StatusRetrying, 25, map[string]int64{"valid": 15, "unknown": 5}, 4, due, false},
		{"failed: the stored job says more", builders.MakeBulkJob(id, "bulkd").Phase(v1alpha1.PhaseFailed).Obj(), false, jobs.StatusRunning, 5, map[string]int64{}, 0, time.Time{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithScheme(v1alpha1.NewScheme())
			if c.bj != nil {
				b = b.WithObjects(c.bj)
			}
			ex := &Executor{Client: b.Build(), Namespace: "bulkd"}
			j := accepted()
			ok, err := ex.ReadStatus(context.Background(), j)
			if err != nil || ok != c.ok {
				t.Fatalf("ok %v err %v", ok, err)
			}
			if j.Status != c.status || j.RowsProcessed != c.processed || !maps.Equal(j.Outcomes, c.outcomes) || j.Retrying != c.retrying ||
				!j.NextRetryAt.Equal(c.nextRetry) || j.CompletedAt.IsZero() == c.completed {
				t.Fatalf("job %+v", j)
			}
		})
	}
}

// A create answered "already exists" is ours when the API server (not a
// cache that may lag) shows our BulkJob; when it cannot tell, the rollback
// deletes; another object of that name is neither ours nor to be deleted.
func TestEnqueueAlreadyExists(t *testing.T) {
	gr := schema.GroupResource{Group: "bulkd.io", Resource: "bulkjobs"}
	ours := builders.MakeBulkJob(id, "bulkd").Obj()
	theirs := builders.MakeBulkJob(id, "bulkd").Obj()
	theirs.Spec.JobID = "someone-else"
	for _, c := range []struct {
		name        string
		live        *v1alpha1.BulkJob // what the API server has; nil: the read fails
		wantErr     bool
		wantsDelete bool
	}{
		{"ours, not in the cache yet", ours, false, false},
		{"cannot tell", nil, true, true},
		{"another object", theirs, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			deletes := 0
			cached := fake.NewClientBuilder().WithScheme(v1alpha1.NewScheme()).WithInterceptorFuncs(interceptor.Funcs{
				Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
					return apierrors.NewAlreadyExists(gr, id)
				},
				Delete: func(context.Context, client.WithWatch, client.Object, ...client.DeleteOption) error {
					deletes++
					return nil
				},
			}).Build() // its cache has nothing
			lb := fake.NewClientBuilder().WithScheme(v1alpha1.NewScheme())
			if c.live != nil {
				lb = lb.WithObjects(c.live)
			} else {
				lb = lb.WithInterceptorFuncs(interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
					return apierrors.NewTimeoutError("slow", 1)
				}})
			}
			ex := &Executor{Client: cached, APIReader: lb.Build(), Namespace: "bulkd", Parallelism: 4}
			err := ex.Enqueue(context.Background(), accepted())
			if (err != nil) != c.wantErr {
				t.Fatalf("enqueue: %v", err)
			}
			if err != nil {
				if cerr := ex.Cancel(context.Background(), id); cerr != nil {
					t.Fatal(cerr)
				}
			}
			if c.wantsDelete != (deletes == 1) {
				t.Fatalf("%d deletes", deletes)
			}
		})
	}
}
