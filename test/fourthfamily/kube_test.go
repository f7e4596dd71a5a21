package fourthfamily_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/controllers"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/kube"
	"github.com/bulkd/bulkd/internal/serve"
	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/bulkd/bulkd/test/fourthfamily"
	"github.com/bulkd/bulkd/test/nodeagent"
)

const kubeNS = "phone-e2e"

// TestPhoneLookupOnKubernetes runs the fourth family in Kubernetes mode on
// envtest: the API (with the family registered) creates a BulkJob whose
// spec.family is phone_lookup (the CRD names no family), the controller
// (whose processor registry knows the family) runs it as an Indexed Job,
// test/nodeagent runs each index with cmd/bulkd-phone (`bulkd processor`
// with the family), and the results come back over the API. A shard that
// keeps failing is answered with the family's own error outcome, and the
// BulkJob's ShardsFailed condition names it.
func TestPhoneLookupOnKubernetes(t *testing.T) {
	if testing.Short() {
		t.Skip("envtest")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	var out io.Writer = io.Discard
	if testing.Verbose() {
		out = os.Stderr
	}
	log := slog.New(slog.NewTextHandler(out, nil))

	bin := filepath.Join(dir, "bulkd-phone")
	if b, err := exec.Command("go", "build", "-o", bin, "github.com/bulkd/bulkd/test/fourthfamily/cmd/bulkd-phone").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, b)
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		var stdout bytes.Buffer
		cmd := exec.Command(filepath.Join("..", "..", "hack", "envtest.sh"))
		cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("hack/envtest.sh: %v", err)
		}
		assets = strings.TrimSpace(stdout.String())
	}
	te := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true, BinaryAssetsDirectory: assets}
	rc, err := te.Start()
	if err != nil {
		t.Fatalf("envtest: %v", err)
	}
	t.Cleanup(func() { _ = te.Stop() })
	k8s, err := client.New(rc, client.Options{Scheme: v1alpha1.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	rdb, rs := testredis.Client(t)
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kubeNS}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bulkd-redis", Namespace: kubeNS}, StringData: map[string]string{"redis-url": rs.URL}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bulkd-processor", Namespace: kubeNS}, Data: map[string]string{"BULKD_LOG_FORMAT": "text"}},
	} {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	// The controller, with the processor registry the family is in.
	cfg := config.Default()
	cfg.RedisURL = rs.URL
	cfg.ShardSize = 2
	cfg.RedirectChecks = false
	proc, err := serve.NewProcessor(cfg, rdb, log, fourthfamily.Extra(&fourthfamily.Family{}))
	if err != nil {
		t.Fatal(err)
	}
	opts := controllers.DefaultOptions()
	opts.Image = "localhost/bulkd:e2e"
	opts.ServiceAccount = "bulkd-processor"
	opts.RedisSecretName, opts.RedisSecretKey = "bulkd-redis", "redis-url"
	opts.ConfigMapName = "bulkd-processor"
	opts.BackoffLimitPerIndex = 1
	opts.ProcessorTimeout = time.Minute
	mgr, err := controllers.NewManager(rc, controllers.ManagerOptions{Namespace: kubeNS, MetricsAddr: "0", HealthAddr: "0",
		Concurrency: 2, Reconciler: opts, Data: proc.Store, Shards: proc, Logger: logr.FromSlogHandler(log.Handler())})
	if err != nil {
		t.Fatal(err)
	}
	mctx, stopMgr := context.WithCancel(ctx)
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Start(mctx) }()
	t.Cleanup(func() { stopMgr(); <-mgrDone })

	// The kubelet stand-in runs each index with the family's processor;
	// PHONE_FAIL makes the shards holding 15550199 fail.
	agent := nodeagent.New(k8s, kubeNS, map[string]string{"bulkd": bin})
	agent.BaseEnv = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "PHONE_FAIL=15550199"}
	agent.Output = out
	actx, stopAgent := context.WithCancel(ctx)
	agentDone := make(chan struct{})
	go func() { agent.Run(actx); close(agentDone) }()
	t.Cleanup(func() { stopAgent(); <-agentDone })

	// The API in Kubernetes mode: a BulkJob per job.
	ex := &kube.Executor{Client: k8s, Namespace: kubeNS, Parallelism: 2}
	parts, err := serve.BuildWith(cfg, rdb, log, serve.Options{Executor: ex, Mode: "kubernetes",
		Families: []serve.Extra{fourthfamily.Extra(&fourthfamily.Family{})}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(parts.API)
	t.Cleanup(ts.Close)
	e := &env{t: t, url: ts.URL, parts: parts, c: &http.Client{Timeout: 30 * time.Second}}
	_, key := bulkdtest.NewAccount(t, parts, "phone", credits.Whole(10))

	run := func(body string) (string, fourthfamily.Status, *v1alpha1.BulkJob) {
		t.Helper()
		st, b := e.do("POST", "/v1/phone-lookup/bulk", key, body)
		if st != http.StatusOK {
			t.Fatalf("submit: %d %s", st, b)
		}
		var sub struct {
			JobID string `json:"job_id"`
		}
		decode(t, b, &sub)
		var status fourthfamily.Status
		bulkdtest.Eventually(t, 90*time.Second, 200*time.Millisecond, "the job completes", func() bool {
			st, b := e.do("GET", "/v1/phone-lookup/bulk/"+sub.JobID, key, "")
			if st != http.StatusOK {
				t.Fatalf("status: %d %s", st, b)
			}
			decode(t, b, &status)
			return status.Status == "completed"
		})
		var list v1alpha1.BulkJobList
		if err := k8s.List(ctx, &list, client.InNamespace(kubeNS)); err != nil {
			t.Fatal(err)
		}
		for i := range list.Items {
			if list.Items[i].Spec.JobID == sub.JobID {
				bj := &list.Items[i]
				bulkdtest.Eventually(t, 30*time.Second, 200*time.Millisecond, "the BulkJob completes", func() bool {
					if err := k8s.Get(ctx, client.ObjectKeyFromObject(bj), bj); err != nil {
						t.Fatal(err)
					}
					return bj.Status.Phase == v1alpha1.PhaseCompleted
				})
				return sub.JobID, status, bj
			}
		}
		t.Fatalf("no BulkJob for job %s", sub.JobID)
		return "", status, nil
	}

	t.Run("succeeds", func(t *testing.T) {
		id, status, bj := run(`{"input":[{"phone":"15550100"},{"phone":"15550101"},{"phone":"15550102"},{"phone":"42"}]}`)
		if bj.Spec.Family != v1alpha1.Family(fourthfamily.Name) || bj.Labels[v1alpha1.LabelFamily] != fourthfamily.Name || bj.Spec.Shards != 2 {
			t.Fatalf("BulkJob spec %+v labels %v", bj.Spec, bj.Labels)
		}
		if status.Summary["found"] != 3 || status.Summary["not_found"] != 1 {
			t.Fatalf("status %+v", status)
		}
		st, b := e.do("GET", "/v1/phone-lookup/bulk/"+id+"/results", key, "")
		if st != http.StatusOK || !strings.Contains(string(b), `{"phone":"15550101","status":"found","carrier":"Initech Telecom","line_type":"landline"}`) {
			t.Fatalf("results: %d %s", st, b)
		}
	})
	t.Run("a failed shard is answered with the family's error outcome", func(t *testing.T) {
		// Shards of two: the second shard (15550199 and 15550102) fails.
		id, status, bj := run(`{"input":[{"phone":"15550100"},{"phone":"42"},{"phone":"15550199"},{"phone":"15550102"}]}`)
		if status.Summary[fourthfamily.OutUnverified] != 2 || status.Summary["found"] != 1 || status.Summary["not_found"] != 1 {
			t.Fatalf("status %+v", status)
		}
		var cond *metav1.Condition
		for i := range bj.Status.Conditions {
			if bj.Status.Conditions[i].Type == v1alpha1.ConditionShardsFailed {
				cond = &bj.Status.Conditions[i]
			}
		}
		if cond == nil || !strings.Contains(cond.Message, "answered as "+fourthfamily.OutUnverified) {
			t.Fatalf("ShardsFailed condition %+v (conditions %+v)", cond, bj.Status.Conditions)
		}
		st, b := e.do("GET", "/v1/phone-lookup/bulk/"+id+"/results", key, "")
		var page struct {
			Results []fourthfamily.Row `json:"results"`
		}
		if st != http.StatusOK {
			t.Fatalf("results: %d %s", st, b)
		}
		decode(t, b, &page)
		if got := fmt.Sprint(page.Results); !strings.Contains(got, "{15550199 unverified  }") {
			t.Fatalf("results %s", got)
		}
	})
}
