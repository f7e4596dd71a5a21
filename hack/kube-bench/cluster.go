package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/kube"
	"github.com/bulkd/bulkd/internal/testredis"
)

// The world the bench runs in: the control plane, KWOK and its nodes,
// Redis with the engine and the stub processor, and the controller. Each
// start function registers what it started for stopping in b.stops or
// b.procs.

// startControlPlane starts kube-apiserver and etcd (envtest's), writes an
// admin kubeconfig, and starts kube-controller-manager (the Job controller
// only) and kube-scheduler; it returns the kubeconfig's path.
func (b *bench) startControlPlane() (string, error) {
	o := b.o
	b.step("starting kube-apiserver and etcd (%s)", o.assets)
	env := &envtest.Environment{CRDDirectoryPaths: []string{o.crds}, ErrorIfCRDPathMissing: true, BinaryAssetsDirectory: o.assets}
	if o.apiserverProfile > 0 {
		env.ControlPlane.GetAPIServer().Configure().Set("profiling", "true")
	}
	admin, err := env.Start()
	if err != nil {
		return "", fmt.Errorf("envtest: %w", err)
	}
	b.stops = append(b.stops, func() { _ = env.Stop() })
	b.admin = admin
	b.admin.QPS, b.admin.Burst = -1, 0
	if b.k8s, err = client.New(b.admin, client.Options{Scheme: v1alpha1.NewScheme()}); err != nil {
		return "", err
	}
	user, err := env.AddUser(envtest.User{Name: "kube-bench", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", err
	}
	kcBytes, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	kubeconfig := filepath.Join(o.dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kcBytes, 0o600); err != nil {
		return "", err
	}
	if o.admissionOnly {
		return kubeconfig, nil
	}
	b.step("starting kube-controller-manager (Job controller) and kube-scheduler")
	if err := b.procs.start(o.dir, "kube-controller-manager", filepath.Join(o.clusterBins, "kube-controller-manager"),
		"--kubeconfig", kubeconfig, "--controllers", "job-controller", "--leader-elect=false", "--secure-port=0",
		"--kube-api-qps=1000", "--kube-api-burst=2000", "--concurrent-job-syncs=20"); err != nil {
		return "", err
	}
	schedCfg := filepath.Join(o.dir, "scheduler.yaml")
	if err := os.WriteFile(schedCfg, fmt.Appendf(nil, `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: 1000
  burst: 2000
leaderElection:
  leaderElect: false
`, kubeconfig), 0o644); err != nil {
		return "", err
	}
	return kubeconfig, b.procs.start(o.dir, "kube-scheduler", filepath.Join(o.clusterBins, "kube-scheduler"), "--config", schedCfg, "--secure-port=0")
}

// startKWOK starts KWOK with the bench's stages and makes its nodes.
func (b *bench) startKWOK(ctx context.Context, kubeconfig string) error {
	o := b.o
	stagesT, err := os.ReadFile(o.stages)
	if err != nil {
		return err
	}
	stages := filepath.Join(o.dir, "stages.yaml")
	if err := os.WriteFile(stages, []byte(strings.ReplaceAll(string(stagesT), "__POD_MILLIS__", strconv.Itoa(int(o.podSeconds*1000)))), 0o644); err != nil {
		return err
	}
	// KWOK only writes these addresses into the fake objects' status; no
	// traffic goes to them. Loopback, so nothing outside looks addressed.
	// No node leases: nothing here marks a node NotReady (no node
	// lifecycle controller), and 1,000 leases renewed every 10 s would
	// be 100 writes a second of this 2-core machine's API server that a
	// real cluster's kubelets make too but that tell nothing of bulkd.
	if err := b.procs.start(o.dir, "kwok", o.kwok, "--kubeconfig", kubeconfig, "--config", stages,
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--cidr=127.128.0.1/12", "--node-ip=127.127.0.1", "--server-address=127.0.0.1:0", "--node-lease-duration-seconds=0"); err != nil {
		return err
	}
	b.step("creating %d KWOK nodes", o.nodes)
	return b.createNodes(ctx)
}

// startEngine starts Redis, makes the namespace and its objects, and the
// engine and stub processor on them; it returns Redis' URL.
func (b *bench) startEngine(ctx context.Context) (string, error) {
	rdir := filepath.Join(b.o.dir, "redis")
	if err := os.MkdirAll(rdir, 0o755); err != nil {
		return "", err
	}
	rs, err := testredis.StartProcess(rdir)
	if err != nil {
		return "", err
	}
	b.stops = append(b.stops, rs.Stop)
	b.rdb = redis.NewClient(&redis.Options{Addr: rs.Addr, PoolSize: 64, DialTimeout: 2 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	b.stops = append(b.stops, func() { _ = b.rdb.Close() })
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "bulkd-processor", Namespace: namespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: namespace}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bulkd-redis", Namespace: namespace}, StringData: map[string]string{"redis-url": rs.URL}},
	} {
		if err := b.k8s.Create(ctx, obj); err != nil {
			return "", fmt.Errorf("create %T: %w", obj, err)
		}
	}
	bl := billing.New(b.rdb, nil)
	store := jobs.NewStore(b.rdb, bl)
	b.accts = accounts.NewStore(b.rdb, nil)
	b.engine = jobs.NewEngine(store, bl, &kube.Executor{Client: b.k8s, Namespace: namespace, Parallelism: 8}, b.log)
	b.engine.ShardSize = shardRows
	b.proc = jobs.NewProcessor(store, map[string]jobs.Answerer{"company_enrichment": instant{}}, b.log)
	return rs.URL, b.watch(ctx)
}

// startController starts the real `bulkd controller` and waits for its
// metrics.
func (b *bench) startController(ctx context.Context, kubeconfig, redisURL string) error {
	o := b.o
	port, err := testredis.FreePort()
	if err != nil {
		return err
	}
	b.metricsAddr = fmt.Sprintf("127.0.0.1:%d", port)
	b.step("starting bulkd controller (--max-running-shards %d)", o.maxRunning)
	if err := b.procs.start(o.dir, "bulkd-controller", o.bin, "controller", "--kubeconfig", kubeconfig, "--namespace", namespace,
		"--redis-url", redisURL, "--processor-image", "localhost/bulkd:bench", "--processor-service-account", "bulkd-processor",
		"--redis-secret-name", "bulkd-redis", "--redis-secret-key", "redis-url", "--metrics-bind-address", b.metricsAddr,
		"--health-probe-bind-address", "0", "--max-running-shards", strconv.Itoa(o.maxRunning),
		"--max-running-shards-per-account", strconv.Itoa(o.perAccount), "--fair-weights", "payg=1,starter=1,standard=2,professional=4",
		"--log-level", o.controllerLogLevel); err != nil {
		return err
	}
	b.ctrlPID = b.procs.pid("bulkd-controller")
	if err := waitHTTP(ctx, "http://"+b.metricsAddr+"/metrics", time.Minute); err != nil {
		return fmt.Errorf("bulkd controller metrics: %w", err)
	}
	time.Sleep(2 * time.Second) // its caches sync
	return nil
}

// createNodes makes the fake nodes KWOK runs.
func (b *bench) createNodes(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	var next atomic.Int64
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < b.o.nodes; i = int(next.Add(1)) - 1 {
				name := fmt.Sprintf("kwok-node-%04d", i)
				n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
					Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
					Labels:      map[string]string{"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}}}
				if err := b.k8s.Create(ctx, n); err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		return fmt.Errorf("create nodes: %w", err)
	default:
	}
	// Ready once KWOK initialised them.
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var l corev1.NodeList
		if err := b.k8s.List(ctx, &l); err != nil {
			return err
		}
		ready := 0
		for _, n := range l.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		if ready >= b.o.nodes {
			return b.untaintNodes(ctx, l.Items)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d KWOK nodes ready after 5 minutes", ready, b.o.nodes)
		}
		time.Sleep(time.Second)
	}
}

// untaintNodes removes the node.kubernetes.io/not-ready taint the API
// server's TaintNodesByCondition admission puts on every new node: the
// node lifecycle controller would remove it once the node is Ready, but it
// does not run here (it would need node leases or heartbeats).
func (b *bench) untaintNodes(ctx context.Context, nodes []corev1.Node) error {
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"taints":null}}`))
	var wg sync.WaitGroup
	errs := make(chan error, len(nodes))
	sem := make(chan struct{}, 16)
	for i := range nodes {
		if len(nodes[i].Spec.Taints) == 0 {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func(n *corev1.Node) {
			defer func() { <-sem; wg.Done() }()
			if err := b.k8s.Patch(ctx, n, patch); err != nil {
				errs <- fmt.Errorf("untaint node %s: %w", n.Name, err)
			}
		}(&nodes[i])
	}
	wg.Wait()
	close(errs)
	return <-errs
}
