package admission

import (
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bulkd/bulkd/api/v1alpha1"
)

// The admission scheduling gate (v1alpha1.AdmissionGate), as the pass and
// the BulkJob reconciler read and remove it.

func isGate(g corev1.PodSchedulingGate) bool { return g.Name == v1alpha1.AdmissionGate }

// HasGate reports whether a pod waits for its admission.
func HasGate(p *corev1.Pod) bool { return Gated(p.Spec.SchedulingGates) }

// Gated reports whether gates hold the admission gate (a pod's, or a Job's
// pod template's).
func Gated(gates []corev1.PodSchedulingGate) bool { return slices.ContainsFunc(gates, isGate) }

// WithoutGate is gates without the admission gate (nil when none is left,
// which a merge patch writes as the field's removal).
func WithoutGate(gates []corev1.PodSchedulingGate) []corev1.PodSchedulingGate {
	out := slices.DeleteFunc(slices.Clone(gates), isGate)
	if len(out) == 0 {
		return nil
	}
	return out
}

// RemoveGatePatch removes the admission gate from a pod: a JSON patch that
// first tests the gate is where the cache saw it, so a pod changed
// meanwhile is refused rather than wrongly patched; no resourceVersion
// lock, which the scheduler's status writes on the pod would break.
func RemoveGatePatch(p *corev1.Pod) client.Patch {
	i := slices.IndexFunc(p.Spec.SchedulingGates, isGate)
	path := fmt.Sprintf("/spec/schedulingGates/%d", i)
	ops := []map[string]any{
		{"op": "test", "path": path + "/name", "value": v1alpha1.AdmissionGate},
		{"op": "remove", "path": path},
	}
	b, _ := json.Marshal(ops)
	return client.RawPatch(types.JSONPatchType, b)
}
