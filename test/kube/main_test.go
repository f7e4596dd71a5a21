// Package kube_test runs bulkd's Kubernetes mode end to end against envtest
// (a real kube-apiserver and etcd): the HTTP API in Kubernetes mode creates
// BulkJobs, the controller (with only the RBAC its kubebuilder markers
// grant) runs them as Indexed Jobs, and test/nodeagent stands in for the
// Job controller and kubelet, running the real `bulkd processor` binary for
// each index. Everything shares one envtest, one Redis and one API server.
package kube_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/controllers"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/kubeapi"
	"github.com/bulkd/bulkd/internal/serve"
	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/bulkd/bulkd/test/companyapi"
	"github.com/bulkd/bulkd/test/nodeagent"
)

const (
	namespace   = "bulkd-e2e"
	shardSize   = 10
	batchSize   = 5
	parallelCap = 2
	retention   = 24 * time.Hour
)

// h is the shared environment.
var h *harness

type harness struct {
	env      *envtest.Environment
	cfg      *rest.Config // admin
	k8s      client.Client
	rdb      *redis.Client
	redisURL string
	bin      string
	agent    *nodeagent.Agent
	web      *companyapi.Web
	webURL   string
	apiURL   string        // the API in Kubernetes mode
	apiCfg   config.Config // its configuration
	parts    *serve.Components
	clock    *clock
	log      *slog.Logger

	hookMu sync.Mutex
	hook   func(*nodeagent.Attempt)
}

// clock is the controller's clock; tests move it forward (retention).
type clock struct{ off atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *clock) Advance(d time.Duration) { c.off.Add(int64(d)) }
func (h *harness) setHook(f func(*nodeagent.Attempt)) {
	h.hookMu.Lock()
	h.hook = f
	h.hookMu.Unlock()
}

func TestMain(m *testing.M) {
	flag.Parse()
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test/kube:", err)
		code = 1
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "bulkd-kube-e2e-")
	if err != nil {
		return 1, err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h = &harness{clock: &clock{}}
	var out io.Writer = io.Discard
	if testing.Verbose() {
		out = os.Stderr
	}
	h.log = slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctrl.SetLogger(logr.FromSlogHandler(h.log.Handler()))

	// The processor binary, built once; envtest's control plane.
	var wg sync.WaitGroup
	var buildErr error
	h.bin = filepath.Join(dir, "bulkd")
	wg.Add(1)
	go func() {
		defer wg.Done()
		cmd := exec.Command("go", "build", "-o", h.bin, "github.com/bulkd/bulkd/cmd/bulkd")
		if b, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build bulkd: %v\n%s", err, b)
		}
	}()
	assets, err := envtestAssets()
	if err != nil {
		return 1, err
	}
	h.env = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	if h.cfg, err = h.env.Start(); err != nil {
		return 1, fmt.Errorf("envtest: %w", err)
	}
	defer func() { _ = h.env.Stop() }()
	if h.k8s, err = client.New(h.cfg, client.Options{Scheme: v1alpha1.NewScheme()}); err != nil {
		return 1, err
	}
	rs, err := testredis.StartProcess(dir)
	if err != nil {
		return 1, err
	}
	defer rs.Stop()
	h.redisURL = rs.URL
	h.rdb = redis.NewClient(&redis.Options{Addr: rs.Addr, PoolSize: 32})
	defer h.rdb.Close()
	h.web = companyapi.NewWeb()
	webSrv := httptest.NewServer(h.web)
	defer webSrv.Close()
	h.webURL = webSrv.URL
	wg.Wait()
	if buildErr != nil {
		return 1, buildErr
	}

	if err := h.setupNamespace(ctx); err != nil {
		return 1, err
	}
	stop, err := h.startController(ctx)
	if err != nil {
		return 1, err
	}
	defer stop()
	// The agent stops before envtest does (deferred later, run earlier).
	actx, stopAgent := context.WithCancel(ctx)
	defer stopAgent()
	h.startAgent(actx, out)
	if err := h.startAPI(ctx); err != nil {
		return 1, err
	}
	if err := bulkdtest.ImportCompanies(ctx, h.parts, companies()...); err != nil {
		return 1, err
	}
	return m.Run(), nil
}

// envtestAssets is KUBEBUILDER_ASSETS, or what hack/envtest.sh prints (it
// returns at once when the binaries are cached).
func envtestAssets() (string, error) {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d, nil
	}
	var stdout bytes.Buffer
	cmd := exec.Command(filepath.Join("..", "..", "hack", "envtest.sh"))
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/envtest.sh: %w", err)
	}
	return strings.TrimSpace(stdout.String()), nil
}

// processorConfig is the ConfigMap the processor pods load: the company
// settings that decide answers (redirect checks through the fake web) and
// a small batch so a shard records its answers in several steps.
func processorConfig() map[string]string {
	return map[string]string{
		"BULKD_LOG_FORMAT":      "text",
		"BULKD_REDIRECT_CHECKS": "true",
		"BULKD_HTTP_PROXY":      h.webURL,
		"BULKD_BATCH_SIZE":      fmt.Sprint(batchSize),
	}
}

func (h *harness) setupNamespace(ctx context.Context) error {
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bulkd-redis", Namespace: namespace},
			StringData: map[string]string{"redis-url": h.redisURL}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bulkd-processor", Namespace: namespace}, Data: processorConfig()},
	}
	for _, o := range objs {
		if err := h.k8s.Create(ctx, o); err != nil {
			return fmt.Errorf("create %T: %w", o, err)
		}
	}
	return nil
}

// userWithRole makes an envtest user bound, in the namespace, to the given
// cluster role (and a role for its other rules), and returns its config:
// the components run with the least privilege they are documented to need.
func (h *harness) userWithRole(ctx context.Context, name string, clusterRole *rbacv1.ClusterRole, extra []rbacv1.PolicyRule) (*rest.Config, error) {
	return h.userWithRoleIn(ctx, namespace, name, clusterRole, extra)
}

// userWithRoleIn is userWithRole in namespace ns (a cluster role that
// exists already is reused).
func (h *harness) userWithRoleIn(ctx context.Context, namespace, name string, clusterRole *rbacv1.ClusterRole, extra []rbacv1.PolicyRule) (*rest.Config, error) {
	u, err := h.env.AddUser(envtest.User{Name: name}, nil)
	if err != nil {
		return nil, err
	}
	subj := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}}
	var objs []client.Object
	if clusterRole != nil {
		objs = append(objs, clusterRole, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Subjects: subj,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole.Name}})
	}
	if len(extra) > 0 {
		objs = append(objs, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name + "-extra", Namespace: namespace}, Rules: extra},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-extra", Namespace: namespace}, Subjects: subj,
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name + "-extra"}})
	}
	for _, o := range objs {
		if err := h.k8s.Create(ctx, o); err != nil {
			if _, cluster := o.(*rbacv1.ClusterRole); cluster && apierrors.IsAlreadyExists(err) {
				continue
			}
			return nil, fmt.Errorf("create %T: %w", o, err)
		}
	}
	return u.Config(), nil
}

// startController runs `bulkd controller`'s manager in-process, as a user
// holding only config/rbac/role.yaml (generated from the kubebuilder
// markers) and the leader-election rules.
func (h *harness) startController(ctx context.Context) (func(), error) {
	b, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "role.yaml"))
	if err != nil {
		return nil, err
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(b, &role); err != nil {
		return nil, err
	}
	cfg, err := h.userWithRole(ctx, "bulkd-controller", &role, []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
	})
	if err != nil {
		return nil, err
	}
	bcfg := config.Default()
	bcfg.RedisURL = h.redisURL
	proc, err := serve.NewProcessor(bcfg, h.rdb, h.log)
	if err != nil {
		return nil, err
	}
	opts := controllers.DefaultOptions()
	opts.Image = "localhost/bulkd:e2e"
	opts.ServiceAccount = "bulkd-processor"
	opts.RedisSecretName, opts.RedisSecretKey = "bulkd-redis", "redis-url"
	opts.ConfigMapName = "bulkd-processor"
	opts.MaxParallelism = parallelCap
	opts.BackoffLimitPerIndex = 2
	opts.ProcessorTimeout = time.Minute
	opts.Retention = retention
	// No fast polling: the default resync (a minute) is longer than any
	// test here, so BulkJobs move on the processors' progress
	// announcements and their Jobs' events, as in production.
	// Email verification pods get their own settings: one pod per job at
	// once, SMTP egress nodes, short retry delays, and the mail world's
	// address from a ConfigMap of their own (verification_test.go).
	// Email lookup pods talk SMTP too: the mail world (and their retry
	// delays) come from their own ConfigMap (lookup_test.go).
	opts.Families = map[v1alpha1.Family]controllers.FamilyProfile{
		v1alpha1.FamilyEmailVerification: {
			ParallelismCap: 1,
			ConfigMap:      verifyConfigMap,
			Env:            map[string]string{"BULKD_VERIFY_RETRY_DELAYS": "1s,1s,1s,1s", "BULKD_SMTP_COMMAND_TIMEOUT": "2s"},
			NodeSelector:   map[string]string{"bulkd.io/egress": "smtp"},
		},
		v1alpha1.FamilyEmailLookup: {
			ConfigMap:    lookupConfigMap,
			Env:          map[string]string{"BULKD_SMTP_COMMAND_TIMEOUT": "2s"},
			NodeSelector: map[string]string{"bulkd.io/egress": "smtp"},
		},
	}
	mgr, err := controllers.NewManager(cfg, controllers.ManagerOptions{
		Namespace:   namespace,
		MetricsAddr: "0",
		HealthAddr:  "0",
		LeaderElect: true,
		Concurrency: 4,
		Reconciler:  opts,
		Data:        proc.Store,
		Shards:      proc,
		Logger:      logr.FromSlogHandler(h.log.Handler()),
		Now:         h.clock.Now,
	})
	if err != nil {
		return nil, err
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	select {
	case <-mgr.Elected():
	case err := <-done:
		cancel()
		return nil, fmt.Errorf("controller manager: %w", err)
	case <-time.After(30 * time.Second):
		cancel()
		return nil, errors.New("controller manager not elected after 30s")
	}
	return func() { cancel(); <-done }, nil
}

func (h *harness) startAgent(ctx context.Context, out io.Writer) {
	h.agent = nodeagent.New(h.k8s, namespace, map[string]string{"bulkd": h.bin})
	h.agent.BaseEnv = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir()}
	h.agent.Output = out
	if testing.Verbose() {
		h.agent.Logf = func(f string, a ...any) { h.log.Info(fmt.Sprintf(f, a...)) }
	}
	h.agent.BeforeStart = func(a *nodeagent.Attempt) {
		h.hookMu.Lock()
		f := h.hook
		h.hookMu.Unlock()
		if f != nil {
			f(a)
		}
	}
	go h.agent.Run(ctx)
}

// apiConfig is the configuration of the API servers of both modes: the
// standalone comparison runs the same shard size, batch size and website
// checks as the processors.
func apiConfig() config.Config {
	c := config.Default()
	c.Listen = "127.0.0.1:0"
	c.MetricsListen = "0" // TestSubcommands checks the metrics listener
	c.RedisURL = h.redisURL
	c.LogFormat = "text"
	c.ShardSize = shardSize
	c.BatchSize = batchSize
	c.RateLimit = 1000
	c.RedirectChecks = true
	c.HTTPProxy = h.webURL
	c.Retention = retention
	c.InstanceID = "e2e"
	return c
}

// startAPI runs `bulkd apiserver` in-process, as a user with only the
// BulkJob rights the API server is documented to need.
func (h *harness) startAPI(ctx context.Context) error {
	cfg, err := h.userWithRole(ctx, "bulkd-apiserver", nil, []rbacv1.PolicyRule{
		{APIGroups: []string{"bulkd.io"}, Resources: []string{"bulkjobs"}, Verbs: []string{"create", "get", "list", "watch", "delete"}},
	})
	if err != nil {
		return err
	}
	h.apiCfg = apiConfig()
	kc := config.DefaultKube()
	kc.Namespace = namespace
	kc.Parallelism = 4
	ready := make(chan string, 1)
	errc := make(chan error, 1)
	go func() { errc <- kubeapi.Run(ctx, cfg, h.apiCfg, kc, h.log, io.Discard, ready) }()
	select {
	case addr := <-ready:
		h.apiURL = "http://" + addr
	case err := <-errc:
		return fmt.Errorf("apiserver: %w", err)
	case <-time.After(30 * time.Second):
		return errors.New("apiserver not ready after 30s")
	}
	// Accounts, balances and company data are set up directly in Redis,
	// through the same components.
	h.parts, err = serve.Build(h.apiCfg, h.rdb, h.log)
	return err
}
