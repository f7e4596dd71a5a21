package admission

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/batchjob"
	"github.com/bulkd/bulkd/test/builders"
)

// The cost of one admission pass against the number of processor pods
// waiting for admission (issue 27: time and allocations at 100, 1,000 and
// 10,000 pending pods; goal: no faster than linear, <= 50 ms at 10,000).
//
// The world of each size: the budget (--max-running-shards 1,000) is full
// with 1,000 running pods, and N gated pods wait, 10 to a BulkJob, the
// BulkJobs spread over 500 accounts of three plans. Each iteration is the
// pass the controller runs most: one running pod has just ended, the pass
// releases its slot and admits the next pod fair share picks (one
// un-gating patch). The ended pod is then reborn as a new gated pod of
// its Job, so every iteration sees the same numbers.
//
// What is measured is the pass's own work, not the API's: the pass reads
// through benchCache, which answers List the way the manager's informer
// cache does with UnsafeDisableDeepCopy (a fresh Items slice of shallow
// copies of the stored objects) and applies the pass's patches to the
// stored objects at once, as the cache shows them a moment later. The
// whole loop against a real API server, with the real Job controller and
// KWOK's nodes, is hack/kube-bench (make bench-kube).

func BenchmarkAdmissionPass(b *testing.B) {
	for _, mode := range []string{"informer", "list"} {
		for _, pending := range []int{100, 1_000, 10_000} {
			b.Run(fmt.Sprintf("pods=%s/pending=%d", mode, pending), func(b *testing.B) {
				benchmarkAdmissionPass(b, pending, mode == "list")
			})
		}
	}
}

// benchmarkAdmissionPass: with list, the pass reads the pods with a List
// of the cache (its fallback, and what it did before podSet).
func benchmarkAdmissionPass(b *testing.B, pending int, list bool) {
	w := newAdmissionWorld(b, pending, 1_000)
	if list {
		w.a.podSet = nil
	}
	ctx := context.Background()
	if _, err := w.a.Reconcile(ctx, admissionRequest); err != nil { // leader's first pass: counts what runs
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	var cpu time.Duration
	for i := 0; i < b.N; i++ {
		ended := w.endOne()
		c0 := cpuTime()
		if _, err := w.a.Reconcile(ctx, admissionRequest); err != nil {
			b.Fatal(err)
		}
		cpu += cpuTime() - c0
		b.StopTimer()
		w.reborn(ended)
		b.StartTimer()
	}
	b.StopTimer()
	// CPU time of the process during the passes (GC included): on
	// a machine whose cores are shared, wall time per op says
	// more about the neighbours than about the pass.
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
	if got := w.countRunning(); got != 1_000 {
		b.Fatalf("running pods after the passes: %d, want the budget (1000)", got)
	}
	if w.patches < b.N {
		b.Fatalf("%d passes admitted %d pods", b.N, w.patches)
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// admissionWorld is the cluster an admission pass sees.
type admissionWorld struct {
	c       *benchCache
	a       *Admitter
	running []*corev1.Pod // in the order they are ended
	next    int
	seq     int
	patches int
}

func newAdmissionWorld(b *testing.B, pending, running int) *admissionWorld {
	b.Helper()
	const perJob, accounts = 10, 500
	cfg := Config{MaxRunningShards: int32(running), MaxRunningShardsPerAccount: 50,
		PlanWeights: map[string]int{"payg": 1, "starter": 2, "professional": 4}}
	plans := []string{"payg", "starter", "professional"}
	w := &admissionWorld{c: &benchCache{pods: map[types.UID]*corev1.Pod{}}}
	w.c.onPatch = func() { w.patches++ }
	t0 := time.Now().Add(-time.Hour)
	nJobs := (pending + running + perJob - 1) / perJob
	for j := 0; j < nJobs; j++ {
		name := fmt.Sprintf("%08x-0000-4000-8000-%012x", j, j)
		acct := fmt.Sprintf("acct_%03d", j%accounts)
		bj := builders.MakeBulkJob(name, ns).Rows(perJob*1000, perJob*1000).Shards(perJob, 1000).Parallelism(perJob).
			Created(t0.Add(time.Duration(j) * time.Millisecond)).Phase(v1alpha1.PhaseRunning).Obj()
		bj.UID = types.UID("uid-bj-" + name)
		bj.Labels = map[string]string{v1alpha1.LabelAccount: acct, v1alpha1.LabelPlan: plans[j%accounts%len(plans)]}
		job := shardJob(bj)
		job.UID = types.UID("uid-job-" + name)
		job.Spec.Suspend = ptr.To(false)
		job.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "BulkJob", Name: bj.Name,
			UID: bj.UID, Controller: ptr.To(true)}}
		w.c.bjs = append(w.c.bjs, bj)
		w.c.jobs = append(w.c.jobs, job)
		for i := 0; i < perJob; i++ {
			p := w.newPod(job, i)
			if len(w.running) < running {
				p.Spec.SchedulingGates = nil
				p.Status.Phase = corev1.PodRunning
				w.running = append(w.running, p)
			}
		}
	}
	w.a = New(w.c, cfg, time.Now)
	// The pod informer's mirror, as SetupWithManager registers it; its pods
	// are the world's.
	w.a.podSet = newPodSet()
	w.a.podSet.synced = func() bool { return true }
	for _, p := range w.c.pods {
		w.a.podSet.OnAdd(p, true)
	}
	return w
}

// newPod is the Job controller's pod for index i of job: gated, pending.
func (w *admissionWorld) newPod(job *batchv1.Job, i int) *corev1.Pod {
	w.seq++
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d-%d", job.Name, i, w.seq), Namespace: job.Namespace,
		UID:         types.UID(fmt.Sprintf("uid-pod-%d", w.seq)),
		Labels:      job.Spec.Template.Labels,
		Annotations: map[string]string{batchv1.JobCompletionIndexAnnotation: strconv.Itoa(i)},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID,
			Controller: ptr.To(true)}}},
		Spec:   *job.Spec.Template.Spec.DeepCopy(),
		Status: corev1.PodStatus{Phase: corev1.PodPending}}
	w.c.pods[p.UID] = p
	w.c.order = append(w.c.order, p.UID)
	return p
}

// endOne ends the oldest running pod (the kubelet reports it succeeded).
func (w *admissionWorld) endOne() *corev1.Pod {
	for {
		p := w.running[w.next%len(w.running)]
		w.next++
		if p.Status.Phase == corev1.PodRunning {
			p.Status.Phase = corev1.PodSucceeded
			return p
		}
	}
}

// reborn replaces an ended pod by a new gated one of the same Job (its
// index ran again, as far as the pass can tell), and takes the pod the
// pass admitted into the running rotation.
func (w *admissionWorld) reborn(ended *corev1.Pod) {
	delete(w.c.pods, ended.UID)
	if w.a.podSet != nil {
		w.a.podSet.OnDelete(ended)
	}
	for i, uid := range w.c.order {
		if uid == ended.UID {
			w.c.order = append(w.c.order[:i], w.c.order[i+1:]...)
			break
		}
	}
	w.seq++
	ended.UID = types.UID(fmt.Sprintf("uid-pod-%d", w.seq))
	ended.Name = fmt.Sprintf("%s-r%d", ended.Name, w.seq)
	ended.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: v1alpha1.AdmissionGate}}
	ended.Status.Phase = corev1.PodPending
	w.c.pods[ended.UID] = ended
	w.c.order = append(w.c.order, ended.UID)
	if w.a.podSet != nil {
		w.a.podSet.OnAdd(ended, false)
	}
	for i, p := range w.running {
		if p == ended {
			w.running[i] = w.c.admitted
		}
	}
}

func (w *admissionWorld) countRunning() int {
	n := 0
	for _, p := range w.c.pods {
		if !HasGate(p) && !batchjob.PodFinished(p) {
			n++
		}
	}
	return n
}

// benchCache is the manager's cache as the admission pass uses it: List
// of everything (the pass's own selector matches every object here), and
// patches that show at once. The pass calls nothing else.
type benchCache struct {
	client.Client // nil: any other call is a bug in the benchmark
	bjs           []*v1alpha1.BulkJob
	jobs          []*batchv1.Job
	pods          map[types.UID]*corev1.Pod
	order         []types.UID
	admitted      *corev1.Pod // the last pod un-gated
	onPatch       func()
}

func (c *benchCache) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	switch l := list.(type) {
	case *v1alpha1.BulkJobList:
		l.Items = make([]v1alpha1.BulkJob, 0, len(c.bjs))
		for _, o := range c.bjs {
			l.Items = append(l.Items, *o)
		}
	case *batchv1.JobList:
		l.Items = make([]batchv1.Job, 0, len(c.jobs))
		for _, o := range c.jobs {
			l.Items = append(l.Items, *o)
		}
	case *corev1.PodList:
		l.Items = make([]corev1.Pod, 0, len(c.order))
		for _, uid := range c.order {
			l.Items = append(l.Items, *c.pods[uid])
		}
	default:
		return fmt.Errorf("benchCache: list of %T", list)
	}
	return nil
}

func (c *benchCache) Patch(_ context.Context, obj client.Object, _ client.Patch, _ ...client.PatchOption) error {
	switch o := obj.(type) {
	case *corev1.Pod:
		p := c.pods[o.UID]
		if p == nil {
			return fmt.Errorf("benchCache: no pod %s", o.Name)
		}
		p.Spec.SchedulingGates = nil
		p.Status.Phase = corev1.PodRunning
		c.admitted = p
	case *batchv1.Job:
		for _, j := range c.jobs {
			if j.UID == o.UID {
				j.Spec.Suspend = ptr.To(false)
			}
		}
	default:
		return fmt.Errorf("benchCache: patch of %T", obj)
	}
	c.onPatch()
	return nil
}
