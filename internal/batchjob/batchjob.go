// Package batchjob reads what a batch Job and its pods say about their
// shards: the indexes a Job completed or gave up on, whether it ended, and
// a pod's index and end. The BulkJob reconciler (controllers) and the
// admission pass (internal/admission) both read Jobs this way.
package batchjob

import (
	"fmt"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// ParseIndexes reads a Job's completedIndexes or failedIndexes ("1,3-5,7")
// into a set of indexes below n.
func ParseIndexes(s string, n int32) (map[int32]bool, error) {
	out := map[int32]bool{}
	if s == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseInt(lo, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("bad index list %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseInt(hi, 10, 32); err != nil || b < a {
				return nil, fmt.Errorf("bad index list %q", s)
			}
		}
		for i := a; i <= b && i < int64(n); i++ {
			out[int32(i)] = true
		}
	}
	return out, nil
}

// Finished reports whether a Job has its Complete or Failed condition.
func Finished(job *batchv1.Job) bool {
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// Failed reports whether a Job has its Failed condition.
func Failed(job *batchv1.Job) bool {
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// Indexed reports whether a Job is Indexed (a shard Job; a retry Job is
// not).
func Indexed(job *batchv1.Job) bool {
	return job.Spec.CompletionMode != nil && *job.Spec.CompletionMode == batchv1.IndexedCompletion
}

// PodFinished reports whether a pod has ended (succeeded or failed).
func PodFinished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// PodIndex is a pod's completion index (0 when it has none).
func PodIndex(p *corev1.Pod) int {
	i, err := strconv.Atoi(p.Annotations[batchv1.JobCompletionIndexAnnotation])
	if err != nil || i < 0 {
		return 0
	}
	return i
}
