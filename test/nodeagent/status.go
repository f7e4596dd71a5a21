package nodeagent

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The Job status and the pods the agent writes, as the Job controller
// would.

// writeStatus writes the agent's view of a Job as its status (with final,
// its end); a Job deleted meanwhile is not an error.
func (a *Agent) writeStatus(ctx context.Context, js *jobState, status batchv1.JobStatus, final []batchv1.JobCondition) error {
	job := js.job
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur batchv1.Job
		if err := a.Client.Get(ctx, client.ObjectKey{Namespace: job.Namespace, Name: job.Name}, &cur); err != nil {
			return err
		}
		if cur.UID != js.uid {
			return nil
		}
		cur.Status.StartTime = status.StartTime
		cur.Status.Active = status.Active
		cur.Status.Ready = status.Ready
		cur.Status.Terminating = ptr.To[int32](0)
		cur.Status.Succeeded = status.Succeeded
		cur.Status.Failed = status.Failed
		cur.Status.CompletedIndexes = status.CompletedIndexes
		cur.Status.FailedIndexes = status.FailedIndexes
		cur.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{}
		if final != nil {
			cur.Status.Conditions = append(cur.Status.Conditions, final...)
			if final[len(final)-1].Type == batchv1.JobComplete {
				cur.Status.CompletionTime = ptr.To(final[0].LastTransitionTime)
			}
		}
		return a.Client.Status().Update(ctx, &cur)
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		a.mu.Lock()
		js.dirty = true
		a.mu.Unlock()
		return fmt.Errorf("update status: %w", err)
	}
	if final != nil {
		a.mu.Lock()
		js.finished = true
		a.mu.Unlock()
		a.logf("job %s finished: %s (completed %q, failed %q)", job.Name, final[len(final)-1].Type,
			status.CompletedIndexes, ptr.Deref(status.FailedIndexes, ""))
	}
	return nil
}

func failureConds(reason string, now metav1.Time) []batchv1.JobCondition {
	return []batchv1.JobCondition{
		{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: reason, Message: reason, LastProbeTime: now, LastTransitionTime: now},
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: reason, Message: reason, LastProbeTime: now, LastTransitionTime: now},
	}
}

// statusOf is the Job status of the agent's view. Call with a.mu held.
func (a *Agent) statusOf(js *jobState) batchv1.JobStatus {
	var ok, bad []int
	for i, s := range js.idx {
		switch s.phase {
		case succeeded:
			ok = append(ok, i)
		case failed:
			bad = append(bad, i)
		}
	}
	active := int32(len(js.procs))
	for _, s := range js.idx {
		if s.phase == gated {
			active++ // the Job controller counts pods not yet scheduled as active
		}
	}
	st := batchv1.JobStatus{
		StartTime: js.startTime,
		Active:    active,
		Ready:     ptr.To(int32(len(js.procs))),
		Succeeded: int32(len(ok)),
		Failed:    js.failedPods,
	}
	if js.indexed {
		st.CompletedIndexes = FormatIndexes(ok)
	}
	if js.indexed && js.job.Spec.BackoffLimitPerIndex != nil {
		st.FailedIndexes = ptr.To(FormatIndexes(bad))
	}
	return st
}

// podFor is the Pod object the Job controller would create for an index
// (attempt n) of job: the template's labels, annotations and spec, the
// completion index, the Job as controller.
func podFor(job *batchv1.Job, index, n int) *corev1.Pod {
	t := job.Spec.Template
	labels := map[string]string{}
	for k, v := range t.Labels {
		labels[k] = v
	}
	labels[batchv1.JobNameLabel] = job.Name
	labels[batchv1.ControllerUidLabel] = string(job.UID)
	annotations := map[string]string{}
	for k, v := range t.Annotations {
		annotations[k] = v
	}
	if ptr.Deref(job.Spec.CompletionMode, batchv1.NonIndexedCompletion) == batchv1.IndexedCompletion {
		annotations[batchv1.JobCompletionIndexAnnotation] = strconv.Itoa(index)
		labels[batchv1.JobCompletionIndexAnnotation] = strconv.Itoa(index) // the Job controller sets the same key as a label
	} else {
		annotations[batchv1.JobCompletionIndexAnnotation] = "0"
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("%s-%d-%d-%05d", job.Name, index, n, rand.IntN(100000)), Namespace: job.Namespace,
			Labels: labels, Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))},
		},
		Spec: *t.Spec.DeepCopy(),
	}
}

// setPodPhase writes a pod's phase (and for a finished one its
// container's exit code), as the kubelet would; a pod that is gone is
// left alone.
func (a *Agent) setPodPhase(ctx context.Context, name string, phase corev1.PodPhase, code int) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var p corev1.Pod
		if err := a.Client.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: name}, &p); err != nil {
			return err
		}
		p.Status.Phase = phase
		if len(p.Spec.Containers) > 0 {
			cs := corev1.ContainerStatus{Name: p.Spec.Containers[0].Name, Image: p.Spec.Containers[0].Image}
			if phase == corev1.PodRunning {
				cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.Now()}
			} else {
				cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: int32(code), FinishedAt: metav1.Now()}
			}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
		}
		return a.Client.Status().Update(ctx, &p)
	})
	if err != nil && !apierrors.IsNotFound(err) {
		a.logf("pod %s: set phase %s: %v", name, phase, err)
	}
}

// FormatIndexes writes sorted indexes the way the Job controller does:
// "0-2,5,7-8".
func FormatIndexes(idx []int) string {
	var b strings.Builder
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(idx[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(idx[j]))
		}
		i = j + 1
	}
	return b.String()
}
