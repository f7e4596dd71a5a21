package controllers

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/test/builders"
)

// A locked patch of an object read before someone else's write is refused
// (the pass rested on a stale cache) and changes nothing; one of the
// latest version is written, and obj is then what is stored.
func TestPatchLockedRefusesAStaleObject(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(v1alpha1.NewScheme()).WithStatusSubresource(&v1alpha1.BulkJob{}).
		WithObjects(builders.MakeBulkJob(id, ns).Obj()).Build()
	var stale, fresh v1alpha1.BulkJob
	key := client.ObjectKey{Namespace: ns, Name: id}
	if err := c.Get(ctx, key, &stale); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, key, &fresh); err != nil {
		t.Fatal(err)
	}
	if err := patchLocked(ctx, c, &fresh, func(bj *v1alpha1.BulkJob) { bj.Labels = map[string]string{"a": "1"} }); err != nil {
		t.Fatal(err)
	}
	if fresh.ResourceVersion == stale.ResourceVersion {
		t.Fatal("obj is not what was stored (same resourceVersion)")
	}
	err := patchLocked(ctx, c, &stale, func(bj *v1alpha1.BulkJob) { bj.Labels = map[string]string{"b": "2"} })
	if !apierrors.IsConflict(err) {
		t.Fatalf("stale labels patch: %v, want a conflict", err)
	}
	err = patchStatusLocked(ctx, c, &stale, func(bj *v1alpha1.BulkJob) { bj.Status.Phase = v1alpha1.PhaseRunning })
	if !apierrors.IsConflict(err) {
		t.Fatalf("stale status patch: %v, want a conflict", err)
	}
	var got v1alpha1.BulkJob
	if err := c.Get(ctx, key, &got); err != nil {
		t.Fatal(err)
	}
	if got.Labels["a"] != "1" || got.Labels["b"] != "" || got.Status.Phase == v1alpha1.PhaseRunning {
		t.Fatalf("stored %v %q: a stale patch got through", got.Labels, got.Status.Phase)
	}
	if err := patchStatusLocked(ctx, c, &fresh, func(bj *v1alpha1.BulkJob) { bj.Status.Phase = v1alpha1.PhaseRunning }); err != nil {
		t.Fatal(err)
	}
}
