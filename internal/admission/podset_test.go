package admission

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/bulkd/bulkd/api/v1alpha1"
)

func procPod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name),
		Labels: map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedByController}}}
}

func podNames(pods []*corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}

// The pass reads the processor pods from the informer's mirror once it
// has seen the first list, and from a List of the cache until then: a
// pass that counted from a half-filled mirror would admit too many.
func TestAdmissionReadsPodsFromTheInformerMirrorOnceSynced(t *testing.T) {
	listed := procPod("listed")
	c := fake.NewClientBuilder().WithScheme(v1alpha1.NewScheme()).WithObjects(listed).Build()
	a := New(c, Config{}, nil)
	synced := false
	a.podSet = newPodSet()
	a.podSet.synced = func() bool { return synced }

	a.podSet.OnAdd(procPod("p1"), true)
	got, err := a.processorPods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if names := podNames(got); !slices.Equal(names, []string{"listed"}) {
		t.Fatalf("before the mirror synced: %v, want the List's [listed]", names)
	}

	synced = true
	a.podSet.OnAdd(procPod("p2"), false)
	other := procPod("other")
	other.Labels = nil // not a processor pod
	a.podSet.OnAdd(other, false)
	updated := procPod("p1")
	updated.Status.Phase = corev1.PodRunning
	a.podSet.OnUpdate(procPod("p1"), updated)
	a.podSet.OnDelete(toolscache.DeletedFinalStateUnknown{Key: ns + "/p2", Obj: procPod("p2")})
	got, err = a.processorPods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if names := podNames(got); !slices.Equal(names, []string{"p1"}) {
		t.Fatalf("mirror: %v, want [p1]", names)
	}
	if got[0] != updated {
		t.Fatal("the mirror holds an old copy of p1, not the informer's latest object")
	}
}
