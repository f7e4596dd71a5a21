package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cluster"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/serve"
)

// RESTConfig is the Kubernetes client configuration: the kubeconfig file
// when one is given, else in-cluster or $KUBECONFIG.
//
// Either way without client-go's client-side rate limit, as
// ctrl.GetConfig gives it: the API server's priority and fairness is the
// limit. A kubeconfig file alone would get client-go's default of 5
// requests a second (burst 10): a controller started with --kubeconfig
// (hack/kube-bench does) would be paced far below one in a pod.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		return ctrl.GetConfig()
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	if rc.QPS == 0 {
		rc.QPS = -1
	}
	return rc, nil
}

// RunAPIServer is `bulkd apiserver`: the HTTP API of `bulkd serve`, with
// every accepted job run as a BulkJob in kc.Namespace instead of by
// in-process workers. BulkJob status is read through a cache of the
// namespace's BulkJobs.
func RunAPIServer(ctx context.Context, rc *rest.Config, cfg config.Config, kc config.Kube, log *slog.Logger, stdout io.Writer, ready chan<- string) error {
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
	ex := &Executor{Client: cl.GetClient(), APIReader: cl.GetAPIReader(), Namespace: kc.Namespace, Parallelism: int32(kc.Parallelism)}
	return serve.RunWith(ctx, cfg, log, stdout, ready, serve.Options{Executor: ex, Mode: "kubernetes"})
}

// ParseResources reads a container's resources as JSON:
// {"requests":{"cpu":"250m","memory":"256Mi"},"limits":{"memory":"1Gi"}}.
func ParseResources(s string) (corev1.ResourceRequirements, error) {
	var rr corev1.ResourceRequirements
	if strings.TrimSpace(s) == "" {
		return rr, nil
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rr); err != nil {
		return rr, fmt.Errorf("resources %q: %w", s, err)
	}
	return rr, nil
}
