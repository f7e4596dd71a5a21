//go:build e2ecluster

package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/test/companyapi"
)

// (a) A submission becomes a BulkJob, an Indexed Job of processor pods runs
// it, and every result row is what standalone mode returns.
func TestSubmissionRunsAsIndexedJob(t *testing.T) {
	rows := companyapi.ScenarioRows()
	for i := 100; i < 4100; i++ { // 4,000 more distinct inputs: 3 shards of 2,000
		rows = append(rows, co(i))
	}
	const distinct = 26 + 4000
	acct, key := account(t, credits.Whole(10_000))
	a := clusterAPI(t)
	start := time.Now()
	sub := a.Submit(key, rows)
	timing(t, "(a) submit "+fmt.Sprint(len(rows))+" rows", time.Since(start))
	if sub.Status != "submitted" || sub.TotalRows != int64(len(rows)) || sub.TotalInvalid != 2 || sub.CreditsConsumed != distinct {
		t.Fatalf("submission %+v", sub)
	}
	w := watchPods(t, sub.JobID)
	bj, err := bulkJob(t, sub.JobID)
	if err != nil {
		t.Fatalf("BulkJob of the submission: %v", err)
	}
	if bj.Spec.JobID != sub.JobID || bj.Spec.Rows != int64(len(rows)) || bj.Spec.DistinctInputs != distinct || bj.Spec.Shards != 3 {
		t.Fatalf("BulkJob spec %+v", bj.Spec)
	}
	var job *batchv1.Job
	waitFor(t, 60*time.Second, "the Indexed Job", func() bool {
		job, err = getJob(t, sub.JobID)
		return err == nil
	})
	timing(t, "(a) submit -> Job created", time.Since(start))
	if job.Spec.CompletionMode == nil || *job.Spec.CompletionMode != batchv1.IndexedCompletion || *job.Spec.Completions != 3 ||
		!metav1.IsControlledBy(job, bj) {
		t.Fatalf("Job spec %+v", job.Spec)
	}
	st := a.Wait(key, sub.JobID, 5*time.Minute)
	timing(t, "(a) submit -> completed", time.Since(start))
	job = waitJobFinished(t, sub.JobID, 60*time.Second)
	seen := w.Stop()
	t.Logf("processor pods seen: %d; Job succeeded=%d failed=%d completedIndexes=%s", len(seen), job.Status.Succeeded, job.Status.Failed, job.Status.CompletedIndexes)
	if job.Status.CompletedIndexes != "0-2" || job.Status.Succeeded != 3 || len(seen) < 3 {
		t.Fatalf("Job status %+v, pods seen %v", job.Status, seen)
	}
	if st.TotalProcessed != st.TotalRows || st.Summary["total_pending"] != 0 {
		t.Fatalf("status %+v", st)
	}
	waitFor(t, 30*time.Second, "BulkJob Completed", func() bool {
		bj, err = bulkJob(t, sub.JobID)
		return err == nil && bj.Status.Phase == v1alpha1.PhaseCompleted
	})
	if s := bj.Status; s.ProcessedRows != st.TotalRows || s.ShardsSucceeded != 3 || s.ShardsFailed != 0 || s.Invalid != 2 ||
		s.OutcomeRows("found") != st.Summary["total_found"] || s.OutcomeRows("not_found") != st.Summary["total_not_found"] || s.Progress != "100%" {
		t.Fatalf("BulkJob status %+v", s)
	}
	exactlyOnce(t, sub.JobID, st)
	got := a.Results(key, sub.JobID)
	sst, want := standalone(t, rows)
	sameResults(t, got, want)
	for k, v := range sst.Summary {
		if st.Summary[k] != v {
			t.Fatalf("summary %v, standalone %v", st.Summary, sst.Summary)
		}
	}
	if b := balance(t, acct); b != credits.Whole(10_000-distinct) {
		t.Fatalf("balance %s", b)
	}
}

// hangRows: one shard of 30 inputs here, so with batches of 5 the
// processor records inputs 0-14, then blocks on input 15.
var hangRows = companyapi.HangRows

// (b) A processor pod deleted in the middle of its shard: the index is run
// again by a new pod, every row is answered exactly once, the charge stays.
func TestProcessorPodDeletedMidShard(t *testing.T) {
	host := "hang-pod-delete.example"
	rows := hangRows(host)
	h.web.HangOnce(host)
	acct, key := account(t, credits.Whole(1000))
	a := clusterAPI(t)
	start := time.Now()
	sub := a.Submit(key, rows)
	w := watchPods(t, sub.JobID)
	h.web.WaitHang(t, host, 120*time.Second)
	// Which pod is it? The only Running one of index 0. The process can
	// reach the website before the kubelet has reported the pod Running
	// (its status sync lags by up to a second or two), so wait for it.
	var victim *corev1.Pod
	for deadline := time.Now().Add(30 * time.Second); victim == nil && time.Now().Before(deadline); {
		for _, p := range jobPods(t, sub.JobID) {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				victim = &p
				break
			}
		}
		if victim == nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if victim == nil {
		t.Fatal("no running processor pod within 30 s of the shard reaching the website")
	}
	zero := int64(0)
	if err := h.cs.CoreV1().Pods(h.ns).Delete(context.Background(), victim.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	idx := make([]int, 30)
	for i := range idx {
		idx[i] = i
	}
	done, err := h.parts.Processor.Store.Answered(context.Background(), sub.JobID, idx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(done[:15], slices.Repeat([]bool{true}, 15)) || slices.Contains(done[15:], true) {
		t.Fatalf("answered before the delete %v, want inputs 0-14 only", done)
	}
	t.Logf("deleted pod %s (index %d) mid-shard, %v after submit", victim.Name, podIndex(victim), time.Since(start).Round(time.Millisecond))

	st := a.Wait(key, sub.JobID, 3*time.Minute)
	timing(t, "(b) pod delete: submit -> completed", time.Since(start))
	job := waitJobFinished(t, sub.JobID, 60*time.Second)
	seen := w.Stop()
	var attempts int
	for _, i := range seen {
		if i == 0 {
			attempts++
		}
	}
	if attempts < 2 || job.Status.CompletedIndexes != "0" {
		t.Fatalf("index 0 ran in %d pods (want a retry); Job status %+v", attempts, job.Status)
	}
	exactlyOnce(t, sub.JobID, st)
	_, want := standalone(t, rows)
	sameResults(t, a.Results(key, sub.JobID), want)
	if b := balance(t, acct); b != credits.Whole(1000-30) {
		t.Fatalf("balance %s, want 970", b)
	}
}

// (b) Restarting the controller Deployment in the middle of a job: the job
// still completes, exactly once.
func TestControllerRestartMidJob(t *testing.T) {
	var rows []in
	for i := 10_000; i < 50_000; i++ { // 20 shards, 4 at a time
		rows = append(rows, co(i))
	}
	acct, key := account(t, credits.Whole(50_000))
	a := clusterAPI(t)
	start := time.Now()
	sub := a.Submit(key, rows)
	waitFor(t, 60*time.Second, "a running processor pod", func() bool {
		for _, p := range jobPods(t, sub.JobID) {
			if p.Status.Phase == corev1.PodRunning {
				return true
			}
		}
		return false
	})
	ctx := context.Background()
	deps := h.cs.AppsV1().Deployments(h.ns)
	name := release + "-controller"
	before, err := deps.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{"kubectl.kubernetes.io/restartedAt": time.Now().Format(time.RFC3339Nano)}}}}})
	oldPods, err := h.cs.CoreV1().Pods(h.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=controller"})
	if err != nil || len(oldPods.Items) == 0 {
		t.Fatalf("controller pods: %v %d", err, len(oldPods.Items))
	}
	bj, err := bulkJob(t, sub.JobID)
	if err != nil || bj.Status.Phase == v1alpha1.PhaseCompleted {
		t.Fatalf("BulkJob before the restart: %v %+v", err, bj.Status)
	}
	if _, err := deps.Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	restartAt := time.Since(start)
	t.Logf("controller restart requested %v after submit (BulkJob %s, %s shards)", restartAt.Round(time.Millisecond), bj.Status.Phase, bj.Status.ShardProgress)
	// The old controller pod goes away; what did the BulkJob look like then?
	waitFor(t, 3*time.Minute, "the old controller pod gone", func() bool {
		for _, p := range oldPods.Items {
			if _, err := h.cs.CoreV1().Pods(h.ns).Get(ctx, p.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false
			}
		}
		return true
	})
	if bj, err = bulkJob(t, sub.JobID); err == nil {
		t.Logf("old controller pod gone %v after submit; BulkJob then: phase %q, shards %s", time.Since(start).Round(time.Millisecond), bj.Status.Phase, bj.Status.ShardProgress)
	}
	waitFor(t, 3*time.Minute, "the restarted controller rolled out", func() bool {
		d, err := deps.Get(ctx, name, metav1.GetOptions{})
		return err == nil && d.Status.ObservedGeneration > before.Generation && d.Status.UpdatedReplicas == 1 &&
			d.Status.ReadyReplicas == 1 && d.Status.Replicas == 1
	})
	timing(t, "(b) controller rollout restart (from request)", time.Since(start)-restartAt)
	st := a.Wait(key, sub.JobID, 5*time.Minute)
	timing(t, "(b) controller restart: submit -> completed", time.Since(start))
	waitFor(t, 60*time.Second, "BulkJob Completed", func() bool {
		bj, err := bulkJob(t, sub.JobID)
		return err == nil && bj.Status.Phase == v1alpha1.PhaseCompleted && bj.Status.ShardsSucceeded == 20
	})
	timing(t, "(b) controller restart: submit -> BulkJob Completed", time.Since(start))
	exactlyOnce(t, sub.JobID, st)
	if b := balance(t, acct); b != credits.Whole(50_000-40_000) {
		t.Fatalf("balance %s", b)
	}
}

// (b) Deleting a BulkJob deletes its Job, its pods and its data in Redis:
// once it has finished, and while its processor pods are running.
func TestDeletingBulkJobDeletesEverything(t *testing.T) {
	for _, c := range []struct {
		name    string
		rows    int
		running bool
	}{{"finished", 3, false}, {"running", 20_000, true}} {
		t.Run(c.name, func(t *testing.T) {
			var rows []in
			for i := 0; i < c.rows; i++ {
				rows = append(rows, co(60_000+i))
			}
			_, key := account(t, credits.Whole(int64(c.rows)))
			a := clusterAPI(t)
			sub := a.Submit(key, rows)
			if c.running {
				waitFor(t, 60*time.Second, "a running processor pod", func() bool {
					for _, p := range jobPods(t, sub.JobID) {
						if p.Status.Phase == corev1.PodRunning {
							return true
						}
					}
					return false
				})
				if _, st := a.Status(key, sub.JobID); st.Status == "completed" {
					t.Fatalf("job already completed: %+v", st)
				}
			} else {
				a.Wait(key, sub.JobID, 2*time.Minute)
				waitJobFinished(t, sub.JobID, 60*time.Second)
			}
			if len(jobKeys(t, sub.JobID)) == 0 || len(jobPods(t, sub.JobID)) == 0 {
				t.Fatal("no job data or pods to delete")
			}
			bj, err := bulkJob(t, sub.JobID)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := h.k8s.Delete(context.Background(), bj); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 90*time.Second, "BulkJob, Job and pods gone", func() bool {
				_, e1 := bulkJob(t, sub.JobID)
				_, e2 := getJob(t, sub.JobID)
				return apierrors.IsNotFound(e1) && apierrors.IsNotFound(e2) && len(jobPods(t, sub.JobID)) == 0
			})
			timing(t, "(b) BulkJob delete ("+c.name+") -> Job, pods gone", time.Since(start))
			// Nothing comes back: no processor left to write after the data was deleted.
			time.Sleep(3 * time.Second)
			if keys := jobKeys(t, sub.JobID); len(keys) != 0 {
				t.Fatalf("job data left: %v", keys)
			}
			if code, _ := a.Status(key, sub.JobID); code != http.StatusNotFound {
				t.Fatalf("status of a deleted job: %d", code)
			}
		})
	}
}

// (c) Scale smoke: 100,000 distinct rows, parallelism 4.
func TestScaleSmoke100k(t *testing.T) {
	const n = 100_000
	rows := make([]in, n)
	for i := range rows {
		rows[i] = nu(fmt.Sprintf("https://www.linkedin.com/company/scale-%06d", i))
	}
	acct, key := account(t, credits.Whole(200_000))
	a := clusterAPI(t)
	start := time.Now()
	sub := a.Submit(key, rows)
	submitted := time.Since(start)
	w := watchPods(t, sub.JobID)
	var first time.Duration
	var st jobStatus
	deadline := time.Now().Add(20 * time.Minute)
	for {
		code, s := a.Status(key, sub.JobID)
		if code == http.StatusOK && s.TotalProcessed > 0 && first == 0 {
			first = time.Since(start)
		}
		if code == http.StatusOK && s.Status == "completed" {
			st = s
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not completed after 20m: %+v", s)
		}
		time.Sleep(250 * time.Millisecond)
	}
	total := time.Since(start)
	job := waitJobFinished(t, sub.JobID, 60*time.Second)
	seen := w.Stop()
	bj, err := bulkJob(t, sub.JobID)
	if err != nil {
		t.Fatal(err)
	}
	timing(t, "(c) 100k: submit request", submitted)
	timing(t, "(c) 100k: submit -> first result", first)
	timing(t, "(c) 100k: submit -> completed", total)
	t.Logf("SCALE rows=%d shards=%d parallelism=%d pods=%d succeeded=%d failed=%d", n, bj.Spec.Shards, *job.Spec.Parallelism, len(seen), job.Status.Succeeded, job.Status.Failed)
	if h.timings != "" {
		timing(t, fmt.Sprintf("(c) 100k: pods=%d shards=%d parallelism=%d", len(seen), bj.Spec.Shards, *job.Spec.Parallelism), 0)
	}
	if *job.Spec.Parallelism != 4 || job.Status.Succeeded != bj.Spec.Shards {
		t.Fatalf("Job %+v / %+v", job.Spec, job.Status)
	}
	exactlyOnce(t, sub.JobID, st)
	if b := balance(t, acct); b != credits.Whole(200_000-n) {
		t.Fatalf("balance %s", b)
	}

	// Issue 28: the 100,000-row job deleted is gone (API 404, BulkJob and
	// its Job deleted) within 5 s of the DELETE's answer.
	code, body := a.Do(http.MethodDelete, "/v1/company-enrichment/bulk/"+sub.JobID, key, nil)
	if code != http.StatusOK {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	answered := time.Now()
	waitFor(t, 30*time.Second, "the 100k job and its BulkJob gone", func() bool {
		code, _ := a.Do(http.MethodGet, "/v1/company-enrichment/bulk/"+sub.JobID, key, nil)
		_, err := bulkJob(t, sub.JobID)
		return code == http.StatusNotFound && apierrors.IsNotFound(err)
	})
	gone := time.Since(answered)
	timing(t, "(c) 100k: DELETE answered -> job and BulkJob gone", gone)
	if gone > 5*time.Second {
		t.Errorf("the deleted 100k job took %v to be gone (goal 5 s)", gone)
	}
	// Its Job and pods go with it (owner reference: the garbage collector).
	waitFor(t, 60*time.Second, "the 100k job's Job gone", func() bool {
		_, err := getJob(t, sub.JobID)
		return apierrors.IsNotFound(err)
	})
	timing(t, "(c) 100k: DELETE answered -> Job gone", time.Since(answered))
	if b := balance(t, acct); b != credits.Whole(200_000-n) {
		t.Fatalf("balance after deleting a completed job %s (nothing to refund)", b)
	}
}

// The API pods fit the Go heap under their container's memory limit
// (internal/memlimit): the chart's 768Mi limit gives a 691 MiB Go limit,
// which the API logs at start-up, and the results cache is configured.
func TestAPIMemoryLimitFromContainer(t *testing.T) {
	ctx := context.Background()
	pods, err := h.cs.CoreV1().Pods(h.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=apiserver"})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("apiserver pods: %v (%d)", err, len(pods.Items))
	}
	for _, p := range pods.Items {
		raw, err := h.cs.CoreV1().Pods(h.ns).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			t.Fatalf("logs of %s: %v", p.Name, err)
		}
		if !strings.Contains(string(raw), "Go memory limit 691 MiB (90% of the cgroup's 768 MiB)") {
			t.Errorf("pod %s did not set its Go memory limit from the container's; its log:\n%s", p.Name, raw)
		}
	}
	// /metrics is on the apiserver-metrics Service, never the API's (issue 18).
	hc := &http.Client{Timeout: 10 * time.Second}
	res, err := hc.Get(h.apiURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound {
		t.Errorf("the API Service answers /metrics with %d, want 404", res.StatusCode)
	}
	svc, err := h.cs.CoreV1().Services(h.ns).Get(ctx, release+"-apiserver-metrics", metav1.GetOptions{})
	if err != nil || svc.Spec.ClusterIP == "" || len(svc.Spec.Ports) != 1 {
		t.Fatalf("apiserver metrics Service: %v %+v", err, svc)
	}
	res, err = hc.Get(fmt.Sprintf("http://%s/metrics", net.JoinHostPort(svc.Spec.ClusterIP, fmt.Sprint(svc.Spec.Ports[0].Port))))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if !strings.Contains(string(body), "bulkd_results_cache_max_bytes 2.68435456e+08") {
		t.Error("the API's metrics do not show the chart's 256 MiB results cache")
	}
}
