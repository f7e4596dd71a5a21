package admission

import (
	"context"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// apply un-suspends and un-gates what the pass admitted. What fails goes
// back to the queue (a reserved start keeps its reservation) and fails
// the pass, which is retried; what is gone by now is dropped by the next
// pass.
func (a *Admitter) apply(ctx context.Context, act admission, v *admissionView) error {
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
		return act.ungate[i].pod.DeepCopy(), RemoveGatePatch(act.ungate[i].pod)
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
func (a *Admitter) patchAll(ctx context.Context, n int, mk func(int) (client.Object, client.Patch)) []error {
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

// giveBack returns a slot whose admission failed: its task is queued
// again, first in its account's line, and its charge is credited back.
func (a *Admitter) giveBack(key string) {
	sl := a.slots[key]
	if sl == nil {
		return
	}
	delete(a.slots, key)
	if !sl.over {
		a.sched.Requeue(key)
	}
}
