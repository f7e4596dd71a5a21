package controllers

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/fairshare"
	"github.com/bulkd/bulkd/internal/jobs"
)

// Admission (Options.admits): the controller decides which processor pods
// may run, so that the processor budget (MaxRunningShards) is shared
// across accounts in turn and no account holds more than its share
// (MaxRunningShardsPerAccount).
//
// Why scheduling gates, not only suspend or parallelism: a Job's pods are
// replaced by the Job controller the moment one ends, so neither
// un-suspending a Job nor raising its parallelism can hand the pod slot a
// shard of one account frees to another account; lowering parallelism or
// suspending deletes running pods, and the Job controller counts those
// against the index's backoffLimitPerIndex (a shard preempted often
// enough would be answered as errors). So a Job is created suspended (a
// queued BulkJob has no pod at all) and its pod template carries the
// admission scheduling gate: once un-suspended, the Job controller creates
// its pods as usual, up to its parallelism, and the scheduler leaves them
// alone until the controller removes the gate from the one it admits. A
// pod slot is released when the pod ends, and the next admitted pod may be
// any account's: shard by shard, without stopping anything.
//
// The pass is one reconciler with one worker and one key, woken by every
// change of a BulkJob, a Job or a processor pod: passes never overlap, so
// the budget is counted by one writer. It reads from the manager's cache
// and remembers what it admitted (slots) until the cache shows the pod
// gone or finished, so a cache that is behind never admits twice. Only the
// leader runs it (the manager's leader election). After a restart the
// pods found running are taken as admitted.
//
// The choice is internal/fairshare's: weighted deficit round robin on rows
// across accounts (an account's weight is its plan's, PlanWeights), FIFO
// within one (the BulkJob's creation, then the shard), and an account that
// had nothing running or queued goes first. Its tasks here are a
// suspended Job (admitting it un-suspends it and reserves a slot for its
// first pod) and a gated pod (admitting it removes the gate). Retry Jobs
// take part like shard Jobs, as their BulkJob's account.

// admissionRequest is the admission pass's one key.
var admissionRequest = ctrl.Request{NamespacedName: types.NamespacedName{Name: "bulkd-admission"}}

const (
	// startGrace is how long a slot reserved for a Job's next pod waits
	// for the pod before it is released.
	startGrace = time.Minute
	// admissionResync is the pass's safety net: every change wakes it.
	admissionResync = 30 * time.Second
)

// admitter runs the admission passes.
type admitter struct {
	client client.Client
	opts   Options
	now    func() time.Time
	// events wakes the BulkJob reconciler for a BulkJob whose place in
	// line changed or that was admitted.
	events chan event.GenericEvent

	// The pass's own state: passes run one at a time.
	sched   *fairshare.Scheduler[string]
	slots   map[string]*slot // running tasks by key: admitted pods and reservations
	weights map[string]int   // account -> weight, read by the scheduler
	// more holds the keys of the tasks queued for the pods a Job is about
	// to get (its room), moreSeq numbers them.
	more    map[types.UID][]string
	moreSeq uint64

	// podSet, when set, is where the pass reads the processor pods;
	// without it (or before it synced), a List of the cache.
	podSet *podSet

	mu        sync.Mutex
	positions map[types.NamespacedName]int32
}

// slot is an admitted task: a pod whose gate was removed, or a
// reservation for a pod its Job is about to get (a Job just un-suspended,
// or one whose pod just ended), which takes that pod when it comes.
type slot struct {
	account string
	job     types.UID
	pod     types.UID // "" while a reservation waits for its pod
	until   time.Time // a reservation lapses then
	// over: found running beyond the budget (it was lowered, or pods ran
	// before budgets were set); counted, not scheduled.
	over bool
}

func newAdmitter(c client.Client, o Options, now func() time.Time) *admitter {
	return &admitter{client: c, opts: o, now: now, events: make(chan event.GenericEvent, 1024),
		slots: map[string]*slot{}, weights: map[string]int{}, more: map[types.UID][]string{}, positions: map[types.NamespacedName]int32{}}
}

func (a *admitter) config() fairshare.Config {
	workers, per := int(a.opts.MaxRunningShards), int(a.opts.MaxRunningShardsPerAccount)
	if workers <= 0 {
		workers = math.MaxInt32
	}
	return fairshare.Config{Workers: workers, PerAccount: per, Weight: func(acct string) int { return max(a.weights[acct], 1) }}
}

// position is a Queued BulkJob's place in line (0: not known to be queued).
func (a *admitter) position(key types.NamespacedName) int32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.positions[key]
}

// Keys of the tasks.
func startKey(job types.UID) string { return "start/" + string(job) }
func podKey(pod types.UID) string   { return "pod/" + string(pod) }

// admissionView is what a pass sees in the cache.
type admissionView struct {
	jobs map[types.UID]*jobView
	pods map[types.UID]*corev1.Pod
	// running: processor pods not gated and not finished, by uid.
	running map[types.UID]*corev1.Pod
}

// jobView is a Job that may run shards, with its BulkJob.
type jobView struct {
	job     *batchv1.Job
	bj      *v1alpha1.BulkJob
	account string
	order   int64
	cost    int64
	retry   bool
	gated   []*corev1.Pod // its pods waiting for admission, lowest index first
	// pending is how many of its shards have not ended (by its status and
	// its pods); occupied how many of them have a pod, or will have one
	// without a new slot (a failed pod's index, which the Job controller
	// replaces after its backoff). The Job controller will make
	// min(pending, parallelism) - occupied more pods as it is allowed.
	pending, occupied int32
	// room is how many more slots it can take now: what the Job controller
	// will make, less the slots reserved for it.
	room int32
}

func hasGate(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == v1alpha1.AdmissionGate })
}

func podFinished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

func podIndex(p *corev1.Pod) int {
	i, err := strconv.Atoi(p.Annotations[batchv1.JobCompletionIndexAnnotation])
	if err != nil || i < 0 {
		return 0
	}
	return i
}

// accountOf is a BulkJob's account: its label (the API sets it; the
// controller fills it from the job's data), or "" (one shared turn for
// BulkJobs of no known account).
func accountOf(bj *v1alpha1.BulkJob) string { return bj.Labels[v1alpha1.LabelAccount] }

// read builds the view from the cache.
func (a *admitter) read(ctx context.Context) (*admissionView, error) {
	// Read-only: the cache's objects themselves, not copies (a pass reads
	// every BulkJob, Job and processor pod; whatever it patches it copies
	// first).
	noCopy := client.UnsafeDisableDeepCopy
	var bjs v1alpha1.BulkJobList
	if err := a.client.List(ctx, &bjs, noCopy); err != nil {
		return nil, fmt.Errorf("list BulkJobs: %w", err)
	}
	byName := make(map[types.NamespacedName]*v1alpha1.BulkJob, len(bjs.Items))
	for i := range bjs.Items {
		bj := &bjs.Items[i]
		byName[types.NamespacedName{Namespace: bj.Namespace, Name: bj.Name}] = bj
	}
	managed := client.MatchingLabels{v1alpha1.LabelManagedBy: v1alpha1.ManagedByController}
	var jl batchv1.JobList
	if err := a.client.List(ctx, &jl, managed, noCopy); err != nil {
		return nil, fmt.Errorf("list Jobs: %w", err)
	}
	pods, err := a.processorPods(ctx)
	if err != nil {
		return nil, err
	}
	// Sized up front: a pass at 10,000 pods otherwise spends a tenth of
	// its time growing these maps (BenchmarkAdmissionPass).
	v := &admissionView{jobs: make(map[types.UID]*jobView, len(jl.Items)), pods: make(map[types.UID]*corev1.Pod, len(pods)),
		running: map[types.UID]*corev1.Pod{}}
	for i := range jl.Items {
		job := &jl.Items[i]
		ref := metav1.GetControllerOfNoCopy(job)
		if ref == nil || ref.Kind != "BulkJob" || !job.DeletionTimestamp.IsZero() || jobFinished(job) {
			continue
		}
		if _, kueue := job.Labels[v1alpha1.KueueQueueLabel]; kueue && ptrTrue(job.Spec.Suspend) {
			// Still waiting for Kueue: its BulkJob's reconcile hands it over
			// (switchAdmission); starting it now would start every pod ungated.
			continue
		}
		bj := byName[types.NamespacedName{Namespace: job.Namespace, Name: ref.Name}]
		if bj == nil || bj.UID != ref.UID || !bj.DeletionTimestamp.IsZero() || bj.Status.Phase.IsFinished() {
			continue
		}
		jv := &jobView{job: job, bj: bj, account: accountOf(bj), order: bj.CreationTimestamp.UnixNano(),
			cost: int64(min(int64(bj.Spec.ShardSize), bj.Spec.DistinctInputs))}
		if _, ok := job.Labels[v1alpha1.LabelRetryRound]; ok {
			jv.retry, jv.cost = true, max(bj.Status.Retrying, 1)
		}
		v.jobs[job.UID] = jv
		if w := a.opts.PlanWeights[cmp.Or(job.Labels[v1alpha1.LabelPlan], "payg")]; w > a.weights[jv.account] {
			// An account weighs what its best plan among its jobs does.
			a.weights[jv.account] = w
		}
	}
	byJob := make(map[types.UID][]*corev1.Pod, len(v.jobs))
	for _, p := range pods {
		v.pods[p.UID] = p
		ref := metav1.GetControllerOfNoCopy(p)
		var jv *jobView
		if ref != nil {
			if jv = v.jobs[ref.UID]; jv != nil {
				byJob[ref.UID] = append(byJob[ref.UID], p)
			}
		}
		if podFinished(p) {
			continue
		}
		if !hasGate(p) {
			v.running[p.UID] = p
			continue
		}
		if ref == nil || !p.DeletionTimestamp.IsZero() {
			continue
		}
		if jv != nil && !ptrTrue(jv.job.Spec.Suspend) {
			jv.gated = append(jv.gated, p)
		}
	}
	for uid, jv := range v.jobs {
		sortByIndex(jv.gated)
		jv.pending, jv.occupied = occupancy(jv.job, byJob[uid])
	}
	return v, nil
}

// processorPods are the processor pods in the cache: from podSet, the
// cache's own objects, not copies (the pass only reads them; what it
// patches it copies first), once podSet has seen the informer's first
// list; else a List. A List, even without deep copies, copies every pod
// struct into the list: at 10,000 pods that was most of a pass's
// allocations and a third of its time (BenchmarkAdmissionPass).
func (a *admitter) processorPods(ctx context.Context) ([]*corev1.Pod, error) {
	if a.podSet != nil {
		if pods, ok := a.podSet.list(); ok {
			return pods, nil
		}
	}
	var pl corev1.PodList
	if err := a.client.List(ctx, &pl, client.MatchingLabels{v1alpha1.LabelManagedBy: v1alpha1.ManagedByController}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	out := make([]*corev1.Pod, len(pl.Items))
	for i := range pl.Items {
		out[i] = &pl.Items[i]
	}
	return out, nil
}

// podSet mirrors the manager's pod informer (the processor pods: the
// cache watches only those, manager.go) by uid, with the informer's own
// objects, which the informer replaces on update and never changes.
type podSet struct {
	mu     sync.Mutex
	pods   map[types.UID]*corev1.Pod
	synced func() bool // the handler has seen the informer's first list
}

func newPodSet() *podSet { return &podSet{pods: map[types.UID]*corev1.Pod{}} }

func (s *podSet) OnAdd(obj any, _ bool) {
	if p, ok := obj.(*corev1.Pod); ok && p.Labels[v1alpha1.LabelManagedBy] == v1alpha1.ManagedByController {
		s.mu.Lock()
		s.pods[p.UID] = p
		s.mu.Unlock()
	}
}

func (s *podSet) OnUpdate(_, obj any) { s.OnAdd(obj, false) }

func (s *podSet) OnDelete(obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if p, ok := obj.(*corev1.Pod); ok {
		s.mu.Lock()
		delete(s.pods, p.UID)
		s.mu.Unlock()
	}
}

// list is the pods, or false before the first list was seen (a pass
// then must not count from a partial set: it would admit too many).
func (s *podSet) list() ([]*corev1.Pod, bool) {
	if s.synced == nil || !s.synced() {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(s.pods))
	for _, p := range s.pods {
		out = append(out, p)
	}
	return out, true
}

// sortByIndex orders a Job's pods by completion index, each pod's index
// parsed once.
func sortByIndex(ps []*corev1.Pod) {
	if len(ps) < 2 {
		return
	}
	type indexed struct {
		i int
		p *corev1.Pod
	}
	tmp := make([]indexed, len(ps))
	for k, p := range ps {
		tmp[k] = indexed{podIndex(p), p}
	}
	slices.SortStableFunc(tmp, func(x, y indexed) int { return x.i - y.i })
	for k := range tmp {
		ps[k] = tmp[k].p
	}
}

// occupancy counts a Job's shards not ended and those of them that hold
// or will get a pod without a new slot, from its status and its pods.
func occupancy(job *batchv1.Job, pods []*corev1.Pod) (pending, occupied int32) {
	n := ptr32(job.Spec.Completions)
	if !isIndexed(job) {
		// A retry Job: one completion.
		for _, p := range pods {
			if p.Status.Phase == corev1.PodSucceeded {
				return 0, 0
			}
			if !podFinished(p) {
				occupied = 1
			}
		}
		if job.Status.Succeeded > 0 {
			return 0, 0
		}
		return 1, occupied
	}
	done, _ := parseIndexes(job.Status.CompletedIndexes, n)
	if job.Status.FailedIndexes != nil {
		failed, _ := parseIndexes(*job.Status.FailedIndexes, n)
		for i := range failed {
			done[i] = true
		}
	}
	// held: indexes with a pod not finished, or whose latest pod failed.
	held := map[int32]bool{}
	for _, p := range pods {
		i := int32(podIndex(p))
		if p.Status.Phase == corev1.PodSucceeded {
			done[i] = true // before the Job's status says so
		} else {
			held[i] = true
		}
	}
	for i := int32(0); i < n; i++ {
		if done[i] {
			continue
		}
		pending++
		if held[i] {
			occupied++
		}
	}
	return pending, occupied
}

func ptrTrue(b *bool) bool { return b != nil && *b }

// podAccount is the account of a running pod: its label, else its Job's
// BulkJob's.
func (v *admissionView) podAccount(p *corev1.Pod) string {
	if acct, ok := p.Labels[v1alpha1.LabelAccount]; ok {
		return acct
	}
	if ref := metav1.GetControllerOfNoCopy(p); ref != nil {
		if jv := v.jobs[ref.UID]; jv != nil {
			return jv.account
		}
	}
	return ""
}

// admission is what one pass does to the cluster.
type admission struct {
	ungate    []ungate
	unsuspend []*batchv1.Job
}

// ungate is a pod admitted under the slot of key.
type ungate struct {
	pod *corev1.Pod
	key string
}

// Reconcile runs one admission pass.
func (a *admitter) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	v, err := a.read(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	now := a.now()

	// Slots whose pod ended, or whose reservation is over, are released
	// after the queue is brought up to date: an account whose last shard
	// just ended while it has more queued stays known (it keeps its credit
	// and does not count as a newcomer).
	var released []string
	bound := make(map[types.UID]bool, len(a.slots))
	reserved := map[types.UID][]string{} // Job -> its reservations' keys
	for key, sl := range a.slots {
		switch {
		case sl.pod != "":
			if p := v.pods[sl.pod]; p == nil || podFinished(p) {
				released = append(released, key)
			} else {
				bound[sl.pod] = true
			}
		case v.jobs[sl.job] == nil || now.After(sl.until):
			released = append(released, key)
		default:
			reserved[sl.job] = append(reserved[sl.job], key)
		}
	}
	// Reservations take their Job's gated pods, lowest index first.
	var act admission
	for job, keys := range reserved {
		slices.Sort(keys)
		for _, p := range v.jobs[job].gated {
			if len(keys) == 0 {
				break
			}
			if !bound[p.UID] {
				a.slots[keys[0]].pod = p.UID
				bound[p.UID] = true
				act.ungate = append(act.ungate, ungate{p, keys[0]})
				keys = keys[1:]
			}
		}
		reserved[job] = keys
	}
	// Pods running that no slot accounts for: pods that ran before this
	// controller was leader (or before budgets were set). The scheduler
	// is rebuilt with them running, so that it counts them.
	var unknown []*corev1.Pod
	for uid, p := range v.running {
		if !bound[uid] {
			unknown = append(unknown, p)
		}
	}
	if a.sched == nil || len(unknown) > 0 {
		a.rebuild(v, unknown, released)
		released = nil
		if len(unknown) > 0 {
			log.V(1).Info("processor pods found running outside the admission's count; rebuilt the queue", "pods", len(unknown))
		}
	}
	// Each Job's room; reservations beyond it (its status caught up with a
	// shard that ended) go back.
	for uid, jv := range v.jobs {
		if ptrTrue(jv.job.Spec.Suspend) {
			continue
		}
		jv.room = min(jv.pending, ptr32(jv.job.Spec.Parallelism)) - jv.occupied - int32(len(reserved[uid]))
		for ; jv.room < 0 && len(reserved[uid]) > 0; jv.room++ {
			keys := reserved[uid]
			released = append(released, keys[len(keys)-1])
			reserved[uid] = keys[:len(keys)-1]
		}
	}

	// The queue: suspended Jobs, gated pods, and each Job's room (pods the
	// Job controller is about to make: an account whose only queued pod
	// was just admitted keeps its turn and credit while the next comes).
	want := make(map[string]bool, len(v.pods)+len(v.jobs))
	for uid, jv := range v.jobs {
		if ptrTrue(jv.job.Spec.Suspend) {
			if key := startKey(uid); a.slots[key] == nil {
				want[key] = true
				a.sched.Push(a.task(key, jv, -1))
			}
			continue
		}
		for _, p := range jv.gated {
			if !bound[p.UID] {
				key := podKey(p.UID)
				want[key] = true
				a.sched.Push(a.task(key, jv, podIndex(p)))
			}
		}
		for _, key := range a.moreKeys(uid, jv, jv.room) {
			want[key] = true
		}
	}
	a.sched.Remove(func(t fairshare.Task[string]) bool { return !want[t.Key] })
	for uid, keys := range a.more {
		a.more[uid] = slices.DeleteFunc(keys, func(k string) bool { return !want[k] })
		if len(a.more[uid]) == 0 {
			delete(a.more, uid)
		}
	}
	for _, key := range released {
		a.release(key)
	}

	// Admit while the budgets allow.
	admitted := map[types.UID]*jobView{}
	for _, u := range act.ungate {
		if ref := metav1.GetControllerOfNoCopy(u.pod); ref != nil && v.jobs[ref.UID] != nil {
			admitted[ref.UID] = v.jobs[ref.UID]
		}
	}
	for a.room() {
		t, ok := a.sched.Next()
		if !ok {
			break
		}
		if a.overAccount(t.Account) {
			// Pods found running beyond the account's budget hold it: the
			// scheduler did not count them.
			a.sched.Requeue(t.Key)
			break
		}
		kind, rest, _ := strings.Cut(t.Key, "/")
		switch kind {
		case "start":
			uid := types.UID(rest)
			jv := v.jobs[uid]
			a.slots[t.Key] = &slot{account: t.Account, job: uid, until: now.Add(startGrace)}
			act.unsuspend = append(act.unsuspend, jv.job)
			admitted[uid] = jv
			// Its pods are on the way: the rest of its room queues now, so
			// that it comes before the account's newer Jobs.
			a.moreKeys(uid, jv, min(jv.pending, ptr32(jv.job.Spec.Parallelism))-jv.occupied-1)
		case "more":
			job, _, _ := strings.Cut(rest, "/")
			uid := types.UID(job)
			a.slots[t.Key] = &slot{account: t.Account, job: uid, until: now.Add(startGrace)}
			a.more[uid] = slices.DeleteFunc(a.more[uid], func(k string) bool { return k == t.Key })
			admitted[uid] = v.jobs[uid]
		default:
			uid := types.UID(rest)
			p := v.pods[uid]
			ref := metav1.GetControllerOfNoCopy(p)
			a.slots[t.Key] = &slot{account: t.Account, job: ref.UID, pod: uid}
			act.ungate = append(act.ungate, ungate{p, t.Key})
			admitted[ref.UID] = v.jobs[ref.UID]
		}
	}
	err = a.apply(ctx, act, v)
	touched := map[types.NamespacedName]bool{}
	for _, jv := range admitted {
		if jv != nil {
			touched[types.NamespacedName{Namespace: jv.bj.Namespace, Name: jv.bj.Name}] = true
		}
	}
	a.publish(v, touched)
	if err != nil {
		return ctrl.Result{}, err
	}
	next := admissionResync
	for _, sl := range a.slots {
		if sl.pod == "" {
			next = min(next, max(sl.until.Sub(now), time.Second))
		}
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

// task is the scheduler's task of key for a Job's shard (index; -1 for
// its start, maxIndex for the pods it has yet to get).
func (a *admitter) task(key string, jv *jobView, index int) fairshare.Task[string] {
	return fairshare.Task[string]{Key: key, Account: jv.account, Order: jv.order, Group: jv.bj.Name, Index: index, Cost: jv.cost}
}

// maxIndex places a Job's pods to come after its gated ones.
const maxIndex = math.MaxInt32

// moreKeys keeps n tasks queued for the pods a Job is about to get (its
// room) and returns their keys; the caller drops the others from the
// scheduler.
func (a *admitter) moreKeys(job types.UID, jv *jobView, n int32) []string {
	n = max(n, 0)
	keys := a.more[job]
	for int32(len(keys)) < n {
		a.moreSeq++
		key := fmt.Sprintf("more/%s/%d", job, a.moreSeq)
		a.sched.Push(a.task(key, jv, maxIndex))
		keys = append(keys, key)
	}
	a.more[job] = keys[:n]
	return a.more[job]
}

func isIndexed(job *batchv1.Job) bool {
	return job.Spec.CompletionMode != nil && *job.Spec.CompletionMode == batchv1.IndexedCompletion
}

func ptr32(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

// room reports whether the global budget has a free slot.
func (a *admitter) room() bool {
	return a.opts.MaxRunningShards <= 0 || len(a.slots) < int(a.opts.MaxRunningShards)
}

// overAccount reports whether an account holds its whole budget, counting
// the pods found running beyond it (the scheduler counts the others).
func (a *admitter) overAccount(acct string) bool {
	per := int(a.opts.MaxRunningShardsPerAccount)
	if per <= 0 {
		return false
	}
	n := 0
	for _, sl := range a.slots {
		if sl.account == acct {
			n++
		}
	}
	return n >= per
}

// release ends a slot.
func (a *admitter) release(key string) {
	sl := a.slots[key]
	if sl == nil {
		return
	}
	delete(a.slots, key)
	if !sl.over {
		a.sched.Done(key)
	}
}

// rebuild starts a new scheduler whose running tasks are the slots still
// held and the pods found running (unknown), as admitted. Slots in
// released go. Deficits start over: this happens when the controller
// becomes leader, and when pods ran that it did not admit.
func (a *admitter) rebuild(v *admissionView, unknown []*corev1.Pod, released []string) {
	for _, key := range released {
		delete(a.slots, key)
	}
	for _, p := range unknown {
		sl := &slot{account: v.podAccount(p), pod: p.UID}
		if ref := metav1.GetControllerOfNoCopy(p); ref != nil {
			sl.job = ref.UID
		}
		a.slots[podKey(p.UID)] = sl
	}
	a.sched = fairshare.New[string](a.config())
	a.more = map[types.UID][]string{}
	for key, sl := range a.slots {
		sl.over = false
		a.sched.Push(fairshare.Task[string]{Key: key, Account: sl.account})
	}
	for {
		if _, ok := a.sched.Next(); !ok {
			break
		}
	}
	// What the budgets could not take runs anyway: counted, not scheduled.
	for _, t := range a.sched.QueuedTasks() {
		a.slots[t.Key].over = true
	}
	a.sched.Remove(func(fairshare.Task[string]) bool { return true })
}

// apply un-suspends and un-gates what the pass admitted. What fails goes
// back to the queue (a reserved start keeps its reservation) and fails
// the pass, which is retried; what is gone by now is dropped by the next
// pass.
func (a *admitter) apply(ctx context.Context, act admission, v *admissionView) error {
	log := ctrl.LoggerFrom(ctx)
	var errs []error
	// A plain merge patch: un-suspending is idempotent, and a lock would
	// conflict with every status write of the Job controller.
	unsuspend := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":false}}`))
	jobErrs := a.patchAll(ctx, len(act.unsuspend), func(i int) (client.Object, client.Patch) {
		return act.unsuspend[i].DeepCopy(), unsuspend
	})
	for i, job := range act.unsuspend {
		if err := jobErrs[i]; err != nil {
			a.giveBack(startKey(job.UID))
			if !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("admit Job %s: %w", job.Name, err))
			}
			continue
		}
		log.V(1).Info("admitted Job", "job", job.Name, "account", v.jobs[job.UID].account)
	}
	podErrs := a.patchAll(ctx, len(act.ungate), func(i int) (client.Object, client.Patch) {
		return act.ungate[i].pod.DeepCopy(), removeGatePatch(act.ungate[i].pod)
	})
	for i, u := range act.ungate {
		if err := podErrs[i]; err != nil {
			if sl := a.slots[u.key]; sl != nil && u.key != podKey(u.pod.UID) {
				sl.pod = "" // a reserved start: it takes the next pod
			} else {
				a.giveBack(u.key)
			}
			if !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("admit pod %s: %w", u.pod.Name, err))
			}
			continue
		}
		log.V(1).Info("admitted shard", "pod", u.pod.Name, "account", v.podAccount(u.pod))
	}
	if len(errs) > 0 {
		return fmt.Errorf("admission: %v", errs)
	}
	return nil
}

// applyConcurrency is how many admission patches are in flight at once.
// One at a time, a pass admitting hundreds of Jobs took seconds (each patch
// a round trip: about 40 ms on the 2-core KWOK bench, where the pass's
// p99 was 8 s and admissions 20 a second; issue 27).
const applyConcurrency = 16

// patchAll sends n patches (made by mk), up to applyConcurrency at once,
// and returns each one's error. One patch is sent inline.
func (a *admitter) patchAll(ctx context.Context, n int, mk func(int) (client.Object, client.Patch)) []error {
	errs := make([]error, n)
	if n == 1 {
		obj, p := mk(0)
		errs[0] = a.client.Patch(ctx, obj, p)
		return errs
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, applyConcurrency)
	for i := 0; i < n; i++ {
		obj, p := mk(i)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = a.client.Patch(ctx, obj, p)
		}()
	}
	wg.Wait()
	return errs
}

// removeGatePatch removes the admission gate from a pod: a JSON patch that
// first tests the gate is where the cache saw it, so a pod changed
// meanwhile is refused rather than wrongly patched; no resourceVersion
// lock, which the scheduler's status writes on the pod would break.
func removeGatePatch(p *corev1.Pod) client.Patch {
	i := slices.IndexFunc(p.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == v1alpha1.AdmissionGate })
	path := fmt.Sprintf("/spec/schedulingGates/%d", i)
	ops := []map[string]any{
		{"op": "test", "path": path + "/name", "value": v1alpha1.AdmissionGate},
		{"op": "remove", "path": path},
	}
	b, _ := json.Marshal(ops)
	return client.RawPatch(types.JSONPatchType, b)
}

// giveBack returns a slot whose admission failed: its task is queued
// again, first in its account's line, and its charge is credited back.
func (a *admitter) giveBack(key string) {
	sl := a.slots[key]
	if sl == nil {
		return
	}
	delete(a.slots, key)
	if !sl.over {
		a.sched.Requeue(key)
	}
}

// publish computes the places in line of the Queued BulkJobs and wakes
// the BulkJobs whose place changed, and those in touched.
func (a *admitter) publish(v *admissionView, touched map[types.NamespacedName]bool) {
	// A BulkJob is in line while its shard Job waits to start.
	type queued struct {
		key   types.NamespacedName
		order int64
	}
	byAccount := map[string][]queued{}
	for uid, jv := range v.jobs {
		if sl := a.slots[startKey(uid)]; jv.retry || !ptrTrue(jv.job.Spec.Suspend) || sl != nil && sl.job == uid {
			continue
		}
		byAccount[jv.account] = append(byAccount[jv.account], queued{types.NamespacedName{Namespace: jv.bj.Namespace, Name: jv.bj.Name}, jv.order})
	}
	running := map[string]int{}
	for _, sl := range a.slots {
		running[sl.account]++
	}
	accts := make([]string, 0, len(byAccount))
	for acct, q := range byAccount {
		slices.SortFunc(q, func(x, y queued) int {
			if x.order != y.order {
				return cmp.Compare(x.order, y.order)
			}
			return cmp.Compare(x.key.String(), y.key.String())
		})
		accts = append(accts, acct)
	}
	// The estimate: accounts take turns, one BulkJob each, those running
	// fewer shards (newcomers) first, then the one waiting longest.
	slices.SortFunc(accts, func(x, y string) int {
		if running[x] != running[y] {
			return running[x] - running[y]
		}
		if c := cmp.Compare(byAccount[x][0].order, byAccount[y][0].order); c != 0 {
			return c
		}
		return cmp.Compare(x, y)
	})
	pos := map[types.NamespacedName]int32{}
	for i, acct := range accts {
		for k, q := range byAccount[acct] {
			ahead := 0
			for j, other := range accts {
				n := k // every account ahead in turn order gets k+1 turns before this one, others k
				if j < i {
					n = k + 1
				}
				if j != i {
					ahead += min(len(byAccount[other]), n)
				}
			}
			pos[q.key] = int32(ahead + k + 1)
		}
	}
	a.mu.Lock()
	for key, p := range pos {
		if a.positions[key] != p {
			touched[key] = true
		}
	}
	for key := range a.positions {
		if _, ok := pos[key]; !ok {
			touched[key] = true
		}
	}
	a.positions = pos
	a.mu.Unlock()
	for key := range touched {
		bj := &v1alpha1.BulkJob{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		select {
		case a.events <- event.GenericEvent{Object: bj}:
		default: // full: the BulkJob's own events and resync come later
		}
	}
}

// setupAdmission registers the admission pass: one worker, one key,
// woken by BulkJobs, Jobs and processor pods.
func (r *BulkJobReconciler) setupAdmission(mgr ctrl.Manager) error {
	r.admission = newAdmitter(mgr.GetClient(), r.Options, r.Now)
	inf, err := mgr.GetCache().GetInformer(context.Background(), &corev1.Pod{})
	if err != nil {
		return fmt.Errorf("pod informer: %w", err)
	}
	set := newPodSet()
	reg, err := inf.AddEventHandler(set)
	if err != nil {
		return fmt.Errorf("pod informer: %w", err)
	}
	set.synced = reg.HasSynced
	r.admission.podSet = set
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{admissionRequest}
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named("admission").
		// A BulkJob matters when it comes, goes or changes phase or
		// labels, not at each progress write.
		Watches(&v1alpha1.BulkJob{}, all, builder.WithPredicates(predicate.Or(
			predicate.LabelChangedPredicate{}, predicate.GenerationChangedPredicate{}, phaseChanged))).
		Watches(&batchv1.Job{}, all).
		Watches(&corev1.Pod{}, all).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Complete(r.admission)
}

// phaseChanged passes BulkJob updates that change the phase or start its
// deletion.
var phaseChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*v1alpha1.BulkJob)
	n, ok2 := e.ObjectNew.(*v1alpha1.BulkJob)
	return !ok1 || !ok2 || o.Status.Phase != n.Status.Phase || o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero()
}}

// gateRemoved passes the pod updates that remove the admission gate.
var gateRemoved = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*corev1.Pod)
		n, ok2 := e.ObjectNew.(*corev1.Pod)
		return ok1 && ok2 && hasGate(o) && !hasGate(n)
	},
}

// gatedPod passes the pods created or updated with the admission gate.
var gatedPod = predicate.Funcs{
	CreateFunc:  func(e event.CreateEvent) bool { p, ok := e.Object.(*corev1.Pod); return ok && hasGate(p) },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc:  func(e event.UpdateEvent) bool { p, ok := e.ObjectNew.(*corev1.Pod); return ok && hasGate(p) },
}

// podBulkJob maps a processor pod to its BulkJob (named by the job id).
func podBulkJob(_ context.Context, o client.Object) []reconcile.Request {
	id := o.GetLabels()[v1alpha1.LabelJobID]
	if id == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: id}}}
}

// labelAccount gives a BulkJob without an account label (made by hand, or
// by an older API) its account's, from the job's data: the account is an
// id (acct_...), never a key or a secret.
func (r *BulkJobReconciler) labelAccount(ctx context.Context, bj *v1alpha1.BulkJob, data *jobs.Job) error {
	if bj.Labels[v1alpha1.LabelAccount] != "" || data.AccountID == "" || len(validation.IsValidLabelValue(data.AccountID)) > 0 {
		return nil
	}
	before := bj.DeepCopy()
	if bj.Labels == nil {
		bj.Labels = map[string]string{}
	}
	bj.Labels[v1alpha1.LabelAccount] = data.AccountID
	if err := r.Client.Patch(ctx, bj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("label the BulkJob with its account: %w", err)
	}
	return nil
}

// withPlan is bj with its account's plan label (for the Jobs' labels and
// Kueue queue), looked up when the BulkJob does not carry it.
func (r *BulkJobReconciler) withPlan(ctx context.Context, bj *v1alpha1.BulkJob) *v1alpha1.BulkJob {
	if _, ok := bj.Labels[v1alpha1.LabelPlan]; ok {
		return bj
	}
	plan := r.planOf(ctx, bj.Labels[v1alpha1.LabelAccount])
	if plan == "" {
		return bj
	}
	c := bj.DeepCopy()
	c.Labels[v1alpha1.LabelPlan] = plan
	return c
}

// admissionControl applies the admission settings to a new Job; a Kueue
// queue name that cannot be made is a warning event and an error.
func (r *BulkJobReconciler) admissionControl(job *batchv1.Job, bj *v1alpha1.BulkJob, o Options) error {
	if err := admissionControl(job, bj, o); err != nil {
		r.event(bj, corev1.EventTypeWarning, "KueueQueue", "Create", "No Kueue queue for Job %s: %v", job.Name, err)
		return err
	}
	return nil
}

// observeAdmission says whether the BulkJob's shard Job is still waiting
// for admission, and how many of its shards run (the Job counts gated
// pods as active). In Kueue mode a Job waits while it is suspended and
// has never started.
func (r *BulkJobReconciler) observeAdmission(ctx context.Context, bj *v1alpha1.BulkJob, o *observation) error {
	job := o.job
	if jobFinished(job) {
		return nil
	}
	// A Job some of whose shards have ended is handed over too: one made
	// while the controller admitted, still creating gated pods from its
	// template, has them un-gated once nothing admits them (Kueue mode or
	// no budget), or it would wait for ever (issue 27: TestKueueAdmission's
	// Y1 hung so after the switch to Kueue).
	if err := r.switchAdmission(ctx, bj, job); err != nil {
		return err
	}
	started := len(o.succeeded)+len(o.failed) > 0
	switch {
	case r.Options.kueue():
		o.queued = !started && ptrTrue(job.Spec.Suspend) && job.Status.StartTime == nil
		return nil
	case !r.Options.admits():
		return r.releaseAdmission(ctx, bj, job)
	case started:
		return nil
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(bj.Namespace), client.MatchingLabels{v1alpha1.LabelJobID: bj.Spec.JobID}); err != nil {
		return fmt.Errorf("list the Job's pods: %w", err)
	}
	admitted := false
	active := int32(0)
	for i := range pods.Items {
		p := &pods.Items[i]
		if _, retry := p.Labels[v1alpha1.LabelRetryRound]; retry || !metav1.IsControlledBy(p, job) || hasGate(p) {
			continue
		}
		admitted = true
		if !podFinished(p) {
			active++
		}
	}
	o.queued = !admitted
	o.active = &active
	if o.queued && r.admission != nil {
		o.position = r.admission.position(types.NamespacedName{Namespace: bj.Namespace, Name: bj.Name})
	}
	return nil
}

// switchAdmission hands a Job that waits for the admission of another mode
// (the controller was restarted with --kueue-queue-name set or unset) to
// the current one, so that no BulkJob waits for an admission that no
// longer runs:
//
//   - Kueue mode, a Job made waiting for bulkd's admission (suspended, never
//     started, no queue label): it gets its queue's label and loses the
//     pods' admission gate, and Kueue admits it. A Job bulkd had already
//     started keeps running outside Kueue's quota: its gated pods are
//     released (releaseAdmission).
//   - bulkd's admission, a Job waiting for Kueue (suspended with a queue
//     label, never started): the label goes and its pods get the gate, and
//     it takes its turn in bulkd's queue. A Job Kueue admitted keeps
//     running; the admission pass counts its pods as found running.
//   - No admission at all: releaseAdmission starts it, without the label
//     (or a Kueue still running would suspend it again).
//
// A suspended Job's pod template and labels may change while it has never
// started (the Job API's mutable scheduling directives), which is when a
// Job waits; a retry Job is handed over the same way.
func (r *BulkJobReconciler) switchAdmission(ctx context.Context, bj *v1alpha1.BulkJob, job *batchv1.Job) error {
	if job == nil || jobFinished(job) {
		return nil
	}
	_, labelled := job.Labels[v1alpha1.KueueQueueLabel]
	waiting := ptrTrue(job.Spec.Suspend) && job.Status.StartTime == nil
	gated := slices.ContainsFunc(job.Spec.Template.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == v1alpha1.AdmissionGate })
	var patch map[string]any
	switch {
	case r.Options.kueue() && waiting && !labelled:
		src := r.withPlan(ctx, bj)
		q, err := kueueQueue(r.Options.KueueQueueName, src.Labels[v1alpha1.LabelAccount], src.Labels[v1alpha1.LabelPlan], src.Spec.Family)
		if err != nil {
			return err
		}
		patch = map[string]any{
			"metadata": map[string]any{"labels": map[string]any{v1alpha1.KueueQueueLabel: q}},
			"spec":     map[string]any{"template": map[string]any{"spec": map[string]any{"schedulingGates": withoutGate(job.Spec.Template.Spec.SchedulingGates)}}},
		}
	case r.Options.kueue() && !ptrTrue(job.Spec.Suspend) && !labelled && gated:
		return r.releaseAdmission(ctx, bj, job)
	case !r.Options.kueue() && waiting && labelled:
		patch = map[string]any{"metadata": map[string]any{"labels": map[string]any{v1alpha1.KueueQueueLabel: nil}}}
		if r.Options.admits() && !gated {
			gates := append(slices.Clone(job.Spec.Template.Spec.SchedulingGates), corev1.PodSchedulingGate{Name: v1alpha1.AdmissionGate})
			patch["spec"] = map[string]any{"template": map[string]any{"spec": map[string]any{"schedulingGates": gates}}}
		}
	default:
		return nil
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return fmt.Errorf("hand Job %s to the admission: %w", job.Name, err)
	}
	// Optimistic: a Job Kueue or the Job controller has just started is
	// not changed behind their back; the conflict requeues the BulkJob.
	if err := r.Client.Patch(ctx, job, client.RawPatch(types.MergePatchType, withResourceVersion(body, job.ResourceVersion))); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("hand Job %s to the admission: %w", job.Name, err))
	}
	mode := "bulkd"
	switch {
	case r.Options.kueue():
		mode = "kueue"
	case !r.Options.admits():
		mode = "none"
	}
	ctrl.LoggerFrom(ctx).Info("a Job waiting for the other admission was handed over", "job", job.Name, "admission", mode)
	r.event(bj, corev1.EventTypeNormal, "AdmissionSwitched", "Switch", "Job %s now waits for %s admission", job.Name, mode)
	if mode == "none" {
		return r.releaseAdmission(ctx, bj, job)
	}
	return nil
}

// withoutGate is gates without the admission gate (nil when none is left,
// which a merge patch writes as the field's removal).
func withoutGate(gates []corev1.PodSchedulingGate) []corev1.PodSchedulingGate {
	out := slices.DeleteFunc(slices.Clone(gates), func(g corev1.PodSchedulingGate) bool { return g.Name == v1alpha1.AdmissionGate })
	if len(out) == 0 {
		return nil
	}
	return out
}

// withResourceVersion adds metadata.resourceVersion to a JSON merge patch,
// which makes the API server refuse it when the object changed since.
func withResourceVersion(body []byte, rv string) []byte {
	var m map[string]any
	_ = json.Unmarshal(body, &m)
	md, _ := m["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
		m["metadata"] = md
	}
	md["resourceVersion"] = rv
	out, _ := json.Marshal(m)
	return out
}

// releaseAdmission starts a Job made while the controller admitted shards
// (suspended, gated pods) now that it does not (its budgets were set to
// 0): otherwise nothing would ever start it.
func (r *BulkJobReconciler) releaseAdmission(ctx context.Context, bj *v1alpha1.BulkJob, job *batchv1.Job) error {
	if ptrTrue(job.Spec.Suspend) {
		patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":false}}`))
		if err := r.Client.Patch(ctx, job.DeepCopy(), patch); err != nil {
			return client.IgnoreNotFound(fmt.Errorf("start Job %s: %w", job.Name, err))
		}
		ctrl.LoggerFrom(ctx).Info("started a Job that waited for admission: the controller no longer admits shards", "job", job.Name)
	}
	if !slices.ContainsFunc(job.Spec.Template.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == v1alpha1.AdmissionGate }) {
		return nil
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(bj.Namespace), client.MatchingLabels{v1alpha1.LabelJobID: bj.Spec.JobID}); err != nil {
		return fmt.Errorf("list the Job's pods: %w", err)
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; hasGate(p) && p.DeletionTimestamp.IsZero() {
			if err := r.Client.Patch(ctx, p.DeepCopy(), removeGatePatch(p)); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("remove the admission gate of pod %s: %w", p.Name, err)
			}
		}
	}
	return nil
}
