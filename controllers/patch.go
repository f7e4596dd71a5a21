package controllers

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// patchLocked applies mutate to obj and writes what it changed as a merge
// patch under an optimistic lock (the patch carries obj's resourceVersion,
// as cluster-api's patch helper does): the API server refuses it with a
// conflict when obj changed since it was read, so a pass that rested on a
// stale cache never overwrites a newer object; the conflict requeues the
// pass (requeueOnConflict). obj is then what the API server stored.
//
// Every locked write of the controller goes through here (labels,
// finalizers, owner references, a Job handed between admissions) or
// through patchStatusLocked (the status).
func patchLocked[T client.Object](ctx context.Context, c client.Client, obj T, mutate func(T)) error {
	return lockedPatch(ctx, c, false, obj, mutate)
}

// patchStatusLocked is patchLocked on the status subresource.
func patchStatusLocked[T client.Object](ctx context.Context, c client.Client, obj T, mutate func(T)) error {
	return lockedPatch(ctx, c, true, obj, mutate)
}

func lockedPatch[T client.Object](ctx context.Context, c client.Client, status bool, obj T, mutate func(T)) error {
	before := obj.DeepCopyObject().(client.Object)
	mutate(obj)
	patch := client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})
	if status {
		return c.Status().Patch(ctx, obj, patch)
	}
	return c.Patch(ctx, obj, patch)
}
