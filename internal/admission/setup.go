package admission

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/bulkd/bulkd/api/v1alpha1"
)

// Woken carries the BulkJobs whose place in line changed or that were
// admitted: the BulkJob reconciler watches it (a source.Channel).
func (a *Admitter) Woken() <-chan event.GenericEvent { return a.events }

// SetupWithManager registers the admission pass: one worker, one key,
// woken by BulkJobs, Jobs and processor pods. The manager's cache must
// hold the processor pods (it reads them through the pod informer).
func (a *Admitter) SetupWithManager(mgr ctrl.Manager) error {
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
	a.podSet = set
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
		Complete(a)
}

// phaseChanged passes BulkJob updates that change the phase or start its
// deletion.
var phaseChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*v1alpha1.BulkJob)
	n, ok2 := e.ObjectNew.(*v1alpha1.BulkJob)
	return !ok1 || !ok2 || o.Status.Phase != n.Status.Phase || o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero()
}}
