package controllers

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/test/builders"
)

// writeLog counts the writes a reconciler sends, by kind.
type writeLog struct {
	mu     sync.Mutex
	counts map[string]int
	// conflicts makes the next n status writes fail with a conflict.
	conflicts int
}

func (w *writeLog) add(kind string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.counts[kind]++
}

func (w *writeLog) get(kind string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.counts[kind]
}

// countWrites routes the scenario's reconciler through a client that
// counts its writes.
func (s *scenario) countWrites() *writeLog {
	w := &writeLog{counts: map[string]int{}}
	s.r.Client = interceptor.NewClient(s.c, interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			w.add("update")
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			w.add("patch")
			return c.Patch(ctx, obj, p, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			w.add("status update")
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			w.mu.Lock()
			conflict := w.conflicts > 0
			if conflict {
				w.conflicts--
			}
			w.mu.Unlock()
			if conflict {
				return apierrors.NewConflict(v1alpha1.GroupVersion.WithResource("bulkjobs").GroupResource(), obj.GetName(), nil)
			}
			w.add("status patch")
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	})
	return w
}

// Rows answered one after another within the pacing interval cost no
// status write; the latest progress is written when the interval is over;
// a phase change is written at once, whatever the interval. Before the
// pacing every pass that saw new rows wrote (ten writes here, not one).
func TestProgressWritesArePacedPhaseChangesAreNot(t *testing.T) {
	data := newFakeData(builders.MakeJobData(id).Obj())
	s := newScenario(t, data, builders.MakeBulkJob(id, ns).Finalizer().Obj())
	s.withOptions(func(o *Options) { o.ProgressInterval = 10 * time.Second })
	w := s.countWrites()

	s.mustReconcile() // creates the Job, writes Pending: a phase change
	if n := w.get("status patch"); n != 1 {
		t.Fatalf("%d status writes for the first pass, want 1", n)
	}
	start := s.now
	for i := range 10 {
		s.now = start.Add(time.Duration(i+1) * 500 * time.Millisecond)
		data.setData(id, func(j *jobs.Job) { j.RowsProcessed++ })
		res := s.mustReconcile()
		// The pass asks to come back when the interval is over, to write
		// what it held back.
		if want := start.Add(10 * time.Second).Sub(s.now); res.RequeueAfter != want {
			t.Fatalf("progress change %d: requeue after %v, want %v (when the interval is over)", i, res.RequeueAfter, want)
		}
	}
	if n := w.get("status patch"); n != 1 {
		t.Fatalf("10 progress changes within the interval made %d status writes, want none", n-1)
	}
	if got := s.bulkJob().Status.ProcessedRows; got != 5 {
		t.Fatalf("processed rows %d: held back progress was written", got)
	}

	s.now = start.Add(10 * time.Second)
	s.mustReconcile()
	if n := w.get("status patch"); n != 2 {
		t.Fatalf("%d status writes, want the held back progress written once the interval is over", n)
	}
	if got := s.bulkJob().Status.ProcessedRows; got != 15 {
		t.Fatalf("processed rows %d, want the latest (15)", got)
	}

	// A shard starts (the Job reports a pod) a second later: Running is
	// written at once, within the interval.
	s.now = s.now.Add(time.Second)
	s.reportJob(id, builders.MakeJob(id, ns, 2).Started(s.now).Active(1).Obj())
	data.setData(id, func(j *jobs.Job) { j.RowsProcessed++ })
	s.mustReconcile()
	if st := s.bulkJob().Status; w.get("status patch") != 3 || st.Phase != v1alpha1.PhaseRunning || st.ProcessedRows != 16 {
		t.Fatalf("%d status writes, status %+v: the phase change waited", w.get("status patch"), st)
	}
	if ev := s.events(); !strings.Contains(ev, "Running") {
		t.Fatalf("events %q", ev)
	}

	// The last shards end a moment later: Completed at once.
	s.now = s.now.Add(100 * time.Millisecond)
	data.markDone(id, 0, jobs.OutcomeFound, 10, 10)
	data.markDone(id, 1, jobs.OutcomeFound, 10, 10)
	s.reportJob(id, builders.MakeJob(id, ns, 2).Started(s.now).CompletedIndexes("0-1", 2).
		Condition(batchv1.JobSuccessCriteriaMet, batchv1.JobReasonCompletionsReached).Condition(batchv1.JobComplete, batchv1.JobReasonCompletionsReached).Obj())
	s.mustReconcile()
	if st := s.bulkJob().Status; w.get("status patch") != 4 || st.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("%d status writes, status %+v: completion waited", w.get("status patch"), st)
	}
	// Status and the BulkJob are patched, never updated whole.
	if n := w.get("status update") + w.get("update"); n != 0 {
		t.Fatalf("%d full updates", n)
	}
}

// A status write that meets a newer BulkJob (the cache was behind) runs
// the pass again a moment later, without the deprecated Requeue.
func TestStatusConflictRequeuesAfter(t *testing.T) {
	s := newScenario(t, newFakeData(builders.MakeJobData(id).Obj()), builders.MakeBulkJob(id, ns).Finalizer().Obj())
	w := s.countWrites()
	w.conflicts = 1
	res := s.mustReconcile()
	//nolint:staticcheck // checking that the deprecated field stays unset
	if res.Requeue || res.RequeueAfter != conflictRetry {
		t.Fatalf("result %+v, want RequeueAfter %v", res, conflictRetry)
	}
	s.mustReconcile()
	if st := s.bulkJob().Status; st.Phase != v1alpha1.PhasePending || w.get("status patch") != 1 {
		t.Fatalf("status %+v after the retry", st)
	}
}

// A BulkJob made without the finalizer gets it by a patch that carries
// the resourceVersion (it must not overwrite a change made meanwhile).
func TestFinalizerIsPatched(t *testing.T) {
	s := newScenario(t, newFakeData(builders.MakeJobData(id).Obj()), builders.MakeBulkJob(id, ns).Obj())
	w := s.countWrites()
	s.mustReconcile()
	if bj := s.bulkJob(); len(bj.Finalizers) != 1 || w.get("patch") != 1 || w.get("update") != 0 {
		t.Fatalf("finalizers %v, writes %v", bj.Finalizers, w.counts)
	}
}

// Over many jobs, progress writes share one budget per second, and a job
// that finds it spent is given the next free slot: jobs are served in
// turn, none waits past its slot.
func TestProgressWritesShareABudget(t *testing.T) {
	w := newStatusWrites(0, 5) // no per-job interval: the budget alone
	now := time.Unix(1_700_000_000, 0)
	old := v1alpha1.BulkJobStatus{Phase: v1alpha1.PhaseRunning, ProcessedRows: 1}
	moved := v1alpha1.BulkJobStatus{Phase: v1alpha1.PhaseRunning, ProcessedRows: 2}
	waits := map[types.NamespacedName]time.Duration{}
	written := 0
	for i := range 20 {
		key := types.NamespacedName{Namespace: ns, Name: string(rune('a' + i))}
		write, wait := w.decide(key, &old, &moved, now)
		if write {
			written++
			w.wrote(key, now)
			continue
		}
		waits[key] = wait
	}
	// The burst (one second's worth) at once, then one slot every 200 ms.
	if written != 5 || len(waits) != 15 {
		t.Fatalf("%d written at once, %d waiting", written, len(waits))
	}
	seen := map[time.Duration]bool{}
	for key, d := range waits {
		if d <= 0 || d > 3*time.Second || seen[d] {
			t.Fatalf("job %s waits %v (slots: %v)", key.Name, d, waits)
		}
		seen[d] = true
		// Before its slot it still waits; at its slot it writes.
		if write, _ := w.decide(key, &old, &moved, now.Add(d-time.Millisecond)); write {
			t.Fatalf("job %s wrote before its slot", key.Name)
		}
		if write, _ := w.decide(key, &old, &moved, now.Add(d)); !write {
			t.Fatalf("job %s did not write at its slot", key.Name)
		}
	}
	// A phase change is not paced, however spent the budget.
	done := v1alpha1.BulkJobStatus{Phase: v1alpha1.PhaseCompleted, ProcessedRows: 2}
	if write, _ := w.decide(types.NamespacedName{Namespace: ns, Name: "late"}, &old, &done, now); !write {
		t.Fatal("a phase change waited for the progress budget")
	}
	// Nothing changed: nothing to write, nothing to wait for.
	if write, wait := w.decide(types.NamespacedName{Namespace: ns, Name: "idle"}, &old, &old, now); write || wait != 0 {
		t.Fatalf("an unchanged status: write %v, wait %v", write, wait)
	}
}
