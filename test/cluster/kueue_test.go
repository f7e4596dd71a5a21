//go:build e2ecluster

package cluster_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/controllers"
	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/credits"
)

// The real Kueue (v0.17.0, hack/local-cluster/kueue.sh) admits bulkd's
// Jobs. Its queues: one ClusterQueue per plan (bulkd-none for pay as you
// go, bulkd-starter, bulkd-standard, bulkd-professional) in one cohort with
// fair sharing and reclaim-by-preemption, and in the release namespace a
// LocalQueue of the same name for each, which the chart's default queue
// template bulkd-{plan} names. Quotas: 400m CPU for none and professional,
// 0 for the others, so the cohort holds 8 processor pods (100m each).

var kueueGV = schema.GroupVersion{Group: "kueue.x-k8s.io", Version: "v1beta2"}

func kueueObj(kind, namespace, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(kueueGV.WithKind(kind))
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

var plans = map[string]string{"none": "400m", "starter": "0", "standard": "0", "professional": "400m"}

// makeKueueQueues creates the flavor, the ClusterQueues and the LocalQueues,
// and removes them when the test ends.
func makeKueueQueues(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	objs := []*unstructured.Unstructured{kueueObj("ResourceFlavor", "", "bulkd-default", map[string]any{})}
	for plan, cpu := range plans {
		objs = append(objs, kueueObj("ClusterQueue", "", "bulkd-"+plan, map[string]any{
			"cohortName":        "bulkd",
			"namespaceSelector": map[string]any{},
			"resourceGroups": []any{map[string]any{
				"coveredResources": []any{"cpu", "memory"},
				"flavors": []any{map[string]any{"name": "bulkd-default", "resources": []any{
					map[string]any{"name": "cpu", "nominalQuota": cpu},
					map[string]any{"name": "memory", "nominalQuota": "4Gi"},
				}}},
			}},
			// A plan's unused quota is lent to the others and taken back
			// by preempting the borrowers when its own jobs come.
			"preemption": map[string]any{"reclaimWithinCohort": "Any", "withinClusterQueue": "Never"},
		}))
		objs = append(objs, kueueObj("LocalQueue", h.ns, "bulkd-"+plan, map[string]any{"clusterQueue": "bulkd-" + plan}))
	}
	for _, o := range objs {
		if err := h.k8s.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	t.Cleanup(func() {
		for i := len(objs) - 1; i >= 0; i-- {
			_ = h.k8s.Delete(context.Background(), objs[i])
		}
	})
	waitFor(t, time.Minute, "the ClusterQueues active", func() bool {
		for plan := range plans {
			cq := kueueObj("ClusterQueue", "", "bulkd-"+plan, nil)
			if err := h.k8s.Get(ctx, client.ObjectKey{Name: "bulkd-" + plan}, cq); err != nil || !condTrue(cq, "Active") {
				return false
			}
		}
		return true
	})
}

func condTrue(u *unstructured.Unstructured, typ string) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == typ && m["status"] == "True" {
			return true
		}
	}
	return false
}

// workloadOf is Kueue's Workload of a Job (nil while it has none).
func workloadOf(t *testing.T, job *batchv1.Job) *unstructured.Unstructured {
	t.Helper()
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(kueueGV.WithKind("WorkloadList"))
	if err := h.k8s.List(context.Background(), l, client.InNamespace(h.ns)); err != nil {
		t.Logf("list Workloads: %v", err) // polled again; not fatal in a watcher goroutine
		return nil
	}
	for i := range l.Items {
		for _, ref := range l.Items[i].GetOwnerReferences() {
			if ref.UID == job.UID {
				return &l.Items[i]
			}
		}
	}
	return nil
}

// admittedByKueue: the Job's Workload holds (or held, if finished) a
// quota reservation in a ClusterQueue; it says which.
func admittedByKueue(t *testing.T, job *batchv1.Job) (bool, string) {
	t.Helper()
	wl := workloadOf(t, job)
	if wl == nil {
		return false, ""
	}
	cq, _, _ := unstructured.NestedString(wl.Object, "status", "admission", "clusterQueue")
	return cq != "" || condTrue(wl, "Admitted") || condTrue(wl, "Finished"), cq
}

// watchKueueAdmission polls a BulkJob's Job until it sees Kueue admit it
// (its Workload reserved quota), and reports the ClusterQueue.
func watchKueueAdmission(t *testing.T, id string) func() (bool, string) {
	done := make(chan struct{})
	stop := make(chan struct{})
	var ok bool
	var cq string
	go func() {
		defer close(done)
		for !ok {
			if job, err := getJob(t, id); err == nil {
				ok, cq = admittedByKueue(t, job)
			}
			select {
			case <-stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return func() (bool, string) { close(stop); <-done; return ok, cq }
}

func companyRows(tag string, n int) []in {
	rows := make([]in, n)
	for i := range rows {
		rows[i] = nu(fmt.Sprintf("https://www.linkedin.com/company/%s-%06d", tag, i))
	}
	return rows
}

// waitingIn says which admission a BulkJob's Job waits for: "bulkd"
// (suspended, gated, no queue label), "kueue" (suspended with the label)
// or "" (started, or no Job yet).
func waitingIn(t *testing.T, id string) string {
	job, err := getJob(t, id)
	if err != nil || !ptr.Deref(job.Spec.Suspend, false) || job.Status.StartTime != nil {
		return ""
	}
	if _, ok := job.Labels[v1alpha1.KueueQueueLabel]; ok {
		return "kueue"
	}
	if len(job.Spec.Template.Spec.SchedulingGates) > 0 {
		return "bulkd"
	}
	return ""
}

func TestKueueAdmission(t *testing.T) {
	switch os.Getenv("E2E_KUEUE") {
	case "0":
		t.Skip("E2E_KUEUE=0: no Kueue in this cluster")
	case "failed":
		t.Fatal("Kueue did not come up in this cluster (e2e.sh's log; kueue.log in the component logs)")
	}
	restoreReleaseAtEnd(t)
	bulkdRev := releaseRevision(t)
	makeKueueQueues(t)
	a := clusterAPI(t)
	ctx := context.Background()

	// 1. Switching from bulkd's admission to Kueue's with a BulkJob
	// waiting in bulkd's queue: a budget of 1 pod, Y1 (10 shards) holds it,
	// Y2 waits behind it (suspended, gated). The controller restarts in
	// Kueue mode; Y2 is handed to Kueue, which admits it; Y1, already
	// started, runs on outside Kueue's quota.
	// helm's --wait returns once the new controller pod is ready, while
	// the old one may still lead, with the old budget, for a while: Y1 and
	// Y2 wait until the new pod holds the Lease (in a run of 2026-12-02 the
	// old leader admitted Y2 and 4 of Y1's pods at once).
	oldLeader, _, _ := leader(t)
	upgradeRelease(t, "admission.maxRunningShards=1", "admission.maxRunningShardsPerAccount=1")
	waitFor(t, 2*time.Minute, "the upgraded controller leading", func() bool {
		l, err := h.cs.CoordinationV1().Leases(h.ns).Get(ctx, controllers.DefaultLeaderElectionID, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false
		}
		pod, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
		return pod != "" && pod != oldLeader
	})
	const opening = 100_000
	acctQ, keyQ := account(t, credits.Whole(opening))
	// Y1 has 20 shards, so that its gated pods keep the budget until well
	// after the switch; Y2 is created a second after it: the admission's
	// FIFO within an account goes by the BulkJobs' creationTimestamp,
	// whose resolution is a second (two BulkJobs of one second are
	// ordered by name, at random: Y2 was admitted by bulkd before the
	// switch so in a run of 2026-12-02).
	y1 := a.Submit(keyQ, companyRows("kueue-y1", 40_000))
	time.Sleep(1100 * time.Millisecond)
	y2 := a.Submit(keyQ, companyRows("kueue-y2", 2_000))
	waitFor(t, 2*time.Minute, "Y2 waiting in bulkd's admission", func() bool { return waitingIn(t, y2.JobID) == "bulkd" })
	y2Admitted := watchKueueAdmission(t, y2.JobID)
	took := upgradeRelease(t, "admission.kueue.enabled=true")
	timing(t, "(kueue) helm upgrade to Kueue's admission", took)
	t.Logf("switched to Kueue; Y2 waits in %q", waitingIn(t, y2.JobID))
	stY1 := a.Wait(keyQ, y1.JobID, 10*time.Minute)
	stY2 := a.Wait(keyQ, y2.JobID, 10*time.Minute)
	if ok, cq := y2Admitted(); !ok || cq != "bulkd-none" {
		job, err := getJob(t, y2.JobID)
		t.Errorf("Y2 (waiting in bulkd's admission at the switch) was not admitted by Kueue: %v %q; its Job: labels %v suspend %v start %v (%v); Workload %v",
			ok, cq, job.Labels, job.Spec.Suspend, job.Status.StartTime, err, workloadOf(t, job) != nil)
	}
	exactlyOnce(t, y1.JobID, stY1)
	exactlyOnce(t, y2.JobID, stY2)
	ledgerBalanced(t, acctQ, credits.Whole(42_000))

	// 2. A job of every family runs to completion through Kueue's
	// admission (pay as you go: ClusterQueue bulkd-none).
	worlds := startFamilyWorlds(t)
	fams := worlds.submitEveryFamily(t, "kueue-family", 4_000)
	var admitted []func() (bool, string)
	for _, j := range fams {
		admitted = append(admitted, watchKueueAdmission(t, j.id))
	}
	for i, j := range fams {
		j.waitDone(t, 10*time.Minute)
		if ok, cq := admitted[i](); !ok || cq != "bulkd-none" {
			t.Errorf("%s job %s: not admitted by Kueue (%v, %q)", j.family, j.id, ok, cq)
		}
		job, err := getJob(t, j.id)
		if err != nil || job.Labels[v1alpha1.KueueQueueLabel] != "bulkd-none" {
			t.Errorf("%s job %s: Job labels %v (%v)", j.family, j.id, job.Labels, err)
		}
	}

	// 3. Fair sharing with preemption: A (pay as you go) runs two jobs of
	// 4 pods, the second on quota borrowed from the professional plan's
	// ClusterQueue. B, on the professional plan, submits 5 rows: Kueue
	// takes its quota back (preempting A's borrowing job) and B runs next,
	// not after A's backlog.
	acctA, keyA := account(t, credits.Whole(opening))
	a1 := a.Submit(keyA, companyRows("kueue-a1", 12_000))
	a2 := a.Submit(keyA, companyRows("kueue-a2", 12_000))
	waitFor(t, 3*time.Minute, "both of A's Jobs admitted by Kueue", func() bool {
		for _, id := range []string{a1.JobID, a2.JobID} {
			job, err := getJob(t, id)
			if err != nil || ptr.Deref(job.Spec.Suspend, true) {
				return false
			}
		}
		return true
	})
	acctB, keyB := account(t, credits.Whole(1_000))
	if err := h.parts.API.Accounts.SetPlan(ctx, acctB, accounts.PlanProfessional, accounts.StateActive, time.Now().Add(30*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	startB := time.Now()
	b := a.Submit(keyB, companyRows("kueue-b", 5))
	bAdmitted := watchKueueAdmission(t, b.JobID)
	stB := a.Wait(keyB, b.JobID, 5*time.Minute)
	tookB := time.Since(startB)
	timing(t, "(kueue) B's 5 rows behind A's two borrowing jobs: submit -> completed", tookB)
	if ok, cq := bAdmitted(); !ok || cq != "bulkd-professional" {
		t.Errorf("B's job not admitted in its plan's ClusterQueue: %v %q", ok, cq)
	}
	_, stA2 := a.Status(keyA, a2.JobID)
	t.Logf("KUEUE B done in %v; A's second job then %s at %d/%d rows", tookB.Round(time.Millisecond), stA2.Status, stA2.TotalProcessed, stA2.TotalRows)
	// Either Kueue preempted one of A's jobs for B, or B was simply done
	// before A's backlog; never after it.
	preempted := false
	for _, id := range []string{a1.JobID, a2.JobID} {
		if job, err := getJob(t, id); err == nil {
			if wl := workloadOf(t, job); wl != nil {
				conds, _, _ := unstructured.NestedSlice(wl.Object, "status", "conditions")
				for _, c := range conds {
					if m, _ := c.(map[string]any); m["type"] == "Preempted" || m["reason"] == "Preempted" {
						preempted = true
						t.Logf("KUEUE A's job %s: %v", id, m)
					}
				}
			}
		}
	}
	if stA2.Status == "completed" && !preempted {
		t.Errorf("B's job completed only after A's whole backlog, and Kueue preempted nothing")
	}
	stA1 := a.Wait(keyA, a1.JobID, 10*time.Minute)
	stA2 = a.Wait(keyA, a2.JobID, 10*time.Minute)
	exactlyOnce(t, a1.JobID, stA1)
	exactlyOnce(t, a2.JobID, stA2) // preempted mid-shard and run again: still once
	exactlyOnce(t, b.JobID, stB)
	ledgerBalanced(t, acctA, credits.Whole(24_000))
	chargeB, err := credits.Parse(fmt.Sprint(b.CreditsConsumed))
	if err != nil {
		t.Fatal(err)
	}
	ledgerBalanced(t, acctB, chargeB)

	// 4. Switching back from Kueue to bulkd's admission with a BulkJob
	// waiting in Kueue: ClusterQueue bulkd-none holds new admissions
	// (stopPolicy Hold), X waits in it; the release is rolled back to
	// bulkd's admission; X is handed to bulkd, which admits it.
	hold := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"stopPolicy":"Hold"}}`))
	if err := h.k8s.Patch(ctx, kueueObj("ClusterQueue", "", "bulkd-none", nil), hold); err != nil {
		t.Fatal(err)
	}
	acctX, keyX := account(t, credits.Whole(opening))
	x := a.Submit(keyX, companyRows("kueue-x", 2_000))
	waitFor(t, 2*time.Minute, "X waiting in Kueue", func() bool {
		job, err := getJob(t, x.JobID)
		return err == nil && waitingIn(t, x.JobID) == "kueue" && workloadOf(t, job) != nil
	})
	time.Sleep(3 * time.Second)
	if w := waitingIn(t, x.JobID); w != "kueue" {
		t.Fatalf("X does not wait in Kueue on hold: %q", w)
	}
	helm(t, "rollback", release, fmt.Sprint(bulkdRev), "--wait", "--timeout", "5m")
	stX := a.Wait(keyX, x.JobID, 5*time.Minute)
	job, err := getJob(t, x.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := job.Labels[v1alpha1.KueueQueueLabel]; ok {
		t.Errorf("X's Job still carries Kueue's label: %v", job.Labels)
	}
	if ok, _ := admittedByKueue(t, job); ok {
		t.Errorf("X was admitted by Kueue, though its ClusterQueue holds")
	}
	exactlyOnce(t, x.JobID, stX)
	ledgerBalanced(t, acctX, credits.Whole(2_000))
	unhold := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"stopPolicy":"None"}}`))
	_ = h.k8s.Patch(ctx, kueueObj("ClusterQueue", "", "bulkd-none", nil), unhold)
}
