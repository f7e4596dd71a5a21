package chart

// The controller's right to patch pods (issue 26 item 5): RBAC lets it
// patch any pod of its namespace, the chart's ValidatingAdmissionPolicy
// lets it do one thing, remove the admission scheduling gate from a
// processor pod it manages. Here the policy runs in envtest's real API
// server, and requests are sent as the controller's service account
// (impersonation).

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bulkd/bulkd/api/v1alpha1"
)

func TestControllerMayOnlyUngateItsPods(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	const ns = "chart-podpolicy"
	ensureNamespace(t, c, ns)
	r, err := render(t, "bulkd", ns, parseValues(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	// The policy, and the controller's Role (its right to patch pods).
	for _, kind := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "Role", "RoleBinding"} {
		var objs []*unstructured.Unstructured
		for _, o := range r.ofKind(kind) {
			if o.GetName() != "bulkd-controller-leader-election" {
				objs = append(objs, o)
			}
		}
		if kind == "Role" || kind == "RoleBinding" {
			objs = slices.DeleteFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetName() != "bulkd-controller" })
		}
		if len(objs) != 1 {
			t.Fatalf("%d %s, want 1: %s", len(objs), kind, r.names())
		}
		o := objs[0].DeepCopy()
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("chart-test"), client.ForceOwnership); err != nil {
			t.Fatalf("apply %s: %v", kind, err)
		}
		t.Cleanup(func() { _ = c.Delete(ctx, objs[0].DeepCopy()) })
	}
	if r2, _ := render(t, "bulkd", ns, parseValues(t, `rbac: {controllerPodPolicy: false}`)); len(r2.ofKind("ValidatingAdmissionPolicy")) != 0 {
		t.Error("rbac.controllerPodPolicy=false still renders the policy")
	}

	pod := func(name string, labels map[string]string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Spec: corev1.PodSpec{
				SchedulingGates: []corev1.PodSchedulingGate{{Name: "other.example/gate"}, {Name: v1alpha1.AdmissionGate}},
				Containers:      []corev1.Container{{Name: "c", Image: "registry.example/bulkd:1"}},
			},
		}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(ctx, p) })
		return p
	}
	processor := map[string]string{v1alpha1.LabelName: "bulkd", v1alpha1.LabelComponent: "processor", v1alpha1.LabelManagedBy: v1alpha1.ManagedByController}
	own := func(name string) *corev1.Pod { return pod(name, processor) }
	stranger := pod("someone-elses", map[string]string{"app": "web"})

	// The controller: its service account, by impersonation.
	cfg := rest.CopyConfig(k8sConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":bulkd-controller"}
	asController, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	jsonPatch := func(ops ...map[string]any) client.Patch {
		b, _ := json.Marshal(ops)
		return client.RawPatch(types.JSONPatchType, b)
	}
	removeGate := jsonPatch(map[string]any{"op": "test", "path": "/spec/schedulingGates/1/name", "value": v1alpha1.AdmissionGate},
		map[string]any{"op": "remove", "path": "/spec/schedulingGates/1"})

	// The policy takes effect within a few seconds of its creation: until
	// a change it must refuse is refused, wait.
	probe := own("probe")
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := asController.Patch(ctx, probe, jsonPatch(map[string]any{"op": "add", "path": "/metadata/labels/x", "value": "y"}))
		if err != nil && strings.Contains(err.Error(), "bulkd controller") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the policy never refused a label change by the controller (last: %v)", err)
		}
		time.Sleep(200 * time.Millisecond)
		if err == nil { // it went through: undo for the next try
			_ = c.Patch(ctx, probe, jsonPatch(map[string]any{"op": "remove", "path": "/metadata/labels/x"}))
		}
	}

	refused := map[string]struct {
		pod   *corev1.Pod
		patch client.Patch
	}{
		"a label":           {own("p-label"), jsonPatch(map[string]any{"op": "replace", "path": "/metadata/labels/app.kubernetes.io~1component", "value": "x"})},
		"an annotation":     {own("p-annotation"), jsonPatch(map[string]any{"op": "add", "path": "/metadata/annotations", "value": map[string]string{"a": "b"}})},
		"the image":         {own("p-image"), jsonPatch(map[string]any{"op": "replace", "path": "/spec/containers/0/image", "value": "evil.example/x"})},
		"another gate":      {own("p-othergate"), jsonPatch(map[string]any{"op": "remove", "path": "/spec/schedulingGates/0"})},
		"the node selector": {own("p-node"), jsonPatch(map[string]any{"op": "add", "path": "/spec/nodeSelector", "value": map[string]string{"kubernetes.io/hostname": "n1"}})},
		"the deadline":      {own("p-deadline"), jsonPatch(map[string]any{"op": "add", "path": "/spec/activeDeadlineSeconds", "value": 1})},
		// (Adding a gate or a toleration the API server refuses itself.)
		"the gate and a label":      {own("p-both"), jsonPatch(map[string]any{"op": "remove", "path": "/spec/schedulingGates/1"}, map[string]any{"op": "add", "path": "/metadata/labels/x", "value": "y"})},
		"another pod's gate":        {stranger, removeGate},
		"another pod's annotations": {stranger, jsonPatch(map[string]any{"op": "add", "path": "/metadata/annotations", "value": map[string]string{"a": "b"}})},
	}
	for what, tc := range refused {
		if err := asController.Patch(ctx, tc.pod, tc.patch); err == nil || !strings.Contains(err.Error(), "bulkd controller") {
			t.Errorf("the controller changing %s: %v, want refused by the policy", what, err)
		}
	}

	// What it is there for: removing its gate from its own pod.
	p := own("p-ungate")
	if err := asController.Patch(ctx, p, removeGate); err != nil {
		t.Fatalf("the controller removing the admission gate from its pod: %v", err)
	}
	var got corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(p), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.SchedulingGates) != 1 || got.Spec.SchedulingGates[0].Name != "other.example/gate" {
		t.Errorf("gates after the removal: %v", got.Spec.SchedulingGates)
	}
	// Others than the controller are not matched.
	if err := c.Patch(ctx, stranger, jsonPatch(map[string]any{"op": "add", "path": "/metadata/labels/x", "value": "y"})); err != nil {
		t.Errorf("an admin's change refused: %v", err)
	}
}
