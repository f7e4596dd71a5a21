package admission

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/bulkd/bulkd/api/v1alpha1"
)

const ns = "bulkd"

// shardJob is the part of a BulkJob's shard Job the pass reads, as the
// controller makes it for admission (controllers' desiredJob and
// admissionControl): Indexed, suspended, its pods gated and labelled
// with the job, account and plan.
func shardJob(bj *v1alpha1.BulkJob) *batchv1.Job {
	labels := map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedByController, v1alpha1.LabelJobID: bj.Spec.JobID}
	for _, k := range []string{v1alpha1.LabelAccount, v1alpha1.LabelPlan} {
		if v := bj.Labels[k]; v != "" {
			labels[k] = v
		}
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: bj.Name, Namespace: bj.Namespace, Labels: labels},
		Spec: batchv1.JobSpec{
			CompletionMode: ptr.To(batchv1.IndexedCompletion),
			Completions:    ptr.To(bj.Spec.Shards),
			Parallelism:    ptr.To(min(bj.Spec.Parallelism, bj.Spec.Shards)),
			Suspend:        ptr.To(true),
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: v1alpha1.AdmissionGate}}}},
		},
	}
}
