package controllers

import (
	"context"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/jobs"
)

// ProgressSource is the processors' progress announcements
// (*jobs.Store): progress in Redis makes no Kubernetes event, so these are
// what wake the controller while rows are answered.
type ProgressSource interface {
	WatchProgress(ctx context.Context, h jobs.ProgressHandler) error
}

// jobIDField indexes the cached BulkJobs by spec.jobID, the id an
// announcement carries.
const jobIDField = "spec.jobID"

func indexJobID(o client.Object) []string {
	if bj, ok := o.(*v1alpha1.BulkJob); ok && bj.Spec.JobID != "" {
		return []string{bj.Spec.JobID}
	}
	return nil
}

// announcement is what the watcher hands the controller: a job that moved
// (ended: a shard or retry pass is over), or, with no job id, every
// BulkJob (the subscription was just made: announcements may have been
// missed).
type announcement struct {
	jobID string
	ended bool
}

type progressEvent = event.TypedGenericEvent[announcement]

// progressWatcher is a manager runnable (leader only, like the
// controller) that turns announcements into events of a source.Channel.
type progressWatcher struct {
	src    ProgressSource
	events chan<- progressEvent
	log    logr.Logger
}

// NeedLeaderElection: only the leader reconciles, so only it listens.
func (w *progressWatcher) NeedLeaderElection() bool { return true }

func (w *progressWatcher) Start(ctx context.Context) error {
	send := func(jobID string, ended bool) {
		select {
		case w.events <- progressEvent{Object: announcement{jobID, ended}}:
		case <-ctx.Done():
		}
	}
	w.log.Info("listening to the processors' progress announcements")
	return w.src.WatchProgress(ctx, jobs.ProgressHandler{
		Subscribed: func() {
			w.log.V(1).Info("progress subscription made; reading every running BulkJob")
			send("", true)
		},
		Job: send,
		Broken: func(err error) {
			w.log.Error(err, "progress announcements interrupted; BulkJobs are read again once they are back")
		},
	})
}

// announced queues the BulkJobs an announcement is about. Answers
// recorded queue the job for when its next progress write may go out
// (statusWrites): passes before then could write nothing, and the queue
// keeps one entry per job however many announcements come. The end of a
// shard or retry pass may change the phase: that is queued at once.
func (r *BulkJobReconciler) announced(ctx context.Context, e progressEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	now := r.Now()
	for _, req := range r.requestsFor(ctx, e.Object) {
		if d := r.writes.dueIn(req.NamespacedName, now); d > 0 && !e.Object.ended {
			q.AddAfter(req, d)
		} else {
			q.Add(req)
		}
	}
}

// requestsFor maps an announcement to the BulkJob of its job id, and the
// "read everything" one to every BulkJob not finished yet, from the cache.
func (r *BulkJobReconciler) requestsFor(ctx context.Context, ann announcement) []reconcile.Request {
	var l v1alpha1.BulkJobList
	var opts []client.ListOption
	if ann.jobID != "" {
		opts = append(opts, client.MatchingFields{jobIDField: ann.jobID})
	}
	if err := r.Client.List(ctx, &l, opts...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list BulkJobs for a progress announcement", "jobID", ann.jobID)
		return nil
	}
	out := make([]reconcile.Request, 0, len(l.Items))
	for i := range l.Items {
		if bj := &l.Items[i]; !bj.Status.Phase.IsFinished() || !bj.DeletionTimestamp.IsZero() {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: bj.Namespace, Name: bj.Name}})
		}
	}
	return out
}
