package controllers_test

// BenchmarkStatusWrites1000Jobs measures what the controller costs the
// Kubernetes API server while many BulkJobs run: 1,000 BulkJobs made by the
// real engine (an executor that creates BulkJobs as kube.Executor does), a
// real kube-apiserver and etcd (envtest), a real Redis, and 1,000
// processors (the real jobs.Processor, one goroutine per job, its shards one
// after the other, announcing progress as processor pods do) whose
// answerer takes a second per batch, so every job's progress moves in Redis
// for about 30 s. Every request the controller's manager sends is counted by
// a RoundTripper on its REST config; writes are the non-GET ones.
//
// Setup: the 1,000 submissions, then every Job reports a pod started (as
// the Job controller would; envtest runs none), so every BulkJob is
// Running. Run: the processors; "steady" is the time before the first job
// completes (only progress moves), then every job's completion is a phase
// change, written at once with its event.
//
//	KUBEBUILDER_ASSETS=$(hack/envtest.sh) go test -run='^$' -bench=StatusWrites -benchtime=1x ./controllers/
//
// (also run by `make bench`). Numbers: docs/reliability.md.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/controllers"
	"github.com/bulkd/bulkd/internal/accounts/accountstest"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/redis/go-redis/v9"
)

const (
	benchJobs       = 1000
	benchDistinct   = 60 // distinct inputs per job
	benchShardSize  = 30 // two shards per job
	benchBatch      = 2  // 15 batches per shard
	benchBatchDelay = time.Second
	benchNamespace  = "bench"
)

// writeCounter counts the requests of the controller's manager, by kind,
// per second since start.
type writeCounter struct {
	next http.RoundTripper

	mu      sync.Mutex
	start   time.Time
	kinds   map[string]int
	perSec  map[int]int // writes per second since start
	reads   int
	started bool
}

func (c *writeCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	c.note(req.Method, req.URL.Path)
	return c.next.RoundTrip(req)
}

func (c *writeCounter) note(method, path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started {
		return
	}
	if method == http.MethodGet {
		c.reads++
		return
	}
	kind := "other"
	switch {
	case strings.Contains(path, "/bulkjobs/") && strings.HasSuffix(path, "/status"):
		kind = "bulkjob-status"
	case strings.Contains(path, "/bulkjobs"):
		kind = "bulkjob"
	case strings.Contains(path, "/jobs"):
		kind = "job"
	case strings.Contains(path, "/events"):
		kind = "event"
	}
	c.kinds[method+" "+kind]++
	c.perSec[int(time.Since(c.start)/time.Second)]++
}

// begin starts (or restarts) counting.
func (c *writeCounter) begin() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.start, c.started = time.Now(), true
	c.kinds, c.perSec, c.reads = map[string]int{}, map[int]int{}, 0
}

// snapshot stops counting and returns the totals.
func (c *writeCounter) snapshot() (total int, kinds map[string]int, perSec []int, reads int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.started = false
	secs := int(time.Since(c.start)/time.Second) + 1
	perSec = make([]int, secs)
	for s, n := range c.perSec {
		if s < secs {
			perSec[s] = n
		}
		total += n
	}
	return total, c.kinds, perSec, c.reads
}

// slowAnswerer answers every input "found" after delay per batch: a
// processor that takes its time, so progress moves in Redis.
type slowAnswerer struct{ delay time.Duration }

func (a slowAnswerer) Answer(ctx context.Context, payloads []string) ([]jobs.Answer, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(a.delay):
	}
	out := make([]jobs.Answer, len(payloads))
	for i := range out {
		out[i] = jobs.Answer{Outcome: jobs.OutcomeFound, Data: []byte(`{}`)}
	}
	return out, nil
}

func (slowAnswerer) ErrorAnswer() jobs.Answer {
	return jobs.Answer{Outcome: jobs.OutcomeError, Data: []byte(`{}`)}
}

func BenchmarkStatusWrites1000Jobs(b *testing.B) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		b.Skip("KUBEBUILDER_ASSETS is not set (KUBEBUILDER_ASSETS=$(hack/envtest.sh))")
	}
	for range b.N {
		runStatusWrites(b, assets)
	}
}

func runStatusWrites(b *testing.B, assets string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out io.Writer = io.Discard
	if testing.Verbose() {
		out = os.Stderr
	}
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctrl.SetLogger(logr.FromSlogHandler(log.Handler()))

	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	admin, err := env.Start()
	if err != nil {
		b.Fatalf("envtest: %v", err)
	}
	defer func() { _ = env.Stop() }()
	// Like ctrl.GetConfig in a cluster: no client-side rate limit, so the
	// count is what the controller asks for, not what a limiter lets by.
	admin.QPS, admin.Burst = -1, 0
	k8s, err := client.New(admin, client.Options{Scheme: v1alpha1.NewScheme()})
	if err != nil {
		b.Fatal(err)
	}
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}}); err != nil {
		b.Fatal(err)
	}
	rs := testredis.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr, PoolSize: 128})
	defer rdb.Close()

	// The engine (accounts, billing, store) with an executor that makes
	// each accepted job's BulkJob, as kube.Executor does.
	bl := billing.New(rdb, nil)
	store := jobs.NewStore(rdb, bl)
	engine := jobs.NewEngine(store, bl, bulkJobMaker{k8s}, log)
	engine.ShardSize = benchShardSize
	proc := jobs.NewProcessor(store, map[string]jobs.Answerer{"company_enrichment": slowAnswerer{benchBatchDelay}}, log)
	proc.BatchSize = benchBatch
	// As in processor pods (cmd/bulkd): progress is announced.
	proc.Announce = jobs.NewAnnouncer(store, jobs.DefaultAnnounceEvery, log)

	// The controller, counted.
	counter := &writeCounter{}
	mcfg := rest.CopyConfig(admin)
	mcfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter })
	opts := controllers.DefaultOptions()
	opts.Image = "localhost/bulkd:bench"
	mgr, err := controllers.NewManager(mcfg, controllers.ManagerOptions{
		Namespace: benchNamespace, MetricsAddr: "0", HealthAddr: "0", Concurrency: 4,
		Reconciler: opts, Data: store, Shards: proc, Logger: logr.FromSlogHandler(log.Handler()),
	})
	if err != nil {
		b.Fatal(err)
	}
	mctx, stopMgr := context.WithCancel(ctx)
	mdone := make(chan error, 1)
	go func() { mdone <- mgr.Start(mctx) }()
	defer func() { stopMgr(); <-mdone }()

	// 1,000 submissions of 40 distinct inputs, 16 at a time.
	principal := accountstest.PayAsYouGo(b, rdb, nil, "bench", credits.Whole(1_000_000))
	counter.begin()
	setupStart := time.Now()
	ids := make([]string, benchJobs)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	report := func(err error) {
		select {
		case errs <- err:
		default: // one is enough
		}
	}
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < benchJobs; i = int(next.Add(1)) - 1 {
				bl := jobs.NewBuilder("company_enrichment", benchDistinct)
				for k := range benchDistinct {
					s := fmt.Sprintf("job%d-input%d", i, k)
					bl.AddValid(s, s, s)
				}
				j, err := engine.Submit(ctx, principal, bl, jobs.Metering{Price: credits.Whole(1)})
				if err != nil {
					report(err)
					return
				}
				ids[i] = j.ID
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatalf("submit: %v", err)
	default:
	}
	// Every BulkJob has its Job and a first status; then every Job reports
	// a pod started: every BulkJob is Running.
	waitAll(b, k8s, 3*time.Minute, func(bj *v1alpha1.BulkJob) bool { return bj.Status.Phase != "" })
	started := metav1.Now()
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%16 != 0 {
				return
			}
			for _, id := range ids[i:min(i+16, len(ids))] {
				var job batchv1.Job
				if err := k8s.Get(ctx, client.ObjectKey{Namespace: benchNamespace, Name: id}, &job); err != nil {
					report(err)
					return
				}
				job.Status.StartTime, job.Status.Active = &started, 1
				if err := k8s.Status().Update(ctx, &job); err != nil {
					report(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatalf("start Jobs: %v", err)
	default:
	}
	waitAll(b, k8s, 3*time.Minute, func(bj *v1alpha1.BulkJob) bool { return bj.Status.Phase == v1alpha1.PhaseRunning })
	setupTotal, setupKinds, _, _ := counter.snapshot()
	setup := time.Since(setupStart)

	// The processors: one per job, its shards one after the other; each
	// batch takes benchBatchDelay. Starts are spread over two seconds.
	counter.begin()
	start := time.Now()
	var procDone atomic.Int64
	var firstData, lastData atomic.Int64
	pctx, stopProcs := context.WithCancel(ctx)
	defer stopProcs()
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-pctx.Done():
				return
			case <-time.After(time.Duration(i) * 2 * time.Second / benchJobs):
			}
			for shard := range benchDistinct / benchShardSize {
				if err := proc.ProcessShard(pctx, id, shard); err != nil {
					if pctx.Err() == nil {
						b.Errorf("job %s shard %d: %v", id, shard, err)
					}
					return
				}
			}
			procDone.Add(1)
			firstData.CompareAndSwap(0, time.Now().UnixNano())
			lastData.Store(time.Now().UnixNano())
		}()
	}
	wg.Wait()
	processed := time.Since(start)
	if procDone.Load() != benchJobs {
		b.Fatalf("%d of %d jobs processed", procDone.Load(), benchJobs)
	}
	waitAll(b, k8s, 5*time.Minute, func(bj *v1alpha1.BulkJob) bool {
		return bj.Status.Phase == v1alpha1.PhaseCompleted && bj.Status.ProcessedRows == benchDistinct
	})
	window := time.Since(start)
	total, kinds, perSec, reads := counter.snapshot()
	lag := time.Since(time.Unix(0, lastData.Load()))

	// Steady: the whole seconds before the first job completed (only
	// progress moved); the peak second over the run.
	steadySecs := int(time.Unix(0, firstData.Load()).Sub(start) / time.Second)
	steady := 0
	for s := 0; s < steadySecs && s < len(perSec); s++ {
		steady += perSec[s]
	}
	peak := slices.Max(perSec)
	kj, _ := json.Marshal(kinds)
	sj, _ := json.Marshal(setupKinds)
	steadyRate := float64(steady) / float64(max(steadySecs, 1))
	b.Logf("setup (1,000 submissions, every Job started, until every BulkJob is Running): %s, %d controller writes %s", setup.Round(time.Millisecond), setupTotal, sj)
	b.Logf("run: processors %s, first job done after %ds, all Completed after %s (last data completion -> all Completed %s)",
		processed.Round(time.Millisecond), steadySecs, window.Round(time.Millisecond), lag.Round(time.Millisecond))
	b.Logf("run: %d controller writes (%.1f/s over the run; steady, before the first completion: %d writes in %ds = %.1f/s; peak %d in one second), %d reads; %s",
		total, float64(total)/window.Seconds(), steady, steadySecs, steadyRate, peak, reads, kj)
	b.Logf("writes per second: %v", perSec)
	b.ReportMetric(float64(total), "writes")
	b.ReportMetric(steadyRate, "steady_writes/s")
	b.ReportMetric(float64(peak), "peak_writes/s")
	b.ReportMetric(lag.Seconds(), "s_lag")
}

// bulkJobMaker is the engine's executor here: each accepted job becomes a
// BulkJob (what kube.Executor does; that package brings the whole API
// server along).
type bulkJobMaker struct{ c client.Client }

func (m bulkJobMaker) Enqueue(ctx context.Context, j *jobs.Job) error {
	return m.c.Create(ctx, &v1alpha1.BulkJob{
		ObjectMeta: metav1.ObjectMeta{Name: j.ID, Namespace: benchNamespace, Finalizers: []string{v1alpha1.Finalizer}},
		Spec: v1alpha1.BulkJobSpec{Family: v1alpha1.Family(j.Family), Metering: v1alpha1.MeteringCredits, OwnerKeyID: j.KeyID,
			JobID: j.ID, Rows: j.TotalRows, DistinctInputs: j.Distinct, Shards: int32(j.Shards), ShardSize: int32(j.ShardSize), Parallelism: 2},
	})
}

func (m bulkJobMaker) Cancel(ctx context.Context, id string) error {
	return client.IgnoreNotFound(m.c.Delete(ctx, &v1alpha1.BulkJob{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: benchNamespace}}))
}

// waitAll polls until every BulkJob of the benchmark satisfies ok.
func waitAll(b *testing.B, c client.Client, d time.Duration, ok func(*v1alpha1.BulkJob) bool) {
	b.Helper()
	deadline := time.Now().Add(d)
	for {
		var l v1alpha1.BulkJobList
		if err := c.List(context.Background(), &l, client.InNamespace(benchNamespace)); err != nil {
			b.Fatal(err)
		}
		n := 0
		for i := range l.Items {
			if ok(&l.Items[i]) {
				n++
			}
		}
		if n == benchJobs {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("after %s, %d of %d BulkJobs ready", d, n, benchJobs)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
