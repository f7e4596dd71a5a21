package kube_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/controllers"
	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/kubeapi"
	"github.com/bulkd/bulkd/internal/serve"
	"github.com/bulkd/bulkd/test/nodeagent"
)

// The admission tests run each in a namespace of their own, with a
// controller of their own (its budgets or Kueue mode), a node agent and an
// API server in Kubernetes mode for that namespace, on the suite's envtest
// and Redis: what they hold and queue cannot slow the other tests down.

// fleet is one such namespace.
type fleet struct {
	ns    string
	api   api
	agent *nodeagent.Agent
	gates string // directory of the files that release held attempts

	mu      sync.Mutex
	hold    map[string]bool   // job ids whose attempts wait for their file
	started []string          // "<job>/<index>" of each attempt, in start order
	account map[string]string // job id -> account, of the jobs submitted
}

var fleetSeq atomic.Int32

// startFleet starts a fleet whose controller has the suite's options
// changed by tweak; every BulkJob's parallelism is capped at 2.
func (h *harness) startFleet(t *testing.T, tweak func(*controllers.Options)) *fleet {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &fleet{ns: fmt.Sprintf("bulkd-fair-%d", fleetSeq.Add(1)), gates: t.TempDir(), hold: map[string]bool{}, account: map[string]string{}}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bulkd-redis", Namespace: f.ns}, StringData: map[string]string{"redis-url": h.redisURL}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bulkd-processor", Namespace: f.ns}, Data: processorConfig()},
	}
	for _, o := range objs {
		if err := h.k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.ClusterRole
	if err := yaml.Unmarshal(b, &role); err != nil {
		t.Fatal(err)
	}
	cfg, err := h.userWithRoleIn(ctx, f.ns, "bulkd-controller-"+f.ns, &role, []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	bcfg := config.Default()
	bcfg.RedisURL = h.redisURL
	proc, err := serve.NewProcessor(bcfg, h.rdb, h.log)
	if err != nil {
		t.Fatal(err)
	}
	opts := controllers.DefaultOptions()
	opts.Image = "localhost/bulkd:e2e"
	opts.ServiceAccount = "bulkd-processor"
	opts.RedisSecretName, opts.RedisSecretKey = "bulkd-redis", "redis-url"
	opts.ConfigMapName = "bulkd-processor"
	opts.MaxParallelism = 2
	opts.BackoffLimitPerIndex = 2
	opts.ProcessorTimeout = time.Minute
	opts.Retention = retention
	tweak(&opts)
	mgr, err := controllers.NewManager(cfg, controllers.ManagerOptions{
		Namespace: f.ns, MetricsAddr: "0", HealthAddr: "0", LeaderElect: true, Concurrency: 4,
		Reconciler: opts, Data: proc.Store, Shards: proc, Plans: accounts.NewStore(h.rdb, nil),
		Logger: logr.FromSlogHandler(h.log.Handler()), SkipNameValidation: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	select {
	case <-mgr.Elected():
	case err := <-done:
		t.Fatalf("controller manager: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("controller manager not elected after 30s")
	}

	f.agent = nodeagent.New(h.k8s, f.ns, map[string]string{"bulkd": h.bin})
	f.agent.BaseEnv = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir()}
	if testing.Verbose() {
		f.agent.Output = os.Stderr
		f.agent.Logf = func(format string, a ...any) { h.log.Info(fmt.Sprintf(format, a...), "ns", f.ns) }
	}
	f.agent.BeforeStart = f.beforeStart
	agentDone := make(chan struct{})
	go func() { f.agent.Run(ctx); close(agentDone) }()

	apiCfg, err := h.userWithRoleIn(ctx, f.ns, "bulkd-apiserver-"+f.ns, nil, []rbacv1.PolicyRule{
		{APIGroups: []string{"bulkd.io"}, Resources: []string{"bulkjobs"}, Verbs: []string{"create", "get", "list", "watch", "delete"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	kc := config.DefaultKube()
	kc.Namespace = f.ns
	kc.Parallelism = 4
	ready := make(chan string, 1)
	apiDone := make(chan error, 1)
	go func() { apiDone <- kubeapi.Run(ctx, apiCfg, apiConfig(), kc, h.log, io.Discard, ready) }()
	select {
	case addr := <-ready:
		f.api = api{T: t, URL: "http://" + addr}
	case err := <-apiDone:
		t.Fatalf("apiserver: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("apiserver not ready after 30s")
	}
	t.Cleanup(func() {
		cancel()
		<-agentDone
		<-apiDone
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("controller manager: %v", err)
		}
	})
	return f
}

// beforeStart records each attempt and makes those of held jobs wait for
// their file: a shard that holds its pod slot as long as the test wants.
func (f *fleet) beforeStart(at *nodeagent.Attempt) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started = append(f.started, fmt.Sprintf("%s/%d", at.Job, at.Index))
	if !f.hold[at.Job] {
		return
	}
	gate := filepath.Join(f.gates, fmt.Sprintf("%s-%d", at.Job, at.Index))
	at.Args = append([]string{"sh", "-c", `g=$1; shift; while [ ! -e "$g" ]; do sleep 0.05; done; exec "$@"`, "sh", gate, h.bin}, at.Args[1:]...)
}

// release lets a held attempt of job's index go on.
func (f *fleet) release(t *testing.T, job string, index int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(f.gates, fmt.Sprintf("%s-%d", job, index)), nil, 0o600); err != nil {
		t.Fatal(err)
	}
}

// releaseAll lets every attempt of the held jobs go, now and later.
func (f *fleet) releaseAll(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	f.hold = map[string]bool{}
	f.mu.Unlock()
	for _, s := range f.startedList() {
		job, idx, _ := strings.Cut(s, "/")
		if err := os.WriteFile(filepath.Join(f.gates, job+"-"+idx), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func (f *fleet) startedList() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.started...)
}

// submit submits rows for acct (with key), its attempts held until
// released when hold is set.
func (f *fleet) submit(key, acct string, rows []in, hold bool) string {
	sub := f.api.Submit(key, rows)
	f.mu.Lock()
	f.account[sub.JobID] = acct
	if hold {
		f.hold[sub.JobID] = true
	}
	f.mu.Unlock()
	return sub.JobID
}

// running is the processes running (shards started and not ended), by
// account: what the node agent runs, whether or not pods are gated.
func (f *fleet) running() map[string]int {
	f.mu.Lock()
	started := map[string]int{}
	for _, s := range f.started {
		job, _, _ := strings.Cut(s, "/")
		started[job]++
	}
	accts := maps.Clone(f.account)
	f.mu.Unlock()
	out := map[string]int{}
	for job, n := range started {
		id, _, _ := strings.Cut(job, "-retry-")
		out[accts[id]] += n - len(f.agent.History(job))
	}
	return out
}

// watchBudget samples the running shards until the test ends and fails it
// if more than global ran at once, or more than perAccount of one account.
func (f *fleet) watchBudget(t *testing.T, global, perAccount int) {
	stop := make(chan struct{})
	done := make(chan string, 1)
	go func() {
		worst := ""
		defer func() { done <- worst }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			all := 0
			for acct, n := range f.running() {
				all += n
				if n > perAccount && worst == "" {
					worst = fmt.Sprintf("%d shards of %s ran at once (budget %d)", n, acct, perAccount)
				}
			}
			if all > global && worst == "" {
				worst = fmt.Sprintf("%d shards ran at once (budget %d)", all, global)
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		if w := <-done; w != "" {
			t.Error(w)
		}
	})
}

func (f *fleet) bulkJob(t *testing.T, id string) *v1alpha1.BulkJob {
	t.Helper()
	var bj v1alpha1.BulkJob
	if err := h.k8s.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: id}, &bj); err != nil {
		t.Fatal(err)
	}
	return &bj
}

func (f *fleet) job(t *testing.T, name string) *batchv1.Job {
	t.Helper()
	var job batchv1.Job
	if err := h.k8s.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, &job); err != nil {
		t.Fatal(err)
	}
	return &job
}

// companyRows are n distinct company rows starting at company from.
func companyRows(from, n int) []in {
	rows := make([]in, n)
	for i := range rows {
		rows[i] = co(from + i)
	}
	return rows
}

// The scenario with a budget of 3 pods: account A's three big jobs
// hold the whole budget (their shards wait until the test releases them);
// account B's 5-row job, submitted next, is Queued (first in line, shown
// by kubectl), and takes the first slot one of A's shards frees, ahead of
// A's remaining shards. The budget is never exceeded.
//
// Today's controller (every Job created running) fails it: B's pod starts
// at once next to A's six.
func TestFairShareSmallJobOfAnotherAccountGoesFirst(t *testing.T) {
	f := h.startFleet(t, func(o *controllers.Options) { o.MaxRunningShards, o.MaxRunningShardsPerAccount = 3, 3 })
	f.watchBudget(t, 3, 3)
	acctA, keyA := h.account(t, credits.Whole(1000))
	acctB, keyB := h.account(t, credits.Whole(1000))
	var aJobs []string
	for i := range 3 {
		// Each job: 40 inputs, 4 shards of 10, 2 at once.
		aJobs = append(aJobs, f.submit(keyA, acctA, companyRows(100*i, 40), true))
	}
	waitFor(t, 20*time.Second, "A holding the budget", func() bool { return f.running()[acctA] >= 3 })

	start := time.Now()
	b := f.api.Submit(keyB, companyRows(300, 5))
	f.mu.Lock()
	f.account[b.JobID] = acctB
	f.mu.Unlock()
	waitFleetBulkJob(t, f, b.JobID, "Queued first in line", func(bj *v1alpha1.BulkJob) bool {
		return bj.Status.Phase == v1alpha1.PhaseQueued && bj.Status.QueuePosition == 1
	})
	if _, st := f.api.Status(keyB, b.JobID); st.Status != "running" {
		t.Fatalf("a Queued job reads %q in the API, want running", st.Status)
	}
	if !ptr.Deref(f.job(t, b.JobID).Spec.Suspend, false) {
		t.Fatal("B's Job is not suspended while it waits")
	}
	cols, cells := h.tableIn(t, f.ns, b.JobID)
	if i := indexOf(cols, "Queue"); i < 0 || cells[i] != "1" || cells[indexOf(cols, "Phase")] != "Queued" {
		t.Fatalf("kubectl get bulkjobs: %v %v", cols, cells)
	}
	// Nothing of A starts either: the budget is held.
	time.Sleep(500 * time.Millisecond)
	if r := f.running(); r[acctB] != 0 || len(f.startedList()) != 3 {
		t.Fatalf("running %v, started %v", r, f.startedList())
	}

	// One of A's shards ends: its slot goes to B.
	first := f.startedList()[0]
	job, idx, _ := strings.Cut(first, "/")
	f.release(t, job, atoi(t, idx))
	st := f.api.Wait(keyB, b.JobID, 30*time.Second)
	t.Logf("B completed %v after its submission (A's shard held for part of it)", time.Since(start).Round(time.Millisecond))
	if st.TotalProcessed != 5 {
		t.Fatalf("B: %+v", st)
	}
	started := f.startedList()
	if len(started) < 4 || !strings.HasPrefix(started[3], b.JobID) {
		t.Fatalf("after A's first shard ended, the next started was %v; want B's shard", started[3:])
	}
	waitFor(t, 10*time.Second, "Queued and Admitted events", func() bool {
		r := h.eventReasonsIn(t, f.ns, b.JobID)
		return strings.Contains(r, "Queued") && strings.Contains(r, "Admitted")
	})

	// The rest of A runs to the end within the budget.
	f.releaseAll(t)
	for _, id := range aJobs {
		if st := f.api.Wait(keyA, id, 60*time.Second); st.TotalProcessed != 40 {
			t.Fatalf("A's job %s: %+v", id, st)
		}
	}
}

// A per-account budget below the global one: A's three jobs never hold
// more than 2 pods, and B's job starts at once on the rest of the budget.
func TestFairSharePerAccountBudget(t *testing.T) {
	f := h.startFleet(t, func(o *controllers.Options) { o.MaxRunningShards, o.MaxRunningShardsPerAccount = 4, 2 })
	f.watchBudget(t, 4, 2)
	acctA, keyA := h.account(t, credits.Whole(1000))
	_, keyB := h.account(t, credits.Whole(1000))
	var aJobs []string
	for i := range 3 {
		aJobs = append(aJobs, f.submit(keyA, acctA, companyRows(100*i, 40), true))
	}
	waitFor(t, 20*time.Second, "A at its budget", func() bool { return f.running()[acctA] >= 2 })
	start := time.Now()
	b := f.submit(keyB, "B", companyRows(300, 5), false)
	if st := f.api.Wait(keyB, b, 30*time.Second); st.TotalProcessed != 5 {
		t.Fatalf("B: %+v", st)
	}
	t.Logf("B completed %v after its submission, A's shards held all along", time.Since(start).Round(time.Millisecond))
	if r := f.running(); r[acctA] != 2 {
		t.Fatalf("running %v", r)
	}
	f.releaseAll(t)
	for _, id := range aJobs {
		if st := f.api.Wait(keyA, id, 60*time.Second); st.TotalProcessed != 40 {
			t.Fatalf("A's job %s: %+v", id, st)
		}
	}
}

// Kueue mode: the Jobs carry the queue label (bulkd-<plan>), start
// suspended, and stay so (bulkd does not admit them); un-suspended by the
// test acting as Kueue, they run and the job completes.
func TestKueueModeJobsWaitForKueue(t *testing.T) {
	f := h.startFleet(t, func(o *controllers.Options) { o.KueueQueueName = "bulkd-{plan}" })
	_, key := h.account(t, credits.Whole(1000))
	sub := f.api.Submit(key, companyRows(0, 25))
	waitFleetBulkJob(t, f, sub.JobID, "Queued", func(bj *v1alpha1.BulkJob) bool { return bj.Status.Phase == v1alpha1.PhaseQueued })
	job := f.job(t, sub.JobID)
	if job.Labels[v1alpha1.KueueQueueLabel] != "bulkd-none" || !ptr.Deref(job.Spec.Suspend, false) || len(job.Spec.Template.Spec.SchedulingGates) != 0 {
		t.Fatalf("Job labels %v, suspend %v, gates %v", job.Labels, job.Spec.Suspend, job.Spec.Template.Spec.SchedulingGates)
	}
	time.Sleep(time.Second)
	if job = f.job(t, sub.JobID); !ptr.Deref(job.Spec.Suspend, false) || len(f.startedList()) != 0 {
		t.Fatal("the Job started without Kueue")
	}
	if _, st := f.api.Status(key, sub.JobID); st.Status != "running" {
		t.Fatalf("status %q", st.Status)
	}
	// Kueue admits the workload: it un-suspends the Job.
	job.Spec.Suspend = ptr.To(false)
	if err := h.k8s.Update(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	if st := f.api.Wait(key, sub.JobID, 30*time.Second); st.TotalProcessed != 25 {
		t.Fatalf("status %+v", st)
	}
	waitFleetBulkJob(t, f, sub.JobID, "Completed", completed)
	waitFor(t, 10*time.Second, "Queued and Admitted events", func() bool {
		r := h.eventReasonsIn(t, f.ns, sub.JobID)
		return strings.Contains(r, "Queued") && strings.Contains(r, "Admitted")
	})
}

func waitFleetBulkJob(t *testing.T, f *fleet, id, what string, ok func(*v1alpha1.BulkJob) bool) *v1alpha1.BulkJob {
	t.Helper()
	var bj v1alpha1.BulkJob
	waitFor(t, 20*time.Second, "BulkJob "+id+" "+what, func() bool {
		err := h.k8s.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: id}, &bj)
		return err == nil && ok(&bj)
	})
	return &bj
}

func indexOf(xs []string, x string) int {
	for i, s := range xs {
		if s == x {
			return i
		}
	}
	return -1
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}
