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
// It has run end to end at 200 and 1,000 BulkJobs (docs/benchmarks.md,
// "The scale bench on KWOK"); 5,000 on 1,000 nodes has not been run.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/jobs"
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
	admissionOnly             bool
	apiserverProfile          time.Duration
	controllerLogLevel        string
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
	flag.BoolVar(&o.admissionOnly, "admission-only", false, "no Job controller nor scheduler: Jobs are admitted (un-suspended) but make no pods, "+
		"so the figures are the controller's admission with the API server doing nothing else (the ceiling bulkd's own work sets)")
	flag.DurationVar(&o.apiserverProfile, "apiserver-profile", 0, "take a CPU profile of kube-apiserver over this long from the main wave's start (<dir>/kube-apiserver.pprof; 0: none)")
	flag.StringVar(&o.controllerLogLevel, "controller-log-level", "warn", "the controller's --log-level (debug: every admission pass and admission, in <dir>/bulkd-controller.log)")
	flag.Parse()
	if o.out == "" {
		o.out = filepath.Join(o.dir, fmt.Sprintf("result-%d.json", o.bulkJobs))
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	res, err := run(ctx, o)
	if res != nil {
		res.print(os.Stdout)
		b, jerr := json.MarshalIndent(res, "", "  ")
		if jerr == nil {
			jerr = os.WriteFile(o.out, append(b, '\n'), 0o644)
		}
		if jerr != nil {
			fmt.Fprintln(os.Stderr, "kube-bench: write the figures:", jerr)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kube-bench:", err)
		os.Exit(1)
	}
}

// result holds the figures.
type result struct {
	AdmissionOnly                               bool // no pods were made (--admission-only)
	BulkJobs, Accounts, Nodes, MaxRunningShards int
	PodSeconds                                  float64
	Pods                                        int     // processor pods of the main wave
	CreateSeconds                               float64 // first to last BulkJob created
	CreatedPerSecond                            float64
	AdmittedPerSecond                           float64 // BulkJobs whose Job was un-suspended, per second, first to last admission
	AdmittedPeak5s                              float64 // most admissions in 5 s, per second
	AdmitLatencyP50, AdmitLatencyP99            float64 // created -> Job un-suspended, while the budget had room (s)
	JobLatencyP50, JobLatencyP99                float64 // created -> its Job exists (the bulkjob controller's first pass), every BulkJob (s)
	PodsPerSecond                               float64 // processor pods succeeded per second over the wave
	WaveSeconds                                 float64 // first BulkJob created -> every BulkJob Completed
	ReconcileP50, ReconcileP99                  float64 // bulkjob controller (s)
	AdmissionPassP50, AdmissionPassP99          float64 // admission controller's reconcile (s)
	QueueWaitP99, AdmissionQueueWaitP99         float64 // workqueue wait (s), interpolated in buckets 10x apart
	QueueWaitsOver1s, QueueWaitsOver10s         float64 // bulkjob workqueue: share of the waits longer than 1 s, 10 s
	Reconciles, AdmissionPasses                 float64
	APIRequests                                 float64
	APIRequestsPerBulkJob                       float64
	APIRequestsByVerb                           map[string]float64
	CPUByCommand                                []string // CPU seconds each command spent over the main wave
	RSSBytesPeak                                int64
	RSSBytesAtPeakPods                          int64
	PeakPods                                    int
	RSSBytesIdle                                int64
	RSSBytesPerPod                              float64
	BurstBulkJobs                               int
	SmallJobAdmitSeconds                        float64 // the other account's BulkJob behind the burst: created -> admitted
	SmallJobJobSeconds                          float64 // ... created -> its Job exists
	BurstLastAdmitSeconds                       float64
	BurstAPIRequestsPerBulkJob                  float64
	Notes                                       []string
}

func (r *result) print(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, "bench-kube: "+format+"\n", a...) }
	if r.AdmissionOnly {
		p("admission only: no Job controller nor scheduler, Jobs make no pods; the figures are the controller's admission alone")
	}
	p("workload: %d BulkJobs from %d accounts, %d processor pods, %d KWOK nodes, --max-running-shards %d, pods run %.1fs",
		r.BulkJobs, r.Accounts, r.Pods, r.Nodes, r.MaxRunningShards, r.PodSeconds)
	p("BulkJobs created: %.1f/s (%.1fs for all)", r.CreatedPerSecond, r.CreateSeconds)
	p("BulkJobs admitted: %.1f/s over the wave, peak %.1f/s over 5 s (goal >= 100/s; Kueue's scheduler benchmark ~43/s)", r.AdmittedPerSecond, r.AdmittedPeak5s)
	p("created -> admitted while the budget had room: p50 %.2fs p99 %.2fs", r.AdmitLatencyP50, r.AdmitLatencyP99)
	p("created -> its Job exists (bulkjob controller's first pass): p50 %.2fs p99 %.2fs", r.JobLatencyP50, r.JobLatencyP99)
	p("processor pods succeeded: %.1f/s over the wave (JobSet ~266 pods/s on 5,000 nodes); wave %.1fs", r.PodsPerSecond, r.WaveSeconds)
	p("reconcile (bulkjob): p50 %.3fs p99 %.3fs over %.0f reconciles (goal p99 <= 1s); workqueue wait p99 %.3fs (buckets 10x apart), %.1f%% of waits > 1s, %.1f%% > 10s",
		r.ReconcileP50, r.ReconcileP99, r.Reconciles, r.QueueWaitP99, 100*r.QueueWaitsOver1s, 100*r.QueueWaitsOver10s)
	p("admission pass: p50 %.3fs p99 %.3fs over %.0f passes; workqueue wait p99 %.3fs", r.AdmissionPassP50, r.AdmissionPassP99, r.AdmissionPasses, r.AdmissionQueueWaitP99)
	p("API requests: %.0f, %.1f per BulkJob (client-go rest_client_requests_total) %v", r.APIRequests, r.APIRequestsPerBulkJob, r.APIRequestsByVerb)
	p("CPU over the main wave (user+system, by command; the machine has %d cores): %s", runtime.NumCPU(), strings.Join(r.CPUByCommand, ", "))
	p("controller RSS: peak %.0f MiB; %.0f MiB with %d processor pods; idle %.0f MiB; %.1f KiB per pod (goal <= 1 GiB at 10,000 pods)",
		mib(r.RSSBytesPeak), mib(r.RSSBytesAtPeakPods), r.PeakPods, mib(r.RSSBytesIdle), r.RSSBytesPerPod/1024)
	if r.BurstBulkJobs > 0 {
		p("burst: one account's %d BulkJobs of 8 shards, then another's of 1: its admission %.2fs after it was created (goal <= 5s; its Job existed after %.2fs); the burst's last admission %.1fs; %.1f API requests per BulkJob",
			r.BurstBulkJobs, r.SmallJobAdmitSeconds, r.SmallJobJobSeconds, r.BurstLastAdmitSeconds, r.BurstAPIRequestsPerBulkJob)
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
	procs       *children
	stops       []func() // run in reverse order when the bench ends

	mu        sync.Mutex
	created   map[string]time.Time // job id -> BulkJob created
	admitted  map[string]time.Time // job id -> its Job seen un-suspended
	jobSeen   map[string]time.Time // job id -> its Job seen
	podsDone  atomic.Int64
	livePods  atomic.Int64
	shardErrs atomic.Int64
	podMu     sync.Mutex
	podState  map[types.UID]uint8 // 1: running (its shard answered), 2: ended
}

// step prints a step of the bench, with the time, and logs it.
func (b *bench) step(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	fmt.Fprintf(os.Stderr, "%s kube-bench: %s\n", time.Now().Format("15:04:05"), msg)
	b.log.Info(msg)
}

// run starts the world (cluster.go), runs the main wave and the burst
// (wave.go), and returns the figures; it stops everything it started.
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
		created: map[string]time.Time{}, admitted: map[string]time.Time{}, jobSeen: map[string]time.Time{}, podState: map[types.UID]uint8{}, procs: &children{}}
	ctrl.SetLogger(logr.FromSlogHandler(b.log.Handler()))
	defer func() {
		b.procs.stop()
		for i := len(b.stops) - 1; i >= 0; i-- {
			b.stops[i]()
		}
	}()
	kubeconfig, err := b.startControlPlane()
	if err != nil {
		return nil, err
	}
	if err := b.startKWOK(ctx, kubeconfig); err != nil {
		return nil, err
	}
	redisURL, err := b.startEngine(ctx)
	if err != nil {
		return nil, err
	}
	if err := b.startController(ctx, kubeconfig, redisURL); err != nil {
		return nil, err
	}
	res := &result{AdmissionOnly: o.admissionOnly, BulkJobs: o.bulkJobs, Accounts: o.accounts, Nodes: o.nodes, MaxRunningShards: o.maxRunning, PodSeconds: o.podSeconds}
	res.RSSBytesIdle = rss(b.ctrlPID)
	rssStop := b.sampleRSS(ctx, res)
	defer rssStop()
	if err := b.mainWave(ctx, res); err != nil {
		return res, err
	}
	if o.burst > 0 {
		// The main wave's figures now: at full size the burst takes tens of
		// minutes more, and a run cut short would otherwise print nothing.
		fmt.Println("bench-kube: the main wave's figures (the burst follows; all figures again at the end):")
		res.print(os.Stdout)
		if err := b.burst(ctx, res); err != nil {
			return res, err
		}
	}
	return res, nil
}
