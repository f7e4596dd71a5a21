// Package admission is the admission pass of bulkd's Kubernetes mode:
// the controller decides which processor pods may run, so that the
// processor budget (MaxRunningShards) is shared across accounts in turn
// and no account holds more than its share (MaxRunningShardsPerAccount).
// The BulkJob reconciler (controllers) creates the Jobs waiting for it
// and reads a Queued BulkJob's place in line from it (Position); the
// pass wakes the BulkJobs it admitted or moved (Woken).
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
package admission

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/batchjob"
	"github.com/bulkd/bulkd/internal/fairshare"
)

// Config is the budgets the pass shares out (the controller's Options).
type Config struct {
	// MaxRunningShards is the global budget: processor pods running at
	// once over every BulkJob (0: none). MaxRunningShardsPerAccount is
	// one account's (0: the global one).
	MaxRunningShards           int32
	MaxRunningShardsPerAccount int32
	// NewcomerSlots is the part of the global budget only an account with
	// no slot may take: when one account's burst fills the budget, a new
	// account's job starts at once instead of waiting for a shard to end
	// (shards run minutes). Fair share already serves a newcomer first;
	// this keeps a free slot for it to take.
	NewcomerSlots int32
	// PlanWeights weighs an account's turn by its plan ("payg" for a Job
	// without LabelPlan); a plan without a weight weighs 1.
	PlanWeights map[string]int
}

// admissionRequest is the admission pass's one key.
var admissionRequest = ctrl.Request{NamespacedName: types.NamespacedName{Name: "bulkd-admission"}}

const (
	// startGrace is how long a slot reserved for a Job's next pod waits
	// for the pod before it is released.
	startGrace = time.Minute
	// admissionResync is the pass's safety net: every change wakes it.
	admissionResync = 30 * time.Second
	// bindsPerPass and admitPatchesPerPass bound the patches of one pass:
	// pods it un-gates for reservations, and Jobs it un-suspends or pods
	// it un-gates for what it admits (a reservation needs no patch). A
	// pass runs alone, so a Job created while one applies thousands of
	// patches (one account's burst of 1,000 BulkJobs: 8,000 pods to
	// un-gate, 16 patches at a time) waited for all of them: 7-10 s for a
	// new account's first shard in the KWOK bench, where a patch took
	// 100-300 ms with the API server saturated. Bounded, a pass takes
	// about a second there, and the next follows at once (continueAfter),
	// serving first whatever arrived in the meantime.
	bindsPerPass        = 64
	admitPatchesPerPass = 64
	continueAfter       = 10 * time.Millisecond
)

// Admitter runs the admission passes.
type Admitter struct {
	client client.Client
	cfg    Config
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

// New is the admission pass of the budgets cfg; now is its clock (nil:
// time.Now). SetupWithManager registers it.
func New(c client.Client, cfg Config, now func() time.Time) *Admitter {
	if now == nil {
		now = time.Now
	}
	return &Admitter{client: c, cfg: cfg, now: now, events: make(chan event.GenericEvent, 1024),
		slots: map[string]*slot{}, weights: map[string]int{}, more: map[types.UID][]string{}, positions: map[types.NamespacedName]int32{}}
}

func (a *Admitter) config() fairshare.Config {
	workers, per := int(a.cfg.MaxRunningShards), int(a.cfg.MaxRunningShardsPerAccount)
	if workers <= 0 {
		workers = math.MaxInt32
	}
	return fairshare.Config{Workers: workers, PerAccount: per, Weight: func(acct string) int { return max(a.weights[acct], 1) }}
}

// Position is a Queued BulkJob's place in line (0: not known to be queued).
func (a *Admitter) Position(key types.NamespacedName) int32 {
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

// accountOf is a BulkJob's account: its label (the API sets it; the
// controller fills it from the job's data), or "" (one shared turn for
// BulkJobs of no known account).
func accountOf(bj *v1alpha1.BulkJob) string { return bj.Labels[v1alpha1.LabelAccount] }

// read builds the view from the cache.
func (a *Admitter) read(ctx context.Context) (*admissionView, error) {
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
		if ref == nil || ref.Kind != "BulkJob" || !job.DeletionTimestamp.IsZero() || batchjob.Finished(job) {
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
		if w := a.cfg.PlanWeights[cmp.Or(job.Labels[v1alpha1.LabelPlan], "payg")]; w > a.weights[jv.account] {
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
		if batchjob.PodFinished(p) {
			continue
		}
		if !HasGate(p) {
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
		tmp[k] = indexed{batchjob.PodIndex(p), p}
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
	if !batchjob.Indexed(job) {
		// A retry Job: one completion.
		for _, p := range pods {
			if p.Status.Phase == corev1.PodSucceeded {
				return 0, 0
			}
			if !batchjob.PodFinished(p) {
				occupied = 1
			}
		}
		if job.Status.Succeeded > 0 {
			return 0, 0
		}
		return 1, occupied
	}
	done, _ := batchjob.ParseIndexes(job.Status.CompletedIndexes, n)
	if job.Status.FailedIndexes != nil {
		failed, _ := batchjob.ParseIndexes(*job.Status.FailedIndexes, n)
		for i := range failed {
			done[i] = true
		}
	}
	// held: indexes with a pod not finished, or whose latest pod failed.
	held := map[int32]bool{}
	for _, p := range pods {
		i := int32(batchjob.PodIndex(p))
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

// pass is one pass's bookkeeping of the slots against the view.
type pass struct {
	v   *admissionView
	now time.Time
	act admission
	// released: slots to end once the queue is up to date; bound: pods a
	// slot holds; reserved: each Job's reservations still waiting for a
	// pod.
	released []string
	bound    map[types.UID]bool
	reserved map[types.UID][]string
	// admitted: the Jobs this pass admitted a task of.
	admitted map[types.UID]*jobView
	// cut: the pass stopped at bindsPerPass or admitPatchesPerPass with
	// work left; the next pass follows at once.
	cut bool
}

// Reconcile runs one admission pass: the slots are matched with what the
// cache shows (settle, recount, fitRooms), the queue is brought up to
// date (enqueue), and tasks are admitted while the budgets allow (admit);
// then the cluster is patched (apply) and the BulkJobs told (publish).
func (a *Admitter) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	began := time.Now()
	v, err := a.read(ctx)
	if err != nil {
		return ctrl.Result{}, err
	}
	ps := &pass{v: v, now: a.now(), admitted: map[types.UID]*jobView{}}
	a.settle(ps)
	a.recount(ctx, ps)
	a.fitRooms(ps)
	a.enqueue(ps)
	for _, key := range ps.released {
		a.release(key)
	}
	a.admit(ps)
	decided := time.Since(began)
	err = a.apply(ctx, ps.act, v)
	ctrl.LoggerFrom(ctx).V(1).Info("admission pass", "jobs", len(v.jobs), "pods", len(v.pods), "slots", len(a.slots),
		"unsuspend", len(ps.act.unsuspend), "ungate", len(ps.act.ungate), "cut", ps.cut,
		"decided", decided.Round(time.Millisecond), "took", time.Since(began).Round(time.Millisecond))
	touched := map[types.NamespacedName]bool{}
	for _, jv := range ps.admitted {
		if jv != nil {
			touched[types.NamespacedName{Namespace: jv.bj.Namespace, Name: jv.bj.Name}] = true
		}
	}
	a.publish(v, touched)
	if err != nil {
		return ctrl.Result{}, err
	}
	next := admissionResync
	if ps.cut {
		next = continueAfter
	}
	for _, sl := range a.slots {
		if sl.pod == "" {
			next = min(next, max(sl.until.Sub(ps.now), time.Second))
		}
	}
	return ctrl.Result{RequeueAfter: next}, nil
}

// settle sorts the slots: those whose pod ended, or whose reservation is
// over, are released after the queue is brought up to date (an account
// whose last shard just ended while it has more queued stays known: it
// keeps its credit and does not count as a newcomer); reservations take
// their Job's gated pods, lowest index first.
func (a *Admitter) settle(ps *pass) {
	v := ps.v
	ps.bound = make(map[types.UID]bool, len(a.slots))
	ps.reserved = map[types.UID][]string{}
	for key, sl := range a.slots {
		switch {
		case sl.pod != "":
			if p := v.pods[sl.pod]; p == nil || batchjob.PodFinished(p) {
				ps.released = append(ps.released, key)
			} else {
				ps.bound[sl.pod] = true
			}
		case v.jobs[sl.job] == nil || ps.now.After(sl.until):
			ps.released = append(ps.released, key)
		default:
			ps.reserved[sl.job] = append(ps.reserved[sl.job], key)
		}
	}
	// Oldest Jobs first: with more than bindsPerPass to bind, the rest
	// waits for the next pass (a reservation lasts startGrace).
	jobs := make([]types.UID, 0, len(ps.reserved))
	for job := range ps.reserved {
		jobs = append(jobs, job)
	}
	slices.SortFunc(jobs, func(x, y types.UID) int {
		return cmp.Or(cmp.Compare(v.jobs[x].order, v.jobs[y].order), cmp.Compare(x, y))
	})
	for _, job := range jobs {
		keys := ps.reserved[job]
		slices.Sort(keys)
		for _, p := range v.jobs[job].gated {
			if len(keys) == 0 {
				break
			}
			if len(ps.act.ungate) >= bindsPerPass {
				ps.cut = true
				break
			}
			if !ps.bound[p.UID] {
				a.slots[keys[0]].pod = p.UID
				ps.bound[p.UID] = true
				ps.act.ungate = append(ps.act.ungate, ungate{p, keys[0]})
				keys = keys[1:]
			}
		}
		ps.reserved[job] = keys
	}
}

// recount rebuilds the scheduler when pods run that no slot accounts for
// (pods that ran before this controller was leader, or before budgets
// were set), so that it counts them; and on the first pass.
func (a *Admitter) recount(ctx context.Context, ps *pass) {
	var unknown []*corev1.Pod
	for uid, p := range ps.v.running {
		if !ps.bound[uid] {
			unknown = append(unknown, p)
		}
	}
	if a.sched != nil && len(unknown) == 0 {
		return
	}
	a.rebuild(ps.v, unknown, ps.released)
	ps.released = nil
	if len(unknown) > 0 {
		ctrl.LoggerFrom(ctx).V(1).Info("processor pods found running outside the admission's count; rebuilt the queue", "pods", len(unknown))
	}
}

// fitRooms computes each Job's room; reservations beyond it (its status
// caught up with a shard that ended) go back.
func (a *Admitter) fitRooms(ps *pass) {
	for uid, jv := range ps.v.jobs {
		if ptrTrue(jv.job.Spec.Suspend) {
			continue
		}
		jv.room = min(jv.pending, ptr32(jv.job.Spec.Parallelism)) - jv.occupied - int32(len(ps.reserved[uid]))
		for ; jv.room < 0 && len(ps.reserved[uid]) > 0; jv.room++ {
			keys := ps.reserved[uid]
			ps.released = append(ps.released, keys[len(keys)-1])
			ps.reserved[uid] = keys[:len(keys)-1]
		}
	}
}

// enqueue brings the queue up to date: suspended Jobs, gated pods, and
// each Job's room (pods the Job controller is about to make: an account
// whose only queued pod was just admitted keeps its turn and credit while
// the next comes). What is no longer wanted leaves it.
func (a *Admitter) enqueue(ps *pass) {
	v := ps.v
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
			if !ps.bound[p.UID] {
				key := podKey(p.UID)
				want[key] = true
				a.sched.Push(a.task(key, jv, batchjob.PodIndex(p)))
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
}

// admit takes tasks from the scheduler while the budgets allow, each
// under a new slot: a Job's start (un-suspend it), a pod it is about to
// get (a reservation), or a gated pod (un-gate it).
func (a *Admitter) admit(ps *pass) {
	v := ps.v
	for _, u := range ps.act.ungate {
		if ref := metav1.GetControllerOfNoCopy(u.pod); ref != nil && v.jobs[ref.UID] != nil {
			ps.admitted[ref.UID] = v.jobs[ref.UID]
		}
	}
	bound := len(ps.act.ungate)
	for a.room() {
		if len(ps.act.unsuspend)+len(ps.act.ungate)-bound >= admitPatchesPerPass {
			ps.cut = true
			break
		}
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
		if a.newcomersOnly() && a.slotsOf(t.Account) > 0 {
			// The slots left are the newcomers'. The scheduler serves an
			// account that was idle before anyone else, so the task it
			// gives here is not a newcomer's: none is waiting.
			a.sched.Requeue(t.Key)
			break
		}
		kind, rest, _ := strings.Cut(t.Key, "/")
		switch kind {
		case "start":
			uid := types.UID(rest)
			jv := v.jobs[uid]
			a.slots[t.Key] = &slot{account: t.Account, job: uid, until: ps.now.Add(startGrace)}
			ps.act.unsuspend = append(ps.act.unsuspend, jv.job)
			ps.admitted[uid] = jv
			// Its pods are on the way: the rest of its room queues now, so
			// that it comes before the account's newer Jobs.
			a.moreKeys(uid, jv, min(jv.pending, ptr32(jv.job.Spec.Parallelism))-jv.occupied-1)
		case "more":
			job, _, _ := strings.Cut(rest, "/")
			uid := types.UID(job)
			a.slots[t.Key] = &slot{account: t.Account, job: uid, until: ps.now.Add(startGrace)}
			a.more[uid] = slices.DeleteFunc(a.more[uid], func(k string) bool { return k == t.Key })
			ps.admitted[uid] = v.jobs[uid]
		default:
			uid := types.UID(rest)
			p := v.pods[uid]
			ref := metav1.GetControllerOfNoCopy(p)
			a.slots[t.Key] = &slot{account: t.Account, job: ref.UID, pod: uid}
			ps.act.ungate = append(ps.act.ungate, ungate{p, t.Key})
			ps.admitted[ref.UID] = v.jobs[ref.UID]
		}
	}
}

// task is the scheduler's task of key for a Job's shard (index; -1 for
// its start, maxIndex for the pods it has yet to get).
func (a *Admitter) task(key string, jv *jobView, index int) fairshare.Task[string] {
	return fairshare.Task[string]{Key: key, Account: jv.account, Order: jv.order, Group: jv.bj.Name, Index: index, Cost: jv.cost}
}

// maxIndex places a Job's pods to come after its gated ones.
const maxIndex = math.MaxInt32

// moreKeys keeps n tasks queued for the pods a Job is about to get (its
// room) and returns their keys; the caller drops the others from the
// scheduler.
func (a *Admitter) moreKeys(job types.UID, jv *jobView, n int32) []string {
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

func ptr32(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

// room reports whether the global budget has a free slot.
func (a *Admitter) room() bool {
	return a.cfg.MaxRunningShards <= 0 || len(a.slots) < int(a.cfg.MaxRunningShards)
}

// newcomersOnly reports whether the free slots of the global budget are
// only the newcomers' (Config.NewcomerSlots).
func (a *Admitter) newcomersOnly() bool {
	return a.cfg.MaxRunningShards > 0 && a.cfg.NewcomerSlots > 0 &&
		int(a.cfg.MaxRunningShards)-len(a.slots) <= int(a.cfg.NewcomerSlots)
}

// overAccount reports whether an account holds its whole budget, counting
// the pods found running beyond it (the scheduler counts the others).
func (a *Admitter) overAccount(acct string) bool {
	per := int(a.cfg.MaxRunningShardsPerAccount)
	return per > 0 && a.slotsOf(acct) >= per
}

// slotsOf counts the slots an account holds (pods found running beyond
// its budget included).
func (a *Admitter) slotsOf(acct string) int {
	n := 0
	for _, sl := range a.slots {
		if sl.account == acct {
			n++
		}
	}
	return n
}

// release ends a slot.
func (a *Admitter) release(key string) {
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
func (a *Admitter) rebuild(v *admissionView, unknown []*corev1.Pod, released []string) {
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
