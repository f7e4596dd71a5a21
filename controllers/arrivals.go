package controllers

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/bulkd/bulkd/api/v1alpha1"
)

// arrivals orders the first passes of new BulkJobs, the passes that create
// their Jobs, ahead of every other pass and fairly across accounts.
//
// Why: the BulkJob reconciler's one queue also carries the passes of every
// running BulkJob (Job and pod changes, progress writes). At 1,000 running
// BulkJobs a new one waited tens of seconds behind them before its Job
// existed, so the admission pass could not see it (docs/benchmarks.md,
// "Kubernetes at scale"); and a burst of one account's BulkJobs, FIFO,
// held every other account's first BulkJob behind all of it.
//
// How: the queue is controller-runtime's priority queue. A new BulkJob's
// first pass is enqueued with a priority above every other pass
// (arrivalBase, less its tag), and the tags are start-time fair queueing
// across accounts: an account's k-th waiting BulkJob is tagged k after
// the tag of the latest first pass begun, so the queue serves the
// accounts in turn (FIFO within one), and an account that had nothing
// waiting goes next. The passes after the first go back to priority 0
// (Reconcile sets the result's priority).
type arrivals struct {
	mu sync.Mutex
	// begun is the tag of the latest first pass begun: the virtual time.
	begun int64
	// last is each account's latest tag while it may matter (it is above
	// begun); tags is the BulkJobs waiting for their first pass.
	last map[string]int64
	tags map[types.NamespacedName]int64
}

// arrivalBase is the priority of a first pass tagged 0; every later tag
// is one lower, above the priority of the other passes (0) and of
// controller-runtime's LowPriority for 2^40 BulkJobs.
const arrivalBase = 1 << 40

// pastFirstPass is the priority of every pass after a BulkJob's first.
const pastFirstPass = 0

func newArrivals() *arrivals {
	return &arrivals{last: map[string]int64{}, tags: map[types.NamespacedName]int64{}}
}

// priority tags a BulkJob waiting for its first pass (once: a second
// event before that pass keeps its tag) and answers its queue priority.
func (a *arrivals) priority(key types.NamespacedName, account string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.tags[key]
	if !ok {
		t = max(a.begun, a.last[account]+1)
		a.last[account], a.tags[key] = t, t
	}
	// Absolute, so that priorities given at different times compare as
	// their tags do; a tag grows by at most one per BulkJob created since
	// the controller started, far from arrivalBase.
	return arrivalBase - int(min(t, arrivalBase-1))
}

// firstPassBegins records that key's pass begins: it is no longer
// waiting, and the virtual time moves to its tag.
func (a *arrivals) firstPassBegins(key types.NamespacedName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.tags[key]
	if !ok {
		return
	}
	delete(a.tags, key)
	a.begun = max(a.begun, t)
	// An account's last tag at or below the virtual time says nothing
	// (its next BulkJob is tagged from begun): forget it, so the map is
	// bounded by the accounts with BulkJobs waiting.
	if len(a.last) > 2*len(a.tags)+1024 {
		for acct, lt := range a.last {
			if lt <= a.begun {
				delete(a.last, acct)
			}
		}
	}
}

// handler is the BulkJob watch's event handler: a BulkJob that has had no
// pass yet (no phase) is enqueued by arrivals' priority, any other event
// as controller-runtime's own handler would (a resync or the start's list
// of a BulkJob already seen, low).
func (a *arrivals) handler() handler.TypedEventHandler[client.Object, reconcile.Request] {
	return arrivalsHandler{a}
}

type arrivalsHandler struct{ a *arrivals }

func (h arrivalsHandler) add(q workqueue.TypedRateLimitingInterface[reconcile.Request], o client.Object, unchanged bool) {
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)}
	pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request])
	if !ok {
		q.Add(req)
		return
	}
	var prio *int
	if bj, ok := o.(*v1alpha1.BulkJob); ok && bj.Status.Phase == "" && bj.DeletionTimestamp.IsZero() {
		prio = new(h.a.priority(req.NamespacedName, bj.Labels[v1alpha1.LabelAccount]))
	} else if unchanged {
		prio = new(handler.LowPriority)
	}
	pq.AddWithOpts(priorityqueue.AddOpts{Priority: prio}, req)
}

func (h arrivalsHandler) Create(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.add(q, e.Object, e.IsInInitialList)
}

func (h arrivalsHandler) Update(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.add(q, e.ObjectNew, e.ObjectOld.GetResourceVersion() == e.ObjectNew.GetResourceVersion())
}

func (h arrivalsHandler) Delete(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)})
}

func (h arrivalsHandler) Generic(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)})
}
