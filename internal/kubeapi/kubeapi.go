// Package kubeapi is `bulkd apiserver`: the HTTP API of `bulkd serve`
// (internal/serve) with the Kubernetes executor (internal/kube) instead of
// in-process workers.
package kubeapi

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/kube"
	"github.com/bulkd/bulkd/internal/serve"
)

// Run is `bulkd apiserver`: the HTTP API of `bulkd serve`, with
// every accepted job run as a BulkJob in kc.Namespace instead of by
// in-process workers. BulkJob status is read through a cache of the
// namespace's BulkJobs.
func Run(ctx context.Context, rc *rest.Config, cfg config.Config, kc config.Kube, log *slog.Logger, stdout io.Writer, ready chan<- string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cl, err := cluster.New(rc, func(o *cluster.Options) {
		o.Scheme = v1alpha1.NewScheme()
		o.Logger = logr.FromSlogHandler(log.Handler())
		o.Cache.DefaultNamespaces = map[string]cache.Config{kc.Namespace: {}}
	})
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	errc := make(chan error, 1)
	go func() { errc <- cl.Start(ctx) }()
	// Start the BulkJob informer now, so status reads find it synced.
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	if _, err := cl.GetCache().GetInformer(sctx, &v1alpha1.BulkJob{}); err != nil {
		return fmt.Errorf("watch BulkJobs in %s: %w", kc.Namespace, err)
	}
	if !cl.GetCache().WaitForCacheSync(sctx) {
		select {
		case err := <-errc:
			return fmt.Errorf("kubernetes cache: %w", err)
		default:
		}
		return fmt.Errorf("watch BulkJobs in %s: cache did not sync", kc.Namespace)
	}
	ex := &kube.Executor{Client: cl.GetClient(), APIReader: cl.GetAPIReader(), Namespace: kc.Namespace, Parallelism: int32(kc.Parallelism)}
	return serve.RunWith(ctx, cfg, log, stdout, ready, serve.Options{Executor: ex, Mode: "kubernetes"})
}
