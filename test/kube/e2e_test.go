package kube_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/controllers"
	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/kube"
	"github.com/bulkd/bulkd/internal/serve"
	"github.com/bulkd/bulkd/test/companyapi"
	"github.com/bulkd/bulkd/test/nodeagent"
)

// (a) A company-enrichment submission through the API in Kubernetes mode
// becomes a BulkJob, runs as an Indexed Job of real processor processes and
// returns exactly what standalone mode returns.
func TestCompanyEnrichmentEndToEnd(t *testing.T) {
	rows := companyapi.ScenarioRows()
	acct, key := h.account(t, credits.Whole(1000))
	a := h.kubeAPI(t)
	start := time.Now()
	sub := a.Submit(key, rows)
	if sub.Status != "submitted" || sub.TotalRows != int64(len(rows)) || sub.TotalInvalid != 2 || sub.CreditsConsumed != 26 {
		t.Fatalf("submission %+v", sub)
	}

	// The BulkJob: a reference to the job in Redis, never the rows.
	bj := h.bulkJob(t, sub.JobID)
	want := v1alpha1.BulkJobSpec{Family: v1alpha1.FamilyCompanyEnrichment, Metering: v1alpha1.MeteringCredits,
		OwnerKeyID: accounts.KeyIDOf(key), JobID: sub.JobID, Rows: int64(len(rows)), DistinctInputs: 26,
		Shards: 3, ShardSize: shardSize, Parallelism: 3}
	if bj.Spec != want {
		t.Fatalf("spec %+v, want %+v", bj.Spec, want)
	}

	st := a.Wait(key, sub.JobID, 60*time.Second)
	t.Logf("completed in %v", time.Since(start))
	if st.TotalProcessed != st.TotalRows || st.Summary["total_pending"] != 0 || st.CompletedAt == nil {
		t.Fatalf("status %+v", st)
	}

	// The status the API showed is the BulkJob's.
	bj = h.bulkJob(t, sub.JobID)
	s := bj.Status
	if s.Phase != v1alpha1.PhaseCompleted || s.ProcessedRows != st.TotalProcessed || s.OutcomeRows("found") != st.Summary["total_found"] ||
		s.OutcomeRows("not_found") != st.Summary["total_not_found"] || s.OutcomeRows("error") != 0 || s.Invalid != 2 ||
		s.Progress != "100%" || s.Retrying != 0 || s.RetryRounds != 0 ||
		s.ShardsSucceeded != 3 || s.ShardsFailed != 0 || s.ShardsActive != 0 || s.ShardProgress != "3/3" ||
		s.StartTime == nil || s.CompletionTime == nil || s.ObservedGeneration != bj.Generation {
		t.Fatalf("BulkJob status %+v", s)
	}
	c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionComplete)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != controllers.ReasonAllShardsSucceeded || c.ObservedGeneration != bj.Generation {
		t.Fatalf("Complete condition %+v", c)
	}
	if !slices.Contains(bj.Finalizers, v1alpha1.Finalizer) {
		t.Fatalf("finalizers %v", bj.Finalizers)
	}

	// One Indexed Job, owned by the BulkJob, within the operator's cap.
	job := h.waitJobFinished(t, sub.JobID)
	if !metav1.IsControlledBy(job, bj) || *job.Spec.Completions != 3 || *job.Spec.Parallelism != parallelCap ||
		*job.Spec.BackoffLimitPerIndex != 2 || job.Status.CompletedIndexes != "0-2" {
		t.Fatalf("Job %+v / %+v", job.Spec, job.Status)
	}
	if hist := h.agent.History(sub.JobID); len(hist) != 3 {
		t.Fatalf("want one successful attempt per shard: %+v", hist)
	}

	// Same rows through standalone mode: same results, same summary.
	sst, sres := standalone(t, rows)
	sameResults(t, a.Results(key, sub.JobID), sres)
	for k, v := range sst.Summary {
		if st.Summary[k] != v {
			t.Fatalf("summary %v, standalone %v", st.Summary, sst.Summary)
		}
	}
	if got := h.balance(t, acct); got != credits.Whole(1000-26) {
		t.Fatalf("balance %s", got)
	}

	// kubectl get bulkjobs.
	cols, cells := h.table(t, sub.JobID)
	if strings.Join(cols, ",") != "Name,Family,Phase,Rows,Processed,Progress,Shards,Queue,Age" {
		t.Fatalf("columns %v", cols)
	}
	if fmt.Sprint(cells[1:7]) != fmt.Sprintf("[company_enrichment Completed %d %d 100%% 3/3]", len(rows), len(rows)) {
		t.Fatalf("row %v", cells)
	}
	waitFor(t, 10*time.Second, "JobCreated and Completed events", func() bool {
		r := h.eventReasons(t, sub.JobID)
		return strings.Contains(r, "JobCreated") && strings.Contains(r, "Completed")
	})
}

// (b) A processor killed in the middle of a shard (after recording part of
// it) is retried; every row is answered exactly once and nothing about the
// charge changes. An eviction (DisruptionTarget) is retried without counting
// against the shard's retries.
func TestProcessorKilledMidShardIsRetried(t *testing.T) {
	for _, c := range []struct {
		name       string
		disruption bool
	}{{"crash", false}, {"eviction", true}} {
		t.Run(c.name, func(t *testing.T) {
			host := "hang-" + c.name + ".example"
			rows := hangRows(host)
			h.web.HangOnce(host)
			acct, key := h.account(t, credits.Whole(1000))
			a := h.kubeAPI(t)
			sub := a.Submit(key, rows)
			killMidShard(t, sub.JobID, host, c.disruption)

			st := a.Wait(key, sub.JobID, 60*time.Second)
			job := h.waitJobFinished(t, sub.JobID)
			var hist1 []nodeagent.Result
			for _, r := range h.agent.History(sub.JobID) {
				if r.Index == 1 {
					hist1 = append(hist1, r)
				}
			}
			wantAction := string(batchv1.PodFailurePolicyActionCount)
			if c.disruption {
				wantAction = string(batchv1.PodFailurePolicyActionIgnore)
			}
			if len(hist1) != 2 || !hist1[0].Killed || hist1[0].Action != wantAction || hist1[1].ExitCode != 0 {
				t.Fatalf("shard 1 attempts %+v", hist1)
			}
			if wantFailed := map[bool]int32{false: 1, true: 0}[c.disruption]; job.Status.Failed != wantFailed {
				t.Fatalf("Job counts %d failed pods, want %d", job.Status.Failed, wantFailed)
			}
			h.likeStandalone(t, a, key, acct, sub.JobID, st, rows, credits.Whole(1000-30))
		})
	}
}

// (b) A shard whose first attempt exits non-zero (Redis unreachable from
// that pod) is retried and completes.
func TestShardFirstAttemptExitingNonZeroIsRetried(t *testing.T) {
	h.setHook(func(at *nodeagent.Attempt) {
		if at.Index == 0 && at.Number == 0 {
			at.Env["BULKD_REDIS_URL"] = "redis://127.0.0.1:1/0"
		}
	})
	t.Cleanup(func() { h.setHook(nil) })
	var rows []in
	for i := 0; i < 12; i++ {
		rows = append(rows, co(10+i))
	}
	acct, key := h.account(t, credits.Whole(100))
	a := h.kubeAPI(t)
	sub := a.Submit(key, rows)
	st := a.Wait(key, sub.JobID, 60*time.Second)
	h.waitJobFinished(t, sub.JobID)
	var hist0 []nodeagent.Result
	for _, r := range h.agent.History(sub.JobID) {
		if r.Index == 0 {
			hist0 = append(hist0, r)
		}
	}
	if len(hist0) != 2 || hist0[0].ExitCode != v1alpha1.ProcessorExitRetry || hist0[1].ExitCode != 0 {
		t.Fatalf("shard 0 attempts %+v", hist0)
	}
	h.likeStandalone(t, a, key, acct, sub.JobID, st, rows, credits.Whole(100-12))
}

// (c) A shard that fails for good: the inputs it answered keep their
// answers, the rest are answered as error (and stay charged: nothing is
// refunded after acceptance), and the BulkJob completes with a condition
// saying shards failed.
func TestShardFailingForGoodIsAnsweredAsErrors(t *testing.T) {
	host := "hang-fail.example"
	rows := hangRows(host)
	h.web.HangOnce(host)
	h.setHook(func(at *nodeagent.Attempt) {
		if at.Index == 1 && at.Number > 0 { // every retry finds Redis unreachable
			at.Env["BULKD_REDIS_URL"] = "redis://127.0.0.1:1/0"
		}
	})
	t.Cleanup(func() { h.setHook(nil) })
	acct, key := h.account(t, credits.Whole(1000))
	a := h.kubeAPI(t)
	sub := a.Submit(key, rows)
	killMidShard(t, sub.JobID, host, false)

	st := a.Wait(key, sub.JobID, 60*time.Second)
	bj := h.waitBulkJob(t, sub.JobID, 10*time.Second, "completed", completed)
	s := bj.Status
	if s.ShardsFailed != 1 || s.ShardsSucceeded != 2 || s.OutcomeRows("error") != 5 || s.ProcessedRows != int64(len(rows)) || !conditionTrue(bj, v1alpha1.ConditionShardsFailed) {
		t.Fatalf("BulkJob status %+v", s)
	}
	if c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionComplete); c == nil || c.Status != metav1.ConditionTrue || c.Reason != controllers.ReasonShardsFailed {
		t.Fatalf("Complete condition %+v", c)
	}
	if st.Summary["total_error"] != 5 || st.TotalProcessed != st.TotalRows {
		t.Fatalf("status %+v", st)
	}
	job := h.waitJobFinished(t, sub.JobID)
	if job.Status.FailedIndexes == nil || *job.Status.FailedIndexes != "1" {
		t.Fatalf("Job failedIndexes %v", job.Status.FailedIndexes)
	}

	// Rows 15..19 (the tail of shard 1, unanswered when it failed) are
	// errors; every other row is what standalone mode answers.
	h.exactlyOnce(t, sub.JobID, st)
	res := a.Results(key, sub.JobID)
	_, sres := standalone(t, rows)
	for i := range rows {
		if i >= 15 && i < 20 {
			r := res[i]
			if r["result"] != "error" || r["credits_consumed"] != 1.0 || r["name"] != nil || r["network_id"] != nil {
				t.Fatalf("row %d: want an error row: %v", i, r)
			}
			continue
		}
		sameResults(t, res[i:i+1], sres[i:i+1])
	}
	if got := h.balance(t, acct); got != credits.Whole(1000-30) {
		t.Fatalf("balance %s: nothing is refunded after acceptance", got)
	}
	waitFor(t, 10*time.Second, "a ShardsFailed event", func() bool {
		return strings.Contains(h.eventReasons(t, sub.JobID), "ShardsFailed")
	})
}

// (d) Deleting a BulkJob deletes its data in Redis (finalizer).
func TestDeletingABulkJobDeletesItsData(t *testing.T) {
	_, key := h.account(t, credits.Whole(10))
	a := h.kubeAPI(t)
	sub := a.Submit(key, []in{co(0), co(1), co(2)})
	a.Wait(key, sub.JobID, 30*time.Second)
	if len(h.jobKeys(t, sub.JobID)) == 0 {
		t.Fatal("no job data to delete")
	}
	if err := h.k8s.Delete(context.Background(), h.bulkJob(t, sub.JobID)); err != nil {
		t.Fatal(err)
	}
	h.waitGone(t, sub.JobID)
	if keys := h.jobKeys(t, sub.JobID); len(keys) != 0 {
		t.Fatalf("job data left: %v", keys)
	}
	if code, _ := a.Status(key, sub.JobID); code != http.StatusNotFound {
		t.Fatalf("status of a deleted job: %d", code)
	}
}

// (d) BulkJobs past the retention are deleted, with their data.
func TestRetentionDeletesOldBulkJobs(t *testing.T) {
	_, key := h.account(t, credits.Whole(10))
	a := h.kubeAPI(t)
	sub := a.Submit(key, []in{co(4), co(5)})
	a.Wait(key, sub.JobID, 30*time.Second)
	h.waitBulkJob(t, sub.JobID, 10*time.Second, "completed", completed)

	h.clock.Advance(retention + time.Minute)
	t.Cleanup(func() { h.clock.Advance(-retention - time.Minute) })
	// The controller looks again when the BulkJob changes (or when its
	// retention requeue comes): touch it.
	bj := h.bulkJob(t, sub.JobID)
	patch := client.MergeFrom(bj.DeepCopy())
	bj.Annotations = map[string]string{"test/touch": "1"}
	if err := h.k8s.Patch(context.Background(), bj, patch); err != nil {
		t.Fatal(err)
	}
	h.waitGone(t, sub.JobID)
	if keys := h.jobKeys(t, sub.JobID); len(keys) != 0 {
		t.Fatalf("job data left: %v", keys)
	}
}

// (e) When the BulkJob cannot be created, the submission fails, the charge
// is reversed and no job data remains.
func TestFailedBulkJobCreateRefunds(t *testing.T) {
	nobody, err := h.env.AddUser(envtestUser("nobody"), nil)
	if err != nil {
		t.Fatal(err)
	}
	denied, err := client.New(nobody.Config(), client.Options{Scheme: v1alpha1.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		ex   *kube.Executor
		want func(error) bool
	}{
		{"the namespace does not exist", &kube.Executor{Client: h.k8s, Namespace: "no-such-namespace", Parallelism: 4}, apierrors.IsNotFound},
		{"RBAC forbids creating BulkJobs", &kube.Executor{Client: denied, Namespace: namespace, Parallelism: 4}, apierrors.IsForbidden},
	} {
		t.Run(c.name, func(t *testing.T) {
			parts, err := serve.BuildWith(apiConfig(), h.rdb, h.log, serve.Options{Executor: c.ex})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(parts.API)
			t.Cleanup(srv.Close)
			a := api{T: t, URL: srv.URL}
			acct, key := h.account(t, credits.Whole(100))
			before := h.allJobKeys(t)
			bjsBefore := h.bulkJobCount(t)

			code, body := a.Do(http.MethodPost, bulkPath, key, map[string]any{"input": []in{co(0), co(1), co(2)}})
			if code != http.StatusInternalServerError {
				t.Fatalf("submit: %d %s", code, body)
			}
			if got := h.balance(t, acct); got != credits.Whole(100) {
				t.Fatalf("balance %s: the charge was not reversed", got)
			}
			if after := h.allJobKeys(t); !slices.Equal(before, after) {
				t.Fatalf("job data left: %v", after)
			}
			if n := h.bulkJobCount(t); n != bjsBefore {
				t.Fatalf("%d BulkJobs, had %d", n, bjsBefore)
			}
			pending, err := h.rdb.ZRange(context.Background(), "bulkd:{jobs}:pending", 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range pending {
				if strings.HasSuffix(p, "|"+acct) {
					t.Fatalf("submission mark left (rollback incomplete): %s", p)
				}
			}
			// The API answered 500 for the reason the test set up.
			err = c.ex.Enqueue(context.Background(), fakeJob())
			if !c.want(err) {
				t.Fatalf("executor error %v", err)
			}
		})
	}
}

// hangRows: 3 shards of 10 here, so input 15 is in the middle of shard 1,
// which records inputs 10-14 (batches of 5), then blocks.
var hangRows = companyapi.HangRows

// killMidShard waits for shard 1 to block on host, checks it is half done,
// and kills its process.
func killMidShard(t *testing.T, jobID, host string, disruption bool) {
	t.Helper()
	h.web.WaitHang(t, host, 30*time.Second)
	idx := make([]int, 10)
	for i := range idx {
		idx[i] = 10 + i
	}
	done, err := h.parts.Processor.Store.Answered(context.Background(), jobID, idx)
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{true, true, true, true, true, false, false, false, false, false}
	if !slices.Equal(done, want) {
		t.Fatalf("shard 1 answered %v before the kill, want its first batch only", done)
	}
	if err := h.agent.Kill(jobID, 1, disruption); err != nil {
		t.Fatal(err)
	}
}

// waitJobFinished waits for the BulkJob's Job to be Complete or Failed
// (every pod has ended).
func (h *harness) waitJobFinished(t *testing.T, id string) *batchv1.Job {
	t.Helper()
	var job batchv1.Job
	waitFor(t, 15*time.Second, "Job "+id+" finished", func() bool {
		if err := h.k8s.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: id}, &job); err != nil {
			t.Fatal(err)
		}
		for _, c := range job.Status.Conditions {
			if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == "True" {
				return true
			}
		}
		return false
	})
	return &job
}

func (h *harness) waitGone(t *testing.T, id string) {
	t.Helper()
	waitFor(t, 15*time.Second, "BulkJob "+id+" deleted", func() bool {
		var bj v1alpha1.BulkJob
		return apierrors.IsNotFound(h.k8s.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: id}, &bj))
	})
}

func (h *harness) allJobKeys(t *testing.T) []string {
	t.Helper()
	keys, err := h.rdb.Keys(context.Background(), "bulkd:job:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}

func (h *harness) bulkJobCount(t *testing.T) int {
	t.Helper()
	var l v1alpha1.BulkJobList
	if err := h.k8s.List(context.Background(), &l); err != nil {
		t.Fatal(err)
	}
	return len(l.Items)
}

// table is `kubectl get bulkjob NAME`: the column names and the row.
func (h *harness) table(t *testing.T, name string) ([]string, []string) {
	t.Helper()
	return h.tableIn(t, namespace, name)
}

// tableIn is table for a BulkJob of namespace ns.
func (h *harness) tableIn(t *testing.T, namespace, name string) ([]string, []string) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := cs.RESTClient().Get().AbsPath("/apis/bulkd.io/v1alpha1/namespaces", namespace, "bulkjobs", name).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var tab metav1.Table
	if err := json.Unmarshal(raw, &tab); err != nil {
		t.Fatal(err)
	}
	var cols, cells []string
	for _, c := range tab.ColumnDefinitions {
		if c.Priority == 0 {
			cols = append(cols, c.Name)
		}
	}
	if len(tab.Rows) != 1 {
		t.Fatalf("table rows %d", len(tab.Rows))
	}
	for i, c := range tab.Rows[0].Cells {
		if tab.ColumnDefinitions[i].Priority == 0 {
			cells = append(cells, fmt.Sprint(c))
		}
	}
	return cols, cells
}

func (h *harness) exactlyOnce(t *testing.T, jobID string, st jobStatus) {
	companyapi.ExactlyOnce(t, h.parts.Processor.Store, h.rdb, jobID, st)
}

// likeStandalone checks a completed job of rows: every input answered
// exactly once, the results standalone mode gives, and the account left
// with balance (nothing refunded after acceptance).
func (h *harness) likeStandalone(t *testing.T, a api, key, acct, jobID string, st jobStatus, rows []in, balance credits.Amount) {
	t.Helper()
	h.exactlyOnce(t, jobID, st)
	_, sres := standalone(t, rows)
	sameResults(t, a.Results(key, jobID), sres)
	if got := h.balance(t, acct); got != balance {
		t.Fatalf("balance %s, want %s", got, balance)
	}
}
