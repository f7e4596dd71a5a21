// Command kube-bench is the scale bench of bulkd's Kubernetes mode (issue
// 27, `make bench-kube`; numbers in docs/benchmarks.md, "Kubernetes at
// scale"). Everything in it is a real part but the nodes and the
// processors' rows:
//
//   - the project's own control plane: kube-apiserver and etcd (envtest's,
//     hack/envtest.sh), kube-controller-manager's Job controller and
//     kube-scheduler (hack/local-cluster/build-k8s.sh), all from the Go
//     module proxy;
//   - --nodes fake nodes run by KWOK (hack/tools.sh kwok), whose stages
//     (stages.yaml) make a Job's pod Running once scheduled and Succeeded
//     --pod-seconds later;
//   - the real `bulkd controller` process (bin/bulkd) with its admission on
//     (--max-running-shards), on a real Redis;
//   - the real engine making the jobs and their BulkJobs (jobs.Engine with
//     kube.Executor, as `bulkd apiserver` does);
//   - a stub processor: when a processor pod is Running, this process
//     answers that shard's rows in Redis (jobs.Processor with an answerer
//     that answers at once), as the pod's `bulkd processor` would.
//
// Workload: --bulkjobs BulkJobs from --accounts accounts of mixed plans and
// sizes (1, 2, 4 or 8 shards), then one account's --burst BulkJobs of 8
// shards followed by another account's one of 1 shard.
//
// It prints one line per figure and writes them as JSON (--out).
//
// Status: it compiles, and KWOK starts with its flags and stages, but it
// has not yet been run end to end (docs/benchmarks.md, "The scale bench
// on KWOK"): expect its first run to need fixes.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/kube"
	"github.com/bulkd/bulkd/internal/testredis"
)

const namespace = "bench"

type options struct {
	bulkJobs, accounts, nodes int
	maxRunning, perAccount    int
	burst                     int
	podSeconds                float64
	submitters                int
	bin, kwok, clusterBins    string
	assets, dir, out, crds    string
	stages                    string
	timeout                   time.Duration
	keepLogs                  bool
}

func main() {
	var o options
	flag.IntVar(&o.bulkJobs, "bulkjobs", 5000, "BulkJobs of the main wave")
	flag.IntVar(&o.accounts, "accounts", 500, "accounts the main wave's BulkJobs are spread over")
	flag.IntVar(&o.nodes, "nodes", 1000, "KWOK fake nodes")
	flag.IntVar(&o.maxRunning, "max-running-shards", 5000, "the controller's --max-running-shards")
	flag.IntVar(&o.perAccount, "max-running-shards-per-account", 0, "the controller's --max-running-shards-per-account (0: the global budget)")
	flag.IntVar(&o.burst, "burst", 1000, "BulkJobs of one account after the main wave (then one of another account); 0 skips that phase")
	flag.Float64Var(&o.podSeconds, "pod-seconds", 5, "how long a processor pod runs before KWOK makes it succeed")
	flag.IntVar(&o.submitters, "submitters", 16, "submissions made at once")
	flag.StringVar(&o.bin, "bin", "bin/bulkd", "bulkd binary")
	flag.StringVar(&o.kwok, "kwok", "", "kwok binary (hack/tools.sh kwok)")
	flag.StringVar(&o.clusterBins, "cluster-bins", "", "directory of kube-controller-manager and kube-scheduler (hack/local-cluster/build-k8s.sh)")
	flag.StringVar(&o.assets, "assets", os.Getenv("KUBEBUILDER_ASSETS"), "kube-apiserver and etcd (hack/envtest.sh)")
	flag.StringVar(&o.dir, "dir", "var/kube-bench", "working directory: logs, kubeconfig, Redis")
	flag.StringVar(&o.out, "out", "", "write the figures as JSON here (default: <dir>/result-<bulkjobs>.json)")
	flag.StringVar(&o.crds, "crds", "config/crd/bases", "BulkJob CRD directory")
	flag.StringVar(&o.stages, "stages", "hack/kube-bench/stages.yaml", "KWOK stages")
	flag.DurationVar(&o.timeout, "timeout", 45*time.Minute, "give up after this long")
	flag.Parse()
	if o.out == "" {
		o.out = filepath.Join(o.dir, fmt.Sprintf("result-%d.json", o.bulkJobs))
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	res, err := run(ctx, o)
	if res != nil {
		res.print(os.Stdout)
		if b, jerr := json.MarshalIndent(res, "", "  "); jerr == nil {
			_ = os.WriteFile(o.out, append(b, '\n'), 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kube-bench:", err)
		os.Exit(1)
	}
}

// result holds the figures.
type result struct {
	BulkJobs, Accounts, Nodes, MaxRunningShards int
	PodSeconds                                  float64
	Pods                                        int     // processor pods of the main wave
	CreateSeconds                               float64 // first to last BulkJob created
	CreatedPerSecond                            float64
	AdmittedPerSecond                           float64 // BulkJobs whose Job was un-suspended, per second, first to last admission
	AdmittedPeak5s                              float64 // most admissions in 5 s, per second
	AdmitLatencyP50, AdmitLatencyP99            float64 // created -> Job un-suspended, while the budget had room (s)
	PodsPerSecond                               float64 // processor pods succeeded per second over the wave
	WaveSeconds                                 float64 // first BulkJob created -> every BulkJob Completed
	ReconcileP50, ReconcileP99                  float64 // bulkjob controller (s)
	AdmissionPassP50, AdmissionPassP99          float64 // admission controller's reconcile (s)
	QueueWaitP99, AdmissionQueueWaitP99         float64 // workqueue wait (s)
	Reconciles, AdmissionPasses                 float64
	APIRequests                                 float64
	APIRequestsPerBulkJob                       float64
	APIRequestsByVerb                           map[string]float64
	RSSBytesPeak                                int64
	RSSBytesAtPeakPods                          int64
	PeakPods                                    int
	RSSBytesIdle                                int64
	RSSBytesPerPod                              float64
	BurstBulkJobs                               int
	SmallJobAdmitSeconds                        float64 // the other account's BulkJob behind the burst: created -> admitted
	BurstLastAdmitSeconds                       float64
	BurstAPIRequestsPerBulkJob                  float64
	Notes                                       []string
}

func (r *result) print(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, "bench-kube: "+format+"\n", a...) }
	p("workload: %d BulkJobs from %d accounts, %d processor pods, %d KWOK nodes, --max-running-shards %d, pods run %.1fs",
		r.BulkJobs, r.Accounts, r.Pods, r.Nodes, r.MaxRunningShards, r.PodSeconds)
	p("BulkJobs created: %.1f/s (%.1fs for all)", r.CreatedPerSecond, r.CreateSeconds)
	p("BulkJobs admitted: %.1f/s over the wave, peak %.1f/s over 5 s (goal >= 100/s; Kueue's scheduler benchmark ~43/s)", r.AdmittedPerSecond, r.AdmittedPeak5s)
	p("created -> admitted while the budget had room: p50 %.2fs p99 %.2fs", r.AdmitLatencyP50, r.AdmitLatencyP99)
	p("processor pods succeeded: %.1f/s over the wave (JobSet ~266 pods/s on 5,000 nodes); wave %.1fs", r.PodsPerSecond, r.WaveSeconds)
	p("reconcile (bulkjob): p50 %.3fs p99 %.3fs over %.0f reconciles (goal p99 <= 1s); workqueue wait p99 %.3fs", r.ReconcileP50, r.ReconcileP99, r.Reconciles, r.QueueWaitP99)
	p("admission pass: p50 %.3fs p99 %.3fs over %.0f passes; workqueue wait p99 %.3fs", r.AdmissionPassP50, r.AdmissionPassP99, r.AdmissionPasses, r.AdmissionQueueWaitP99)
	p("API requests: %.0f, %.1f per BulkJob (client-go rest_client_requests_total) %v", r.APIRequests, r.APIRequestsPerBulkJob, r.APIRequestsByVerb)
	p("controller RSS: peak %.0f MiB; %.0f MiB with %d processor pods; idle %.0f MiB; %.1f KiB per pod (goal <= 1 GiB at 10,000 pods)",
		mib(r.RSSBytesPeak), mib(r.RSSBytesAtPeakPods), r.PeakPods, mib(r.RSSBytesIdle), r.RSSBytesPerPod/1024)
	if r.BurstBulkJobs > 0 {
		p("burst: one account's %d BulkJobs of 8 shards, then another's of 1: its admission %.2fs after it was created (goal <= 5s); the burst's last admission %.1fs; %.1f API requests per BulkJob",
			r.BurstBulkJobs, r.SmallJobAdmitSeconds, r.BurstLastAdmitSeconds, r.BurstAPIRequestsPerBulkJob)
	}
	for _, n := range r.Notes {
		p("note: %s", n)
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// bench is the running world.
type bench struct {
	o      options
	log    *slog.Logger
	admin  *rest.Config
	k8s    client.Client
	engine *jobs.Engine
	proc   *jobs.Processor
	rdb    *redis.Client
	accts  *accounts.Store

	ctrlPID     int
	metricsAddr string

	mu        sync.Mutex
	created   map[string]time.Time // job id -> BulkJob created
	admitted  map[string]time.Time // job id -> its Job seen un-suspended
	podsDone  atomic.Int64
	livePods  atomic.Int64
	shardErrs atomic.Int64
	podMu     sync.Mutex
	podState  map[types.UID]uint8 // 1: running (its shard answered), 2: ended
}

func run(ctx context.Context, o options) (*result, error) {
	for _, f := range []struct{ name, path string }{{"--bin", o.bin}, {"--kwok", o.kwok}, {"--assets", o.assets}, {"--cluster-bins", o.clusterBins}} {
		if f.path == "" {
			return nil, fmt.Errorf("%s is required", f.name)
		}
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return nil, err
	}
	o.dir = dir
	logf, err := os.Create(filepath.Join(dir, "bench.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	b := &bench{o: o, log: slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: slog.LevelInfo})),
		created: map[string]time.Time{}, admitted: map[string]time.Time{}, podState: map[types.UID]uint8{}}
	ctrl.SetLogger(logr.FromSlogHandler(b.log.Handler()))
	step := func(format string, a ...any) {
		msg := fmt.Sprintf(format, a...)
		fmt.Fprintf(os.Stderr, "%s kube-bench: %s\n", time.Now().Format("15:04:05"), msg)
		b.log.Info(msg)
	}

	// The control plane.
	step("starting kube-apiserver and etcd (%s)", o.assets)
	env := &envtest.Environment{CRDDirectoryPaths: []string{o.crds}, ErrorIfCRDPathMissing: true, BinaryAssetsDirectory: o.assets}
	if b.admin, err = env.Start(); err != nil {
		return nil, fmt.Errorf("envtest: %w", err)
	}
	defer func() { _ = env.Stop() }()
	b.admin.QPS, b.admin.Burst = -1, 0
	if b.k8s, err = client.New(b.admin, client.Options{Scheme: v1alpha1.NewScheme()}); err != nil {
		return nil, err
	}
	user, err := env.AddUser(envtest.User{Name: "kube-bench", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, err
	}
	kcBytes, err := user.KubeConfig()
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kcBytes, 0o600); err != nil {
		return nil, err
	}
	procs := &children{}
	defer procs.stop()
	step("starting kube-controller-manager (Job controller) and kube-scheduler")
	if err := procs.start(dir, "kube-controller-manager", filepath.Join(o.clusterBins, "kube-controller-manager"),
		"--kubeconfig", kubeconfig, "--controllers", "job-controller", "--leader-elect=false", "--secure-port=0",
		"--kube-api-qps=1000", "--kube-api-burst=2000", "--concurrent-job-syncs=20"); err != nil {
		return nil, err
	}
	schedCfg := filepath.Join(dir, "scheduler.yaml")
	if err := os.WriteFile(schedCfg, fmt.Appendf(nil, `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: 1000
  burst: 2000
leaderElection:
  leaderElect: false
`, kubeconfig), 0o644); err != nil {
		return nil, err
	}
	if err := procs.start(dir, "kube-scheduler", filepath.Join(o.clusterBins, "kube-scheduler"), "--config", schedCfg, "--secure-port=0"); err != nil {
		return nil, err
	}

	// The nodes, and KWOK running them.
	stagesT, err := os.ReadFile(o.stages)
	if err != nil {
		return nil, err
	}
	stages := filepath.Join(dir, "stages.yaml")
	if err := os.WriteFile(stages, []byte(strings.ReplaceAll(string(stagesT), "__POD_MILLIS__", strconv.Itoa(int(o.podSeconds*1000)))), 0o644); err != nil {
		return nil, err
	}
	// KWOK only writes these addresses into the fake objects' status; no
	// traffic goes to them. Loopback, so nothing outside looks addressed.
	// No node leases: nothing here marks a node NotReady (no node
	// lifecycle controller), and 1,000 leases renewed every 10 s would
	// be 100 writes a second of this 2-core machine's API server that a
	// real cluster's kubelets make too but that tell nothing of bulkd.
	if err := procs.start(dir, "kwok", o.kwok, "--kubeconfig", kubeconfig, "--config", stages,
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--cidr=127.128.0.1/12", "--node-ip=127.127.0.1", "--server-address=127.0.0.1:0", "--node-lease-duration-seconds=0"); err != nil {
		return nil, err
	}
	step("creating %d KWOK nodes", o.nodes)
	if err := b.createNodes(ctx); err != nil {
		return nil, err
	}

	// Redis, the namespace, the engine, the stub processor.
	rs, err := testredis.StartProcess(filepath.Join(dir, "redis"))
	if err != nil {
		return nil, err
	}
	defer rs.Stop()
	b.rdb = redis.NewClient(&redis.Options{Addr: rs.Addr, PoolSize: 64, DialTimeout: 2 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	defer b.rdb.Close()
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "bulkd-processor", Namespace: namespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: namespace}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bulkd-redis", Namespace: namespace}, StringData: map[string]string{"redis-url": rs.URL}},
	} {
		if err := b.k8s.Create(ctx, obj); err != nil {
			return nil, fmt.Errorf("create %T: %w", obj, err)
		}
	}
	bl := billing.New(b.rdb, nil)
	store := jobs.NewStore(b.rdb, bl)
	b.accts = accounts.NewStore(b.rdb, nil)
	b.engine = jobs.NewEngine(store, bl, &kube.Executor{Client: b.k8s, Namespace: namespace, Parallelism: 8}, b.log)
	b.engine.ShardSize = shardRows
	b.proc = jobs.NewProcessor(store, map[string]jobs.Answerer{"company_enrichment": instant{}}, b.log)
	if err := b.watch(ctx); err != nil {
		return nil, err
	}

	// The controller.
	port, err := testredis.FreePort()
	if err != nil {
		return nil, err
	}
	b.metricsAddr = fmt.Sprintf("127.0.0.1:%d", port)
	step("starting bulkd controller (--max-running-shards %d)", o.maxRunning)
	if err := procs.start(dir, "bulkd-controller", o.bin, "controller", "--kubeconfig", kubeconfig, "--namespace", namespace,
		"--redis-url", rs.URL, "--processor-image", "localhost/bulkd:bench", "--processor-service-account", "bulkd-processor",
		"--redis-secret-name", "bulkd-redis", "--redis-secret-key", "redis-url", "--metrics-bind-address", b.metricsAddr,
		"--health-probe-bind-address", "0", "--max-running-shards", strconv.Itoa(o.maxRunning),
		"--max-running-shards-per-account", strconv.Itoa(o.perAccount), "--fair-weights", "payg=1,starter=1,standard=2,professional=4",
		"--log-level", "warn"); err != nil {
		return nil, err
	}
	b.ctrlPID = procs.pid("bulkd-controller")
	if err := waitHTTP(ctx, "http://"+b.metricsAddr+"/metrics", time.Minute); err != nil {
		return nil, fmt.Errorf("bulkd controller metrics: %w", err)
	}
	time.Sleep(2 * time.Second) // its caches sync
	res := &result{BulkJobs: o.bulkJobs, Accounts: o.accounts, Nodes: o.nodes, MaxRunningShards: o.maxRunning, PodSeconds: o.podSeconds}
	res.RSSBytesIdle = rss(b.ctrlPID)
	rssStop := b.sampleRSS(ctx, res)
	defer rssStop()

	// The main wave.
	principals, err := b.makeAccounts(ctx, o.accounts)
	if err != nil {
		return res, err
	}
	before, err := b.scrape(ctx)
	if err != nil {
		return res, err
	}
	step("main wave: %d BulkJobs from %d accounts", o.bulkJobs, o.accounts)
	rng := rand.New(rand.NewSource(27))
	var wave []submission
	for i := 0; i < o.bulkJobs; i++ {
		shards := []int{1, 1, 1, 1, 2, 2, 2, 4, 4, 8}[rng.Intn(10)]
		wave = append(wave, submission{p: principals[rng.Intn(len(principals))], shards: shards})
		res.Pods += shards
	}
	t0 := time.Now()
	ids, err := b.submitAll(ctx, wave)
	if err != nil {
		return res, err
	}
	res.CreateSeconds = time.Since(t0).Seconds()
	res.CreatedPerSecond = float64(len(ids)) / res.CreateSeconds
	step("created %d BulkJobs in %.1fs; waiting for them to complete", len(ids), res.CreateSeconds)
	if err := b.waitCompleted(ctx, ids, step); err != nil {
		return res, err
	}
	res.WaveSeconds = time.Since(t0).Seconds()
	res.PodsPerSecond = float64(b.podsDone.Load()) / res.WaveSeconds
	b.admissionFigures(ids, res)
	after, err := b.scrape(ctx)
	if err != nil {
		return res, err
	}
	d := after.minus(before)
	res.ReconcileP50, res.ReconcileP99, res.Reconciles = d.quantiles("controller_runtime_reconcile_time_seconds", "controller", "bulkjob")
	res.AdmissionPassP50, res.AdmissionPassP99, res.AdmissionPasses = d.quantiles("controller_runtime_reconcile_time_seconds", "controller", "admission")
	_, res.QueueWaitP99, _ = d.quantiles("workqueue_queue_duration_seconds", "name", "bulkjob")
	_, res.AdmissionQueueWaitP99, _ = d.quantiles("workqueue_queue_duration_seconds", "name", "admission")
	res.APIRequestsByVerb = d.counterBy("rest_client_requests_total", "method")
	for _, v := range res.APIRequestsByVerb {
		res.APIRequests += v
	}
	res.APIRequestsPerBulkJob = res.APIRequests / float64(len(ids))
	if res.PeakPods > 0 && res.RSSBytesAtPeakPods > res.RSSBytesIdle {
		res.RSSBytesPerPod = float64(res.RSSBytesAtPeakPods-res.RSSBytesIdle) / float64(res.PeakPods)
	}
	if n := b.shardErrs.Load(); n > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d shard answers failed in the stub processor", n))
	}

	// One account's burst, then another's single BulkJob.
	if o.burst > 0 {
		step("burst: one account's %d BulkJobs, then another account's one", o.burst)
		two, err := b.makeAccounts(ctx, 2)
		if err != nil {
			return res, err
		}
		before, err := b.scrape(ctx)
		if err != nil {
			return res, err
		}
		var burst []submission
		for i := 0; i < o.burst; i++ {
			burst = append(burst, submission{p: two[0], shards: 8})
		}
		t1 := time.Now()
		bids, err := b.submitAll(ctx, burst)
		if err != nil {
			return res, err
		}
		sid, err := b.submitAll(ctx, []submission{{p: two[1], shards: 1}})
		if err != nil {
			return res, err
		}
		if err := b.waitAdmitted(ctx, sid[0], 2*time.Minute); err != nil {
			return res, err
		}
		b.mu.Lock()
		res.SmallJobAdmitSeconds = b.admitted[sid[0]].Sub(b.created[sid[0]]).Seconds()
		b.mu.Unlock()
		step("small job admitted %.2fs after it was created; waiting for the burst to complete", res.SmallJobAdmitSeconds)
		if err := b.waitCompleted(ctx, append(bids, sid...), step); err != nil {
			return res, err
		}
		b.mu.Lock()
		var last time.Time
		for _, id := range bids {
			if a := b.admitted[id]; a.After(last) {
				last = a
			}
		}
		b.mu.Unlock()
		res.BurstBulkJobs = len(bids)
		res.BurstLastAdmitSeconds = last.Sub(t1).Seconds()
		after, err := b.scrape(ctx)
		if err != nil {
			return res, err
		}
		var n float64
		for _, v := range after.minus(before).counterBy("rest_client_requests_total", "method") {
			n += v
		}
		res.BurstAPIRequestsPerBulkJob = n / float64(len(bids)+1)
	}
	return res, nil
}

// shardRows is the rows of one shard: small, since the rows are not what
// is measured.
const shardRows = 5

type submission struct {
	p      *accounts.Principal
	shards int
}

// instant answers every input at once.
type instant struct{}

func (instant) Answer(_ context.Context, payloads []string) ([]jobs.Answer, error) {
	out := make([]jobs.Answer, len(payloads))
	for i := range out {
		out[i] = jobs.Answer{Outcome: jobs.OutcomeFound, Data: []byte(`{}`)}
	}
	return out, nil
}

func (instant) ErrorAnswer() jobs.Answer {
	return jobs.Answer{Outcome: jobs.OutcomeError, Data: []byte(`{}`)}
}

// makeAccounts makes n accounts with a key each: a third pay-as-you-go, a
// third on the starter plan, a third on professional.
func (b *bench) makeAccounts(ctx context.Context, n int) ([]*accounts.Principal, error) {
	var out []*accounts.Principal
	until := time.Now().UTC().AddDate(0, 1, 0).Truncate(time.Second)
	for i := 0; i < n; i++ {
		a, err := b.accts.CreateAccount(ctx, fmt.Sprintf("bench-%d", i), credits.Whole(1_000_000))
		if err != nil {
			return nil, err
		}
		typ := accounts.PayAsYouGo
		switch i % 3 {
		case 1:
			err = b.accts.SetPlan(ctx, a.ID, accounts.PlanStarter, accounts.StateActive, until)
		case 2:
			err = b.accts.SetPlan(ctx, a.ID, accounts.PlanProfessional, accounts.StateActive, until)
		}
		if err != nil {
			return nil, err
		}
		key, _, err := b.accts.CreateKey(ctx, a.ID, typ)
		if err != nil {
			return nil, err
		}
		p, err := b.accts.Authenticate(ctx, key)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// submitAll submits through the engine, o.submitters at a time, and
// returns the job ids in order.
func (b *bench) submitAll(ctx context.Context, subs []submission) ([]string, error) {
	ids := make([]string, len(subs))
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for range min(b.o.submitters, len(subs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < len(subs) && ctx.Err() == nil; i = int(next.Add(1)) - 1 {
				s := subs[i]
				n := s.shards * shardRows
				bld := jobs.NewBuilder("company_enrichment", n)
				for k := 0; k < n; k++ {
					v := fmt.Sprintf("bench-%d-%d-%d", time.Now().UnixNano(), i, k)
					bld.AddValid(v, v, v)
				}
				j, err := b.engine.Submit(ctx, s.p, bld, jobs.Metering{Price: credits.Whole(1)})
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				b.mu.Lock()
				b.created[j.ID] = time.Now()
				b.mu.Unlock()
				ids[i] = j.ID
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return nil, fmt.Errorf("submit: %w", err)
	}
	return ids, ctx.Err()
}

// watch follows the processor Jobs (when each is un-suspended: admitted)
// and pods (a Running one gets its rows answered: the stub processor).
func (b *bench) watch(ctx context.Context) error {
	c, err := cache.New(b.admin, cache.Options{Scheme: v1alpha1.NewScheme(), DefaultNamespaces: map[string]cache.Config{namespace: {}}})
	if err != nil {
		return err
	}
	ji, err := c.GetInformer(ctx, &batchv1.Job{})
	if err != nil {
		return err
	}
	onJob := func(o any) {
		j, ok := o.(*batchv1.Job)
		if !ok || (j.Spec.Suspend != nil && *j.Spec.Suspend) {
			return
		}
		id := j.Labels[v1alpha1.LabelJobID]
		if _, retry := j.Labels[v1alpha1.LabelRetryRound]; retry || id == "" {
			return
		}
		b.mu.Lock()
		if _, ok := b.admitted[id]; !ok {
			b.admitted[id] = time.Now()
		}
		b.mu.Unlock()
	}
	if _, err := ji.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: onJob, UpdateFunc: func(_, n any) { onJob(n) }}); err != nil {
		return err
	}
	pi, err := c.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return err
	}
	work := make(chan *corev1.Pod, 100_000)
	for range 32 {
		go func() {
			for p := range work {
				b.answer(ctx, p)
			}
		}()
	}
	onPod := func(o any) {
		p, ok := o.(*corev1.Pod)
		if !ok {
			return
		}
		start := false
		b.podMu.Lock()
		st := b.podState[p.UID]
		switch p.Status.Phase {
		case corev1.PodRunning:
			if st == 0 {
				b.podState[p.UID], start = 1, true
				b.livePods.Add(1)
			}
		case corev1.PodSucceeded, corev1.PodFailed:
			if st != 2 {
				b.podState[p.UID] = 2
				if st == 1 {
					b.livePods.Add(-1)
				}
				if p.Status.Phase == corev1.PodSucceeded {
					b.podsDone.Add(1)
				}
			}
		}
		b.podMu.Unlock()
		if start {
			select {
			case work <- p:
			case <-ctx.Done():
			}
		}
	}
	if _, err := pi.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: onPod, UpdateFunc: func(_, n any) { onPod(n) }}); err != nil {
		return err
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return errors.New("bench cache did not sync")
	}
	return nil
}

// answer answers a Running processor pod's shard, as `bulkd processor`
// would.
func (b *bench) answer(ctx context.Context, p *corev1.Pod) {
	id := p.Labels[v1alpha1.LabelJobID]
	shard, err := strconv.Atoi(p.Annotations[batchv1.JobCompletionIndexAnnotation])
	if id == "" || err != nil {
		return
	}
	if err := b.proc.ProcessShard(ctx, id, shard); err != nil && ctx.Err() == nil {
		b.shardErrs.Add(1)
		b.log.Warn("stub processor", "job", id, "shard", shard, "err", err)
	}
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
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d KWOK nodes ready after 5 minutes", ready, b.o.nodes)
		}
		time.Sleep(time.Second)
	}
}

// waitCompleted waits until the BulkJobs of ids are Completed.
func (b *bench) waitCompleted(ctx context.Context, ids []string, step func(string, ...any)) error {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	last := time.Now()
	for {
		var l v1alpha1.BulkJobList
		if err := b.k8s.List(ctx, &l, client.InNamespace(namespace)); err != nil {
			return err
		}
		done, failed := 0, 0
		for _, bj := range l.Items {
			if !want[bj.Name] {
				continue
			}
			switch bj.Status.Phase {
			case v1alpha1.PhaseCompleted:
				done++
			case v1alpha1.PhaseFailed:
				failed++
			}
		}
		if failed > 0 {
			return fmt.Errorf("%d BulkJobs failed", failed)
		}
		if done == len(ids) {
			return nil
		}
		if time.Since(last) > 15*time.Second {
			b.mu.Lock()
			adm := len(b.admitted)
			b.mu.Unlock()
			step("%d of %d BulkJobs completed; %d admitted in all; %d pods succeeded, %d running", done, len(ids), adm, b.podsDone.Load(), b.livePods.Load())
			last = time.Now()
		}
		// Every 2 s: a list of 5,000 BulkJobs is itself load on the
		// API server being measured.
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d BulkJobs completed: %w", done, len(ids), ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}

func (b *bench) waitAdmitted(ctx context.Context, id string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		b.mu.Lock()
		_, ok := b.admitted[id]
		b.mu.Unlock()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("BulkJob %s not admitted within %s", id, d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// admissionFigures: admissions per second, and created -> admitted while
// the budget had room (the BulkJobs admitted before the first one had to
// wait for a pod to end: those admitted within one pod's run of their
// creation... approximated as the first maxRunning shards' worth).
func (b *bench) admissionFigures(ids []string, res *result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var times []time.Time
	var lat []float64
	var slots int
	for _, id := range ids {
		a, ok := b.admitted[id]
		if !ok {
			continue
		}
		times = append(times, a)
	}
	slices.SortFunc(times, func(x, y time.Time) int { return x.Compare(y) })
	if len(times) > 1 {
		res.AdmittedPerSecond = float64(len(times)-1) / times[len(times)-1].Sub(times[0]).Seconds()
		j := 0
		for i := range times {
			for times[i].Sub(times[j]) > 5*time.Second {
				j++
			}
			res.AdmittedPeak5s = math.Max(res.AdmittedPeak5s, float64(i-j+1)/5)
		}
	}
	// Room: BulkJobs in order of creation until their shards fill the
	// budget.
	order := slices.Clone(ids)
	slices.SortFunc(order, func(x, y string) int { return b.created[x].Compare(b.created[y]) })
	for _, id := range order {
		a, ok := b.admitted[id]
		if !ok {
			continue
		}
		if slots >= b.o.maxRunning {
			break
		}
		slots += 1 // at least its first shard
		lat = append(lat, a.Sub(b.created[id]).Seconds())
	}
	res.AdmitLatencyP50, res.AdmitLatencyP99 = quantile(lat, 0.5), quantile(lat, 0.99)
}

func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[min(len(s)-1, int(math.Ceil(q*float64(len(s))))-1)]
}

// sampleRSS samples the controller's RSS, with the number of processor
// pods that exist then.
func (b *bench) sampleRSS(ctx context.Context, res *result) func() {
	ctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	go func() {
		// Every 2 s, with a metadata-only list of the pods.
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			r := rss(b.ctrlPID)
			pods := b.countPods(ctx)
			mu.Lock()
			if r > res.RSSBytesPeak {
				res.RSSBytesPeak = r
			}
			if pods >= res.PeakPods {
				res.PeakPods, res.RSSBytesAtPeakPods = pods, max(r, res.RSSBytesAtPeakPods)
			}
			mu.Unlock()
		}
	}()
	return func() { cancel(); mu.Lock(); mu.Unlock() }
}

// countPods is the processor pods that exist (gated, running or ended but
// kept): what the controller's cache holds.
func (b *bench) countPods(ctx context.Context) int {
	var l metav1.PartialObjectMetadataList
	l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := b.k8s.List(ctx, &l, client.InNamespace(namespace)); err != nil {
		return 0
	}
	return len(l.Items)
}

func rss(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// ---- the controller's metrics ----

type metrics map[string]*dto.MetricFamily

func (b *bench) scrape(ctx context.Context) (metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+b.metricsAddr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	res, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape the controller: %w", err)
	}
	defer res.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mf, err := p.TextToMetricFamilies(res.Body)
	if err != nil {
		return nil, fmt.Errorf("parse the controller's metrics: %w", err)
	}
	return metrics(mf), nil
}

// series is one metric's value(s), keyed by its labels.
type series struct {
	count   float64
	buckets []bucket // cumulative
	value   float64
}

type bucket struct{ le, n float64 }

type delta map[string]map[string]*series // family -> label string -> series

func labelKey(m *dto.Metric) string {
	var parts []string
	for _, l := range m.GetLabel() {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// minus is what the counters and histograms gained since before.
func (m metrics) minus(before metrics) delta {
	d := delta{}
	for name, mf := range m {
		d[name] = map[string]*series{}
		old := map[string]*dto.Metric{}
		if bf := before[name]; bf != nil {
			for _, x := range bf.GetMetric() {
				old[labelKey(x)] = x
			}
		}
		for _, x := range mf.GetMetric() {
			k := labelKey(x)
			s := &series{}
			o := old[k]
			switch {
			case x.Histogram != nil:
				s.count = float64(x.Histogram.GetSampleCount())
				if o != nil && o.Histogram != nil {
					s.count -= float64(o.Histogram.GetSampleCount())
				}
				for i, bk := range x.Histogram.GetBucket() {
					n := float64(bk.GetCumulativeCount())
					if o != nil && o.Histogram != nil && i < len(o.Histogram.GetBucket()) {
						n -= float64(o.Histogram.GetBucket()[i].GetCumulativeCount())
					}
					s.buckets = append(s.buckets, bucket{bk.GetUpperBound(), n})
				}
			case x.Counter != nil:
				s.value = x.Counter.GetValue()
				if o != nil && o.Counter != nil {
					s.value -= o.Counter.GetValue()
				}
			}
			d[name][k] = s
		}
	}
	return d
}

// quantiles are p50 and p99 of a histogram's series whose label is value
// (interpolated within a bucket, as Prometheus' histogram_quantile), and
// its count.
func (d delta) quantiles(name, label, value string) (p50, p99, count float64) {
	var agg []bucket
	for k, s := range d[name] {
		if !slices.Contains(strings.Split(k, ","), label+"="+value) {
			continue
		}
		count += s.count
		if agg == nil {
			agg = slices.Clone(s.buckets)
			continue
		}
		for i := range agg {
			if i < len(s.buckets) {
				agg[i].n += s.buckets[i].n
			}
		}
	}
	q := func(q float64) float64 {
		if count == 0 {
			return 0
		}
		rank := q * count
		prevLe, prevN := 0.0, 0.0
		for _, bk := range agg {
			if bk.n >= rank {
				if bk.n == prevN {
					return bk.le
				}
				return prevLe + (bk.le-prevLe)*(rank-prevN)/(bk.n-prevN)
			}
			prevLe, prevN = bk.le, bk.n
		}
		return math.Inf(1) // beyond the last bucket
	}
	return q(0.5), q(0.99), count
}

// counterBy sums a counter's series by one label.
func (d delta) counterBy(name, label string) map[string]float64 {
	out := map[string]float64{}
	for k, s := range d[name] {
		v := "?"
		for _, kv := range strings.Split(k, ",") {
			if n, val, ok := strings.Cut(kv, "="); ok && n == label {
				v = val
			}
		}
		out[v] += s.value
	}
	return out
}

// ---- child processes ----

type children struct {
	mu     sync.Mutex
	procs  map[string]*exec.Cmd
	exited map[string]chan struct{}
	order  []string
}

func (c *children) start(dir, name, bin string, args ...string) error {
	f, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(exited) }()
	// A process that dies at once (a bad flag) is an error now, with its log.
	select {
	case <-exited:
		b, _ := os.ReadFile(filepath.Join(dir, name+".log"))
		return fmt.Errorf("%s exited at start: %s", name, tail(string(b), 3000))
	case <-time.After(2 * time.Second):
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.procs == nil {
		c.procs, c.exited = map[string]*exec.Cmd{}, map[string]chan struct{}{}
	}
	c.procs[name], c.exited[name] = cmd, exited
	c.order = append(c.order, name)
	return nil
}

func (c *children) pid(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.procs[name]; p != nil {
		return p.Process.Pid
	}
	return 0
}

// stop ends the children, last started first.
func (c *children) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.order) - 1; i >= 0; i-- {
		name := c.order[i]
		_ = c.procs[name].Process.Signal(os.Interrupt)
		select {
		case <-c.exited[name]:
		case <-time.After(10 * time.Second):
			_ = c.procs[name].Process.Kill()
			<-c.exited[name]
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func waitHTTP(ctx context.Context, url string, d time.Duration) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(d)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		res, err := hc.Do(req)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not answering after %s: %v", url, d, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
