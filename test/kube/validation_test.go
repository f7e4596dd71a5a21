package kube_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/test/builders"
)

func envtestUser(name string) envtest.User { return envtest.User{Name: name} }

// fakeJob is an accepted job as the engine hands it to an executor.
func fakeJob() *jobs.Job {
	return &jobs.Job{ID: uuid.NewString(), Family: "company_enrichment", KeyID: "key123", Status: jobs.StatusRunning,
		TotalRows: 3, Distinct: 3, Shards: 1, ShardSize: shardSize, CreatedAt: time.Now()}
}

// The CRD's schema and CEL rules keep a BulkJob's invariants: this
// namespace is not watched by the controller, so only the API server acts.
func TestBulkJobValidation(t *testing.T) {
	ctx := context.Background()
	const ns = "validation"
	if err := h.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	valid := func() *builders.BulkJobWrapper {
		id := uuid.NewString()
		w := builders.MakeBulkJob(id, ns)
		w.UID, w.Generation, w.CreationTimestamp = "", 0, metav1.Time{}
		return w
	}
	for _, c := range []struct {
		name string
		bj   *v1alpha1.BulkJob
		want string // "" = accepted
	}{
		{"valid", valid().Obj(), ""},
		{"one shard", valid().Rows(3, 3).Shards(1, 1000).Obj(), ""},
		{"unlimited quota", valid().Metering(v1alpha1.MeteringUnlimitedQuota).Obj(), ""},
		{"shards do not cover the inputs", valid().Shards(1, 10).Obj(), "shards must equal ceil(distinctInputs / shardSize)"},
		{"too many shards", valid().Shards(3, 10).Obj(), "shards must equal ceil(distinctInputs / shardSize)"},
		{"no shards", valid().Shards(0, 10).Obj(), "spec.shards"},
		{"empty shards", valid().Shards(2, 0).Obj(), "spec.shardSize"},
		{"more distinct inputs than rows", valid().Rows(10, 20).Obj(), "distinctInputs cannot exceed rows"},
		{"no parallelism", valid().Parallelism(0).Obj(), "spec.parallelism"},
		// The CRD checks the form of a family name, not the names: adding
		// a family needs no CRD upgrade (the controller checks the name).
		{"family the CRD does not list", valid().Family("people_search").Obj(), ""},
		{"not a family name", valid().Family("People-Search").Obj(), "spec.family"},
		{"unknown metering", valid().Metering("free").Obj(), "spec.metering"},
		{"name is not the job id", valid().JobID(uuid.NewString()).Obj(), "metadata.name must equal spec.jobID"},
		{"job id is not a uuid", func() *v1alpha1.BulkJob {
			bj := valid().JobID("job_sample").Obj()
			bj.Name = "job-sample"
			return bj
		}(), "spec.jobID"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := h.k8s.Create(ctx, c.bj)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case c.want != "" && err == nil:
				t.Fatal("accepted")
			case c.want != "" && !strings.Contains(err.Error(), c.want):
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}

	t.Run("spec is immutable, status is not", func(t *testing.T) {
		bj := valid().Obj()
		if err := h.k8s.Create(ctx, bj); err != nil {
			t.Fatal(err)
		}
		changed := bj.DeepCopy()
		changed.Spec.Parallelism = 1
		if err := h.k8s.Update(ctx, changed); err == nil || !strings.Contains(err.Error(), "spec is immutable") {
			t.Fatalf("spec update: %v", err)
		}
		bj.Status.Phase = v1alpha1.PhaseRunning
		bj.Status.ProcessedRows = 7
		if err := h.k8s.Status().Update(ctx, bj); err != nil {
			t.Fatalf("status update: %v", err)
		}
		bj.Status.Phase = "Exploded"
		if err := h.k8s.Status().Update(ctx, bj); err == nil {
			t.Fatal("unknown phase accepted")
		}
	})
}
