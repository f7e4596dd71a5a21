package admission

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bulkd/bulkd/api/v1alpha1"
)

// processorPods are the processor pods in the cache: from podSet, the
// cache's own objects, not copies (the pass only reads them; what it
// patches it copies first), once podSet has seen the informer's first
// list; else a List. A List, even without deep copies, copies every pod
// struct into the list: at 10,000 pods that was most of a pass's
// allocations and a third of its time (BenchmarkAdmissionPass).
func (a *Admitter) processorPods(ctx context.Context) ([]*corev1.Pod, error) {
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
