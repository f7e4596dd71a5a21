//go:build e2ecluster

// Package cluster_test is bulkd's end-to-end suite on a real single-node
// Kubernetes cluster (hack/local-cluster, `make e2e`): the chart is
// installed with the local image, the API and the controller run in pods,
// every BulkJob runs as an Indexed Job of real processor pods. The suite runs
// inside the cluster's network namespace and talks HTTP to the in-cluster
// API (its Service's ClusterIP, through kube-proxy) and to the cluster with
// client-go. hack/local-cluster/e2e.sh sets:
//
//	E2E_KUBECONFIG  admin kubeconfig
//	E2E_NAMESPACE   the release namespace
//	E2E_REDIS_URL   the Redis every bulkd component uses
//	E2E_PROXY_ADDR  where this suite serves the stand-in for every website
//	                (the chart's BULKD_HTTP_PROXY points there)
//	E2E_TIMINGS     file the suite appends its timings to (optional)
//	E2E_VERIFY_CONFIGMAP  the email_verification family's ConfigMap, which
//	                the suite creates (default bulkd-verify-e2e)
//	E2E_LOOKUP_CONFIGMAP  the email_lookup family's ConfigMap, which the
//	                suite creates (default bulkd-lookup-e2e)
//	E2E_NODE_IP     the node's address, where hostNetwork pods are
//	                (default 10.254.0.1)
//	E2E_SPAMD_PIDFILE  the pid file of the spamd the chart's API uses
//	                (spam_test.go freezes and thaws it)
package cluster_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/serve"
	"github.com/bulkd/bulkd/test/companyapi"
)

const release = "bulkd"

var h *harness

type harness struct {
	ns       string
	cfg      *rest.Config
	k8s      client.Client
	cs       kubernetes.Interface
	rdb      *redis.Client
	redisURL string
	parts    *serve.Components
	web      *companyapi.Web
	proxyURL string
	apiURL   string
	timings  string
}

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test/cluster:", err)
		code = 1
	}
	os.Exit(code)
}

func need(name string) (string, error) {
	v := os.Getenv(name)
	if v == "" {
		return "", fmt.Errorf("%s is not set: run the suite with `make e2e` (hack/local-cluster/e2e.sh)", name)
	}
	return v, nil
}

func run(m *testing.M) (int, error) {
	h = &harness{timings: os.Getenv("E2E_TIMINGS")}
	kubeconfig, err := need("E2E_KUBECONFIG")
	if err != nil {
		return 1, err
	}
	if h.ns, err = need("E2E_NAMESPACE"); err != nil {
		return 1, err
	}
	if h.redisURL, err = need("E2E_REDIS_URL"); err != nil {
		return 1, err
	}
	proxyAddr, err := need("E2E_PROXY_ADDR")
	if err != nil {
		return 1, err
	}
	if h.cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
		return 1, err
	}
	h.cfg.QPS, h.cfg.Burst = 50, 100
	if h.k8s, err = client.New(h.cfg, client.Options{Scheme: v1alpha1.NewScheme()}); err != nil {
		return 1, err
	}
	if h.cs, err = kubernetes.NewForConfig(h.cfg); err != nil {
		return 1, err
	}
	opts, err := redis.ParseURL(h.redisURL)
	if err != nil {
		return 1, err
	}
	opts.PoolSize = 16
	h.rdb = redis.NewClient(opts)
	defer h.rdb.Close()

	// The stand-in for every website, where the pods' BULKD_HTTP_PROXY points.
	ln, err := net.Listen("tcp", proxyAddr)
	if err != nil {
		return 1, fmt.Errorf("proxy listen: %w", err)
	}
	h.web = companyapi.NewWeb()
	srv := &http.Server{Handler: h.web, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	h.proxyURL = "http://" + proxyAddr

	// Accounts, billing, company data and the job store on the cluster's Redis.
	cfg := refConfig()
	cfg.RedisURL = h.redisURL
	if h.parts, err = serve.Build(cfg, h.rdb, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		return 1, err
	}
	if err := bulkdtest.ImportCompanies(context.Background(), h.parts, companies()...); err != nil {
		return 1, err
	}
	if h.apiURL, err = findAPI(); err != nil {
		return 1, err
	}
	fmt.Fprintln(os.Stderr, "test/cluster: bulkd API at", h.apiURL)
	return m.Run(), nil
}

// refConfig is the configuration the chart is installed with (e2e.sh), as
// far as results depend on it; the standalone reference run uses it too.
func refConfig() config.Config {
	c := config.Default()
	c.ShardSize = 2000
	c.BatchSize = 5
	c.RateLimit = 1000
	c.RedirectChecks = true
	c.HTTPProxy = h.proxyURL
	c.OutboundAllowCIDRs = "127.0.0.0/8,10.254.0.1/32" // e2e.sh's outbound.allowCIDRs
	return c
}

// findAPI returns the URL of the in-cluster API: the Service's ClusterIP
// (kube-proxy), else the first ready pod's IP.
func findAPI() (string, error) {
	ctx := context.Background()
	c := &http.Client{Timeout: 3 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		svc, err := h.cs.CoreV1().Services(h.ns).Get(ctx, release+"-apiserver", metav1.GetOptions{})
		if err == nil && svc.Spec.ClusterIP != "" && len(svc.Spec.Ports) > 0 {
			u := fmt.Sprintf("http://%s", net.JoinHostPort(svc.Spec.ClusterIP, fmt.Sprint(svc.Spec.Ports[0].Port)))
			if res, err := c.Get(u + "/readyz"); err == nil {
				res.Body.Close()
				if res.StatusCode == http.StatusOK {
					return u, nil
				}
			}
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	pods, err := h.cs.CoreV1().Pods(h.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=apiserver"})
	if err != nil {
		return "", err
	}
	for _, p := range pods.Items {
		if p.Status.PodIP != "" && podReady(&p) {
			fmt.Fprintln(os.Stderr, "test/cluster: the Service's ClusterIP does not answer; using pod", p.Name)
			return fmt.Sprintf("http://%s:8080", p.Status.PodIP), nil
		}
	}
	return "", fmt.Errorf("no reachable bulkd API in namespace %s", h.ns)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// timing records a measured duration in the test log and the timings file.
func timing(t *testing.T, what string, d time.Duration) {
	t.Helper()
	t.Logf("TIMING %s: %v", what, d.Round(10*time.Millisecond))
	if h.timings == "" {
		return
	}
	f, err := os.OpenFile(h.timings, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "  %s: %s\n", what, d.Round(10*time.Millisecond))
}
