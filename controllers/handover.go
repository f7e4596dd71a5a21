package controllers

import (
	"context"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/admission"
	"github.com/bulkd/bulkd/internal/batchjob"
	"github.com/bulkd/bulkd/internal/jobs"
)

// The reconciler's side of admission (internal/admission runs the pass):
// a new Job is made to wait for its admission (admissionControl), a
// BulkJob reads whether it waits and its place in line
// (observeAdmission), and a Job waiting for the admission of another mode
// is handed to the current one (switchAdmission).

// Admission is the admission pass as the reconciler uses it
// (*admission.Admitter): a Queued BulkJob's place in line, and the
// BulkJobs to look at again because it admitted them or moved them in
// line.
type Admission interface {
	Position(key types.NamespacedName) int32
	Woken() <-chan event.GenericEvent
}

// setupAdmission registers the admission pass of the budgets (Options)
// with the manager.
func (r *BulkJobReconciler) setupAdmission(mgr ctrl.Manager) error {
	a := admission.New(mgr.GetClient(), admissionConfig(r.Options), r.Now)
	if err := a.SetupWithManager(mgr); err != nil {
		return err
	}
	r.admission = a
	return nil
}

// admissionConfig is the admission pass's share of the Options.
func admissionConfig(o Options) admission.Config {
	return admission.Config{MaxRunningShards: o.MaxRunningShards, MaxRunningShardsPerAccount: o.MaxRunningShardsPerAccount,
		NewcomerSlots: o.NewcomerSlots, PlanWeights: o.PlanWeights}
}

// gateRemoved passes the pod updates that remove the admission gate.
var gateRemoved = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*corev1.Pod)
		n, ok2 := e.ObjectNew.(*corev1.Pod)
		return ok1 && ok2 && admission.HasGate(o) && !admission.HasGate(n)
	},
}

// gatedPod passes the pods created or updated with the admission gate.
var gatedPod = predicate.Funcs{
	CreateFunc:  func(e event.CreateEvent) bool { p, ok := e.Object.(*corev1.Pod); return ok && admission.HasGate(p) },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc:  func(e event.UpdateEvent) bool { p, ok := e.ObjectNew.(*corev1.Pod); return ok && admission.HasGate(p) },
}

// podJobIDField indexes the cached processor pods by their job id label:
// a pass reads its BulkJob's pods from that index, not by matching a label
// selector against every processor pod in the namespace, which made each
// pass cost the number of pods (at 1,000 running BulkJobs, half of the
// controller's CPU: docs/benchmarks.md).
const podJobIDField = "metadata.labels.jobID"

func indexPodJobID(o client.Object) []string {
	if id := o.GetLabels()[v1alpha1.LabelJobID]; id != "" {
		return []string{id}
	}
	return nil
}

// jobPods is bj's processor pods (shard and retry Jobs'), from the
// cache's index, not copied: read them, never change them.
func (r *BulkJobReconciler) jobPods(ctx context.Context, bj *v1alpha1.BulkJob) (*corev1.PodList, error) {
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(bj.Namespace), client.MatchingFields{podJobIDField: bj.Spec.JobID},
		client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list the Job's pods: %w", err)
	}
	return &pods, nil
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
	err := patchLocked(ctx, r.Client, bj, func(bj *v1alpha1.BulkJob) {
		if bj.Labels == nil {
			bj.Labels = map[string]string{}
		}
		bj.Labels[v1alpha1.LabelAccount] = data.AccountID
	})
	if err != nil {
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
	if batchjob.Finished(job) {
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
		o.queued = !started && ptr.Deref(job.Spec.Suspend, false) && job.Status.StartTime == nil
		return nil
	case !r.Options.admits():
		return r.releaseAdmission(ctx, bj, job)
	case started:
		return nil
	}
	pods, err := r.jobPods(ctx, bj)
	if err != nil {
		return err
	}
	admitted := false
	active := int32(0)
	for i := range pods.Items {
		p := &pods.Items[i]
		if _, retry := p.Labels[v1alpha1.LabelRetryRound]; retry || !metav1.IsControlledBy(p, job) || admission.HasGate(p) {
			continue
		}
		admitted = true
		if !batchjob.PodFinished(p) {
			active++
		}
	}
	o.queued = !admitted
	o.active = &active
	if o.queued && r.admission != nil {
		o.position = r.admission.Position(types.NamespacedName{Namespace: bj.Namespace, Name: bj.Name})
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
	if job == nil || batchjob.Finished(job) {
		return nil
	}
	_, labelled := job.Labels[v1alpha1.KueueQueueLabel]
	waiting := ptr.Deref(job.Spec.Suspend, false) && job.Status.StartTime == nil
	gated := admission.Gated(job.Spec.Template.Spec.SchedulingGates)
	var handOver func(*batchv1.Job)
	switch {
	case r.Options.kueue() && waiting && !labelled:
		src := r.withPlan(ctx, bj)
		q, err := kueueQueue(r.Options.KueueQueueName, src.Labels[v1alpha1.LabelAccount], src.Labels[v1alpha1.LabelPlan], src.Spec.Family)
		if err != nil {
			return err
		}
		handOver = func(job *batchv1.Job) {
			if job.Labels == nil {
				job.Labels = map[string]string{}
			}
			job.Labels[v1alpha1.KueueQueueLabel] = q
			job.Spec.Template.Spec.SchedulingGates = admission.WithoutGate(job.Spec.Template.Spec.SchedulingGates)
		}
	case r.Options.kueue() && !ptr.Deref(job.Spec.Suspend, false) && !labelled && gated:
		return r.releaseAdmission(ctx, bj, job)
	case !r.Options.kueue() && waiting && labelled:
		handOver = func(job *batchv1.Job) {
			delete(job.Labels, v1alpha1.KueueQueueLabel)
			if r.Options.admits() && !gated {
				job.Spec.Template.Spec.SchedulingGates = append(job.Spec.Template.Spec.SchedulingGates, corev1.PodSchedulingGate{Name: v1alpha1.AdmissionGate})
			}
		}
	default:
		return nil
	}
	// Optimistic: a Job Kueue or the Job controller has just started is
	// not changed behind their back; the conflict requeues the BulkJob.
	if err := patchLocked(ctx, r.Client, job, handOver); err != nil {
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

// releaseAdmission starts a Job made while the controller admitted shards
// (suspended, gated pods) now that it does not (its budgets were set to
// 0): otherwise nothing would ever start it.
func (r *BulkJobReconciler) releaseAdmission(ctx context.Context, bj *v1alpha1.BulkJob, job *batchv1.Job) error {
	if ptr.Deref(job.Spec.Suspend, false) {
		patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":false}}`))
		if err := r.Client.Patch(ctx, job.DeepCopy(), patch); err != nil {
			return client.IgnoreNotFound(fmt.Errorf("start Job %s: %w", job.Name, err))
		}
		ctrl.LoggerFrom(ctx).Info("started a Job that waited for admission: the controller no longer admits shards", "job", job.Name)
	}
	if !admission.Gated(job.Spec.Template.Spec.SchedulingGates) {
		return nil
	}
	pods, err := r.jobPods(ctx, bj)
	if err != nil {
		return err
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; admission.HasGate(p) && p.DeletionTimestamp.IsZero() {
			if err := r.Client.Patch(ctx, p.DeepCopy(), admission.RemoveGatePatch(p)); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("remove the admission gate of pod %s: %w", p.Name, err)
			}
		}
	}
	return nil
}
