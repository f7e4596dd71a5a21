// Package controllers holds the BulkJob controller of bulkd's Kubernetes
// mode: it runs each BulkJob's shards as one Indexed batch Job and folds
// the Job's status and the job's counters in Redis into the BulkJob's
// status.
package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/batchjob"
	"github.com/bulkd/bulkd/internal/jobs"
)

// JobData is the part of the engine's Redis store the controller reads and
// cleans up (*jobs.Store).
type JobData interface {
	Get(ctx context.Context, id string) (*jobs.Job, error)
	UnfinishedShards(ctx context.Context, j *jobs.Job) ([]int, error)
	Delete(ctx context.Context, id string) error
}

// AccountPlans looks up accounts (*accounts.Store): an account's
// unlimited plan weighs its turn and may name its Kueue queue.
type AccountPlans interface {
	Account(ctx context.Context, id string) (*accounts.Account, error)
}

// ShardFailer answers the unanswered inputs of a shard that failed for
// good as the family's error outcome (*jobs.Processor, built on the
// family registry).
type ShardFailer interface {
	FailShard(ctx context.Context, jobID string, shard int) error
	// ErrorOutcome is the outcome FailShard answers a family's rows as
	// (family.Family's ErrorAnswer: "error", "not_found", "unknown"); false
	// for a family this build does not know. The ShardsFailed condition
	// and event name it, and a BulkJob of an unknown family is held with
	// an UnknownFamily condition instead of getting a Job.
	ErrorOutcome(family string) (string, bool)
	// KnownFamilies lists the families it answers (messages, and the
	// check of --family-profiles at start).
	KnownFamilies() []string
}

// ReconcilerDeps are what a BulkJobReconciler is built from.
type ReconcilerDeps struct {
	Client client.Client
	// APIReader reads around the cache (a Job the cache does not show yet,
	// or one without our labels). Defaults to Client.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	Data      JobData
	Shards    ShardFailer
	// Options are the operator's settings; their zero values are given
	// the defaults once, by NewBulkJobReconciler.
	Options Options
	// Progress, when set, wakes the reconciler as processors record
	// answers; without it progress is read once per RequeueInterval.
	Progress ProgressSource
	// Now is the clock (tests move it for retention). Defaults to time.Now.
	Now func() time.Time
	// Plans, when set, gives the plan of the account that submitted a job
	// (LabelPlan on its Jobs and pods); without it every account weighs 1.
	Plans AccountPlans
}

// BulkJobReconciler reconciles BulkJobs.
//
// A running BulkJob is reconciled when it or one of its Jobs changes, when
// a processor announces progress (Progress), when its next retry comes due
// or its paced progress write may go out, and otherwise once per
// Options.RequeueInterval, a safety net for announcements that were lost.
type BulkJobReconciler struct {
	ReconcilerDeps

	// writes paces the status writes that only report progress.
	writes *statusWrites
	plans  planCache
	// admission is the admission pass when the controller admits shards
	// (Options.admits): Reconcile reads a Queued BulkJob's place in line
	// from it.
	admission Admission
	// arrivals orders the passes that create new BulkJobs' Jobs first,
	// in turn across accounts.
	arrivals *arrivals
}

// NewBulkJobReconciler builds a reconciler from d with every default
// applied here, once: the Options' zero values (withDefaults), the clock,
// the API reader and the pacer of status writes. Reconcile and what it
// calls read them as they are.
func NewBulkJobReconciler(d ReconcilerDeps) *BulkJobReconciler {
	d.Options = d.Options.withDefaults()
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.APIReader == nil {
		d.APIReader = d.Client
	}
	return &BulkJobReconciler{ReconcilerDeps: d, arrivals: newArrivals(),
		writes: newStatusWrites(d.Options.ProgressInterval, d.Options.ProgressWritesPerSecond)}
}

// +kubebuilder:rbac:groups=bulkd.io,resources=bulkjobs,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=bulkd.io,resources=bulkjobs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=bulkd.io,resources=bulkjobs/finalizers,verbs=update
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the controller: BulkJobs, the Jobs they own
// (shard and retry Jobs) and, with a Progress source, the processors'
// progress announcements (a source.Channel fed by a runnable that listens
// to them).
func (r *BulkJobReconciler) SetupWithManager(mgr ctrl.Manager, concurrency int) error {
	// The BulkJobs through arrivals' handler (a new one's first pass goes
	// first), their Jobs as Owns would.
	b := ctrl.NewControllerManagedBy(mgr).
		Named("bulkjob").
		Watches(&v1alpha1.BulkJob{}, r.arrivals.handler()).
		Watches(&batchv1.Job{}, handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &v1alpha1.BulkJob{}, handler.OnlyControllerOwner())).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(concurrency, 1)})
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, podJobIDField, indexPodJobID); err != nil {
		return fmt.Errorf("index pods by job id: %w", err)
	}
	if r.Options.admits() {
		if err := r.setupAdmission(mgr); err != nil {
			return err
		}
		// The admission pass wakes a BulkJob it admitted or whose place in
		// line moved; a pod whose gate is gone (the cache caught up with
		// the admission) wakes its BulkJob, which leaves Queued.
		b = b.WatchesRawSource(source.Channel(r.admission.Woken(), &handler.EnqueueRequestForObject{})).
			Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podBulkJob), builder.WithPredicates(gateRemoved))
	} else {
		// Nothing admits (Kueue mode, or no budget): a pod a Job made
		// while the controller admitted creates from its gated template
		// wakes its BulkJob, which removes the gate (releaseAdmission).
		b = b.Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podBulkJob), builder.WithPredicates(gatedPod))
	}
	if r.Progress != nil {
		if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1alpha1.BulkJob{}, jobIDField, indexJobID); err != nil {
			return fmt.Errorf("index BulkJobs by job id: %w", err)
		}
		events := make(chan progressEvent, 1024)
		if err := mgr.Add(&progressWatcher{src: r.Progress, events: events, log: mgr.GetLogger().WithName("progress")}); err != nil {
			return err
		}
		b = b.WatchesRawSource(source.Channel(events, handler.TypedFuncs[announcement, reconcile.Request]{GenericFunc: r.announced}))
	}
	return b.Complete(r)
}

// Reconcile is one pass over a BulkJob (reconcile), served in the queue's
// order (arrivals: a new BulkJob's first pass first).
func (r *BulkJobReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.arrivals.firstPassBegins(req.NamespacedName)
	res, err := r.reconcile(ctx, req)
	if err == nil {
		// A pass that comes back comes back as any other: only a
		// BulkJob's first pass goes first (a failed one keeps its place).
		res.Priority = new(pastFirstPass)
	}
	return res, err
}

// reconcile moves one BulkJob forward, in the shape of jobset's: read it;
// end the pass early for a BulkJob being deleted, past its retention,
// finished, or of a family this build does not know; otherwise create its
// Jobs and answer the shards that failed for good, compute its status
// from what that saw (pure: computeStatus), write the status once, and
// only then emit the pass's events.
func (r *BulkJobReconciler) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var bj v1alpha1.BulkJob
	if err := r.Client.Get(ctx, req.NamespacedName, &bj); err != nil {
		if apierrors.IsNotFound(err) {
			r.writes.forget(req.NamespacedName, r.Now())
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	ctx = ctrl.LoggerInto(ctx, ctrl.LoggerFrom(ctx).WithValues("jobID", bj.Spec.JobID))
	if !bj.DeletionTimestamp.IsZero() {
		r.writes.forget(req.NamespacedName, r.Now())
		return requeueOnConflict(r.finalize(ctx, &bj))
	}
	if err := r.ensureFinalizer(ctx, &bj); err != nil {
		return requeueOnConflict(err)
	}
	now := r.Now()
	left := r.retentionLeft(&bj, now)
	if left <= 0 {
		return ctrl.Result{}, r.expire(ctx, &bj)
	}
	if bj.Status.Phase.IsFinished() {
		return r.finished(req.NamespacedName, now, left), nil
	}
	errorOutcome, known := r.Shards.ErrorOutcome(string(bj.Spec.Family))
	if !known {
		return r.unknownFamily(ctx, &bj, now, left)
	}

	obs, err := r.createJobsAndFailShards(ctx, &bj)
	if err != nil {
		return ctrl.Result{}, err
	}
	obs.errorOutcome = errorOutcome
	old := bj.Status
	paced, err := r.writeStatus(ctx, req.NamespacedName, &bj, computeStatus(&bj, obs, now), now)
	if err != nil {
		return requeueOnConflict(err)
	}
	// bj.Status is what is stored now: events follow what was written.
	r.emit(&bj, &old, obs)
	if bj.Status.Phase.IsFinished() {
		return r.finished(req.NamespacedName, now, left), nil
	}
	return ctrl.Result{RequeueAfter: r.nextPass(obs, paced, left)}, nil
}

// ensureFinalizer adds the finalizer to a BulkJob that lacks it: the API
// creates BulkJobs with it; one made by hand may not have it.
func (r *BulkJobReconciler) ensureFinalizer(ctx context.Context, bj *v1alpha1.BulkJob) error {
	if controllerutil.ContainsFinalizer(bj, v1alpha1.Finalizer) {
		return nil
	}
	return patchLocked(ctx, r.Client, bj, func(bj *v1alpha1.BulkJob) { controllerutil.AddFinalizer(bj, v1alpha1.Finalizer) })
}

// retentionLeft is how long the BulkJob has before its retention is over.
func (r *BulkJobReconciler) retentionLeft(bj *v1alpha1.BulkJob, now time.Time) time.Duration {
	left := r.Options.Retention
	if !bj.CreationTimestamp.IsZero() { // always set by the API server
		left = bj.CreationTimestamp.Add(r.Options.Retention).Sub(now)
	}
	// The job's own expiry (its account's retention, docs/privacy.md),
	// when it comes first: the BulkJob goes with the job's data.
	if at, err := time.Parse(time.RFC3339, bj.Annotations[v1alpha1.AnnotationExpiresAt]); err == nil {
		left = min(left, at.Sub(now))
	}
	return left
}

// expire deletes a BulkJob past its retention (its finalizer then deletes
// the job's data).
func (r *BulkJobReconciler) expire(ctx context.Context, bj *v1alpha1.BulkJob) error {
	ctrl.LoggerFrom(ctx).Info("BulkJob is past its retention; deleting it", "retention", r.Options.Retention.String())
	err := r.Client.Delete(ctx, bj, client.PropagationPolicy(metav1.DeletePropagationBackground))
	return client.IgnoreNotFound(err)
}

// finished is the pass's end for a BulkJob that is done: nothing more to
// pace, and one more look when its retention is over.
func (r *BulkJobReconciler) finished(key types.NamespacedName, now time.Time, left time.Duration) ctrl.Result {
	r.writes.forget(key, now)
	return ctrl.Result{RequeueAfter: left}
}

// writeStatus writes st as bj's status, once, as a patch under an
// optimistic lock (a conflict means the pass rested on a stale cache: the
// BulkJob is read again), unless it is a change of progress alone that
// the pacer holds back (statusWrites); bj.Status is then what is stored.
// paced is how soon a held-back write may go out (0: none held back).
func (r *BulkJobReconciler) writeStatus(ctx context.Context, key types.NamespacedName, bj *v1alpha1.BulkJob,
	st v1alpha1.BulkJobStatus, now time.Time) (paced time.Duration, err error) {
	write, paced := r.writes.decide(key, &bj.Status, &st, now)
	if !write {
		return paced, nil
	}
	if err := patchStatusLocked(ctx, r.Client, bj, func(bj *v1alpha1.BulkJob) { bj.Status = st }); err != nil {
		return 0, err
	}
	r.writes.wrote(key, now)
	return paced, nil
}

// nextPass is how soon a running BulkJob is looked at again. Progress
// wakes the reconciler; the resync is a safety net. While a retry waits
// to come due nothing runs: look again when it is due (a retry Job that
// starts or ends is an event of its own). A held-back progress write
// (paced) goes out when it may; nothing waits past the retention.
func (r *BulkJobReconciler) nextPass(obs *observation, paced, left time.Duration) time.Duration {
	next := r.Options.RequeueInterval
	if obs.retryWait > 0 {
		next = obs.retryWait
	}
	if paced > 0 {
		next = min(next, paced)
	}
	return min(next, left)
}

// unknownFamily holds a BulkJob whose family this build has no answerer
// for (the CRD accepts any well-formed family name, so that adding a family
// needs no CRD upgrade; a newer apiserver may create one during a rolling
// upgrade). No Job is created: its pods could only fail. The BulkJob stays
// Pending with Complete=False, reason UnknownFamily, and one Warning event;
// a controller that knows the family (it lists every BulkJob when it
// starts) takes it from there. It is still deleted at its retention.
func (r *BulkJobReconciler) unknownFamily(ctx context.Context, bj *v1alpha1.BulkJob, now time.Time, left time.Duration) (ctrl.Result, error) {
	msg := fmt.Sprintf("family %q is not one this controller knows (%v); no Job is created until a controller that knows it runs",
		bj.Spec.Family, r.Shards.KnownFamilies())
	if c := meta.FindStatusCondition(bj.Status.Conditions, v1alpha1.ConditionComplete); c != nil && c.Reason == ReasonUnknownFamily && c.Message == msg {
		return ctrl.Result{RequeueAfter: left}, nil
	}
	err := patchStatusLocked(ctx, r.Client, bj, func(bj *v1alpha1.BulkJob) {
		bj.Status.ObservedGeneration = bj.Generation
		if bj.Status.Phase == "" {
			bj.Status.Phase = v1alpha1.PhasePending
		}
		meta.SetStatusCondition(&bj.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionComplete, Status: metav1.ConditionFalse,
			Reason: ReasonUnknownFamily, Message: msg, ObservedGeneration: bj.Generation, LastTransitionTime: metav1.NewTime(now)})
	})
	if err != nil {
		return requeueOnConflict(err)
	}
	ctrl.LoggerFrom(ctx).Info("BulkJob of an unknown family; no Job is created", "family", bj.Spec.Family)
	r.event(bj, corev1.EventTypeWarning, ReasonUnknownFamily, "Observe", "%s", msg)
	return ctrl.Result{RequeueAfter: left}, nil
}

// conflictRetry is how soon a pass whose write met a newer BulkJob (the
// cache was behind) runs again; the watch event of that newer version
// usually comes first.
const conflictRetry = time.Second

func requeueOnConflict(err error) (ctrl.Result, error) {
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	return ctrl.Result{}, err
}

// createJobsAndFailShards is the part of a pass that acts on the
// cluster and on Redis: it reads the job's counters in Redis and its Jobs,
// creates the shard Job when the job still has work and a retry Job when
// retries are due, and answers with the family's error outcome the shards
// the Job has given up on. What it saw and did is the observation the
// status is computed from.
func (r *BulkJobReconciler) createJobsAndFailShards(ctx context.Context, bj *v1alpha1.BulkJob) (*observation, error) {
	o := &observation{}
	data, err := r.Data.Get(ctx, bj.Spec.JobID)
	if errors.Is(err, jobs.ErrJobNotFound) {
		return o, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read job data: %w", err)
	}
	o.data = data
	if err := r.labelAccount(ctx, bj, data); err != nil {
		return nil, err
	}
	if err := r.ensureShardJob(ctx, bj, o); err != nil {
		return nil, err
	}
	if o.job != nil {
		if err := r.failGivenUpShards(ctx, bj, o); err != nil {
			return nil, err
		}
	}
	if o.data == nil {
		return o, nil
	}
	if err := r.createRetryJobWhenDue(ctx, bj, o); err != nil {
		return nil, err
	}
	return o, nil
}

// ensureShardJob reads the shard Job, creating it while the job runs and
// has none, and what its indexes and the admission say.
func (r *BulkJobReconciler) ensureShardJob(ctx context.Context, bj *v1alpha1.BulkJob, o *observation) error {
	job, err := r.currentJob(ctx, bj)
	if err != nil {
		return err
	}
	if job == nil && o.data.Status == jobs.StatusRunning {
		if job, err = r.createJob(ctx, bj); err != nil {
			return err
		}
		o.createdJob = true
	}
	o.job = job
	if job == nil {
		return nil
	}
	if o.succeeded, o.failed, err = shardOutcomes(job, bj.Spec.Shards); err != nil {
		return err
	}
	return r.observeAdmission(ctx, bj, o)
}

// failGivenUpShards answers with the family's error outcome the
// unanswered rows of the shards the Job has given up on (and of every
// unfinished shard once the Job is finished), then reads the job's
// counters again.
func (r *BulkJobReconciler) failGivenUpShards(ctx context.Context, bj *v1alpha1.BulkJob, o *observation) error {
	finished := batchjob.Finished(o.job)
	if len(o.failed) == 0 && !finished {
		return nil
	}
	unfinished, err := r.Data.UnfinishedShards(ctx, o.data)
	if err != nil {
		return err
	}
	for _, s := range unfinished {
		// A finished Job that left a shard unanswered in Redis (it never
		// should) gets the same treatment as a failed index: no row stays
		// pending forever.
		if !o.failed[int32(s)] && !finished {
			continue
		}
		if err := r.Shards.FailShard(ctx, bj.Spec.JobID, s); err != nil {
			if errors.Is(err, jobs.ErrJobNotFound) {
				o.data = nil
				return nil
			}
			return fmt.Errorf("answer failed shard %d as errors: %w", s, err)
		}
		if !o.failed[int32(s)] {
			o.failed[int32(s)] = true
			delete(o.succeeded, int32(s))
		}
		o.answered = append(o.answered, s)
	}
	if len(o.answered) > 0 {
		ctrl.LoggerFrom(ctx).Info("shards failed for good; their unanswered rows were answered as the family's error outcome", "shards", o.answered)
		if o.data, err = r.Data.Get(ctx, bj.Spec.JobID); errors.Is(err, jobs.ErrJobNotFound) {
			o.data = nil
		} else if err != nil {
			return fmt.Errorf("read job data: %w", err)
		}
	}
	return nil
}

// retryAction is what a pass does about a BulkJob's provisional answers.
type retryAction int

const (
	// retryNothing: no answer waits for a retry.
	retryNothing retryAction = iota
	// retryWait: a retry Job is running, or the next retry is not due yet.
	retryWait
	// retryCreate: retries are due and no retry Job runs: start a round.
	retryCreate
)

// decideRetry is the retry decision for a job's data and the Job of its
// latest retry round (nil: none, or gone). For retryWait it also returns
// how long until the next retry is due (0 while a retry Job runs: its
// progress is polled like the shards').
func decideRetry(data *jobs.Job, latest *batchv1.Job, now time.Time) (retryAction, time.Duration) {
	switch {
	case data == nil || data.Status != jobs.StatusRetrying:
		return retryNothing, 0
	case latest != nil && !batchjob.Finished(latest):
		return retryWait, 0
	case data.NextRetryAt.IsZero():
		return retryNothing, 0
	case data.NextRetryAt.After(now):
		return retryWait, data.NextRetryAt.Sub(now)
	default:
		return retryCreate, 0
	}
}

// createRetryJobWhenDue reads the latest retry round's Job and starts the
// next round when retries are due and no round runs.
func (r *BulkJobReconciler) createRetryJobWhenDue(ctx context.Context, bj *v1alpha1.BulkJob, o *observation) error {
	if bj.Status.RetryRounds > 0 {
		job, err := r.retryJob(ctx, bj, bj.Status.RetryRounds)
		if err != nil {
			return err
		}
		o.retryJob, o.retryRound = job, bj.Status.RetryRounds
		if job != nil && batchjob.Finished(job) {
			o.retryEnded = job
		}
		if err := r.switchAdmission(ctx, bj, job); err != nil {
			return err
		}
	}
	action, wait := decideRetry(o.data, o.retryJob, r.Now())
	o.retryWait = wait
	if action != retryCreate {
		return nil
	}
	round := bj.Status.RetryRounds + 1
	job, created, err := r.createRetryJob(ctx, bj, round)
	if err != nil {
		return err
	}
	o.retryJob, o.retryRound, o.createdRetry = job, round, created
	return nil
}

// retryJob returns the BulkJob's retry Job of a round, or nil when it is
// gone. A Job the cache does not show is looked for on the API server: a
// round created a moment ago must not be taken for a finished one.
func (r *BulkJobReconciler) retryJob(ctx context.Context, bj *v1alpha1.BulkJob, round int32) (*batchv1.Job, error) {
	key := types.NamespacedName{Namespace: bj.Namespace, Name: retryJobName(bj, round)}
	var job batchv1.Job
	err := r.Client.Get(ctx, key, &job)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, &job)
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return r.adopt(ctx, bj, &job)
}

// createRetryJob creates the Job of a retry round; one that exists already
// (a pass whose status write failed made it) is adopted.
func (r *BulkJobReconciler) createRetryJob(ctx context.Context, bj *v1alpha1.BulkJob, round int32) (*batchv1.Job, bool, error) {
	src := r.withPlan(ctx, bj)
	job := desiredRetryJob(src, r.Options, round)
	if err := r.admissionControl(job, src, r.Options); err != nil {
		return nil, false, err
	}
	if err := controllerutil.SetControllerReference(bj, job, r.Scheme); err != nil {
		return nil, false, err
	}
	err := r.Client.Create(ctx, job)
	if apierrors.IsAlreadyExists(err) {
		var existing batchv1.Job
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(job), &existing); err != nil {
			return nil, false, err
		}
		adopted, err := r.adopt(ctx, bj, &existing)
		return adopted, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("create retry Job: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("created retry Job", "job", job.Name, "round", round)
	return job, true, nil
}

// currentJob returns the BulkJob's Job: its own, or an orphan made for it
// (adopted), or nil when there is none.
func (r *BulkJobReconciler) currentJob(ctx context.Context, bj *v1alpha1.BulkJob) (*batchv1.Job, error) {
	var job batchv1.Job
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: bj.Namespace, Name: bj.Name}, &job)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return r.adopt(ctx, bj, &job)
}

func (r *BulkJobReconciler) createJob(ctx context.Context, bj *v1alpha1.BulkJob) (*batchv1.Job, error) {
	src := r.withPlan(ctx, bj)
	job := desiredJob(src, r.Options)
	if err := r.admissionControl(job, src, r.Options); err != nil {
		return nil, err
	}
	if err := controllerutil.SetControllerReference(bj, job, r.Scheme); err != nil {
		return nil, err
	}
	err := r.Client.Create(ctx, job)
	if apierrors.IsAlreadyExists(err) {
		// The cache is behind, or a Job without our labels has the name.
		var existing batchv1.Job
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(job), &existing); err != nil {
			return nil, err
		}
		return r.adopt(ctx, bj, &existing)
	}
	if err != nil {
		return nil, fmt.Errorf("create Job: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("created Job", "job", job.Name, "shards", *job.Spec.Completions, "parallelism", *job.Spec.Parallelism)
	return job, nil
}

// adopt returns job if bj controls it, takes it over if it has no
// controller and was made for bj's job id, and refuses anything else.
func (r *BulkJobReconciler) adopt(ctx context.Context, bj *v1alpha1.BulkJob, job *batchv1.Job) (*batchv1.Job, error) {
	if metav1.IsControlledBy(job, bj) {
		return job, nil
	}
	if metav1.GetControllerOf(job) != nil || job.Labels[v1alpha1.LabelJobID] != bj.Spec.JobID {
		r.event(bj, corev1.EventTypeWarning, "JobConflict", "Adopt",
			"Job %s exists and does not belong to this BulkJob; waiting for it to go away", job.Name)
		return nil, fmt.Errorf("job %s/%s exists and is not this BulkJob's", job.Namespace, job.Name)
	}
	owned := job.DeepCopy()
	if err := controllerutil.SetControllerReference(bj, owned, r.Scheme); err != nil {
		return nil, err
	}
	// Locked: owner references and labels are lists and maps a merge patch
	// replaces or merges; they must not overwrite a change made meanwhile.
	err := patchLocked(ctx, r.Client, job, func(job *batchv1.Job) {
		job.OwnerReferences = owned.OwnerReferences
		if job.Labels == nil {
			job.Labels = map[string]string{}
		}
		job.Labels[v1alpha1.LabelManagedBy] = v1alpha1.ManagedByController
	})
	if err != nil {
		return nil, fmt.Errorf("adopt Job: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("adopted Job", "job", job.Name)
	r.event(bj, corev1.EventTypeNormal, "JobAdopted", "Adopt", "Adopted Job %s", job.Name)
	return job, nil
}

// finalize deletes the job's data in Redis, then lets the BulkJob go.
func (r *BulkJobReconciler) finalize(ctx context.Context, bj *v1alpha1.BulkJob) error {
	if !controllerutil.ContainsFinalizer(bj, v1alpha1.Finalizer) {
		return nil
	}
	if err := r.Data.Delete(ctx, bj.Spec.JobID); err != nil {
		return err
	}
	if err := patchLocked(ctx, r.Client, bj, func(bj *v1alpha1.BulkJob) { controllerutil.RemoveFinalizer(bj, v1alpha1.Finalizer) }); err != nil {
		return client.IgnoreNotFound(err)
	}
	ctrl.LoggerFrom(ctx).Info("BulkJob deleted; its data in Redis is deleted")
	return nil
}

// emit records the events of a pass whose status write succeeded.
func (r *BulkJobReconciler) emit(bj *v1alpha1.BulkJob, old *v1alpha1.BulkJobStatus, o *observation) {
	st := &bj.Status
	if o.createdJob && o.job != nil {
		r.event(bj, corev1.EventTypeNormal, "JobCreated", "Create", "Created Job %s: %d shards, parallelism %d",
			o.job.Name, *o.job.Spec.Completions, *o.job.Spec.Parallelism)
	}
	if len(o.answered) > 0 {
		sorted := slices.Clone(o.answered)
		slices.Sort(sorted)
		r.event(bj, corev1.EventTypeWarning, "ShardsFailed", "FailShards",
			"Shards %v failed for good; their unanswered rows are answered as %s", sorted, o.errorOutcome)
	}
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionRetryFailed); c != nil && c.Status == metav1.ConditionTrue {
		if was := meta.FindStatusCondition(old.Conditions, v1alpha1.ConditionRetryFailed); was == nil || was.Status != c.Status || was.Message != c.Message {
			r.event(bj, corev1.EventTypeWarning, "RetryJobFailed", "Retry", "%s", c.Message)
		}
	}
	if o.createdRetry && o.retryJob != nil {
		r.event(bj, corev1.EventTypeNormal, "RetryJobCreated", "Retry", "Created retry Job %s (round %d): %d inputs wait for a retry",
			o.retryJob.Name, o.retryRound, st.Retrying)
	}
	if st.Phase == old.Phase {
		return
	}
	if old.Phase == v1alpha1.PhaseQueued && st.Phase != v1alpha1.PhaseFailed {
		r.event(bj, corev1.EventTypeNormal, "Admitted", "Admit", "Admitted: its shards take turns with the other accounts' for the processor budget")
	}
	switch st.Phase {
	case v1alpha1.PhaseQueued:
		if r.Options.kueue() {
			r.event(bj, corev1.EventTypeNormal, "Queued", "Queue", "Waiting for Kueue to admit Job %s", bj.Name)
		} else {
			r.event(bj, corev1.EventTypeNormal, "Queued", "Queue", "Waiting for the processor budget: place %d in line", max(st.QueuePosition, 1))
		}
	case v1alpha1.PhaseRunning:
		r.event(bj, corev1.EventTypeNormal, "Running", "Run", "Shards are running")
	case v1alpha1.PhaseRetrying:
		r.event(bj, corev1.EventTypeNormal, "Retrying", "Retry", "Every row has an answer; %d inputs wait for a retry (%s)",
			st.Retrying, formatOutcomes(st.Outcomes))
	case v1alpha1.PhaseCompleted:
		typ := corev1.EventTypeNormal
		if st.ShardsFailed > 0 {
			typ = corev1.EventTypeWarning
		}
		r.event(bj, typ, "Completed", "Complete", "All %d rows answered: %s; %d invalid; %d of %d shards failed",
			bj.Spec.Rows, formatOutcomes(st.Outcomes), st.Invalid, st.ShardsFailed, bj.Spec.Shards)
	case v1alpha1.PhaseFailed:
		r.event(bj, corev1.EventTypeWarning, "Failed", "Fail", "The job's data is not in Redis (expired or deleted)")
	}
}

func (r *BulkJobReconciler) event(bj *v1alpha1.BulkJob, typ, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(bj, nil, typ, reason, action, note, args...)
	}
}
