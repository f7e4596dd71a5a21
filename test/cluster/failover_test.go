//go:build e2ecluster

package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/controllers"
	"github.com/bulkd/bulkd/internal/credits"
)

// leader reads the controller's Lease: the pod holding it (the holder
// identity is "<pod>_<uuid>"), the identity and the lease duration.
func leader(t *testing.T) (pod, identity string, lease time.Duration) {
	t.Helper()
	l, err := h.cs.CoordinationV1().Leases(h.ns).Get(context.Background(), controllers.DefaultLeaderElectionID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	identity = ptr.Deref(l.Spec.HolderIdentity, "")
	pod, _, _ = strings.Cut(identity, "_")
	return pod, identity, time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second
}

// Controller failover: two controller replicas with leader election; the
// leader's pod is killed (grace 0, forced: kill -9 semantics, its Lease is
// not released) while a 100,000-row job runs. The other replica takes the
// Lease within its duration plus 5 s, and the job completes: every shard
// succeeded, every row answered once, charged once, the ledger equal to
// the balance.
func TestControllerFailoverMidJob(t *testing.T) {
	restoreReleaseAtEnd(t)
	took := upgradeRelease(t, "controller.replicas=2", "controller.leaderElect=true")
	timing(t, "(failover) helm upgrade to 2 controller replicas", took)
	ctx := context.Background()
	var standby string
	waitFor(t, 2*time.Minute, "two controller pods ready, one of them leader", func() bool {
		pods, err := h.cs.CoreV1().Pods(h.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=controller"})
		if err != nil {
			t.Fatal(err)
		}
		ready := 0
		lead, _, _ := leader(t)
		standby = ""
		for i := range pods.Items {
			p := &pods.Items[i]
			if podReady(p) && p.DeletionTimestamp == nil {
				ready++
				if p.Name != lead {
					standby = p.Name
				}
			}
		}
		return ready == 2 && standby != "" && lead != standby
	})

	const n = 100_000
	rows := make([]in, n)
	for i := range rows {
		rows[i] = nu(fmt.Sprintf("https://www.linkedin.com/company/failover-%06d", i))
	}
	const opening = 200_000
	acct, key := account(t, credits.Whole(opening))
	a := clusterAPI(t)
	start := time.Now()
	sub := a.Submit(key, rows)
	w := watchPods(t, sub.JobID)
	// Mid-job: shards running and some rows answered.
	waitFor(t, 5*time.Minute, "the job running with rows answered", func() bool {
		code, st := a.Status(key, sub.JobID)
		return code == 200 && st.TotalProcessed > 0
	})
	old, oldID, lease := leader(t)
	bj, err := bulkJob(t, sub.JobID)
	if err != nil {
		t.Fatal(err)
	}
	killAt := time.Now()
	if err := h.cs.CoreV1().Pods(h.ns).Delete(ctx, old, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	t.Logf("leader %s killed %v after submit; BulkJob then: %s, shards %s; lease duration %v",
		old, killAt.Sub(start).Round(time.Millisecond), bj.Status.Phase, bj.Status.ShardProgress, lease)

	// The standby takes the Lease.
	var takeover time.Duration
	var newLeader string
	waitFor(t, lease+30*time.Second, "a new leader", func() bool {
		pod, id, _ := leader(t)
		if id != "" && id != oldID && pod != old {
			takeover, newLeader = time.Since(killAt), pod
			return true
		}
		return false
	})
	// And acts: the BulkJob's status moves again (progress is written at
	// least every --progress-interval while shards run).
	before := bj.Status
	var acted time.Duration
	waitFor(t, 2*time.Minute, "the new leader writes the BulkJob's status", func() bool {
		b, err := bulkJob(t, sub.JobID)
		if err == nil && time.Since(killAt) > takeover && (b.Status.ShardProgress != before.ShardProgress ||
			b.Status.ProcessedRows != before.ProcessedRows || b.Status.Phase != before.Phase) {
			acted = time.Since(killAt)
			return true
		}
		return false
	})
	timing(t, "(failover) leader killed -> new leader holds the Lease", takeover)
	timing(t, "(failover) leader killed -> BulkJob status written again", acted)
	t.Logf("FAILOVER lease=%v takeover=%v status-again=%v new-leader=%s (was standby %s)", lease, takeover.Round(time.Millisecond), acted.Round(time.Millisecond), newLeader, standby)
	if takeover > lease+5*time.Second {
		t.Errorf("new leader after %v, want within the lease duration %v + 5 s", takeover, lease)
	}

	st := a.Wait(key, sub.JobID, 20*time.Minute)
	timing(t, "(failover) 100k: submit -> completed", time.Since(start))
	job := waitJobFinished(t, sub.JobID, time.Minute)
	seen := w.Stop()
	waitFor(t, time.Minute, "BulkJob Completed", func() bool {
		bj, err = bulkJob(t, sub.JobID)
		return err == nil && bj.Status.Phase == v1alpha1.PhaseCompleted
	})
	if job.Status.Succeeded != bj.Spec.Shards || bj.Status.ShardsSucceeded != bj.Spec.Shards || job.Status.Failed != 0 {
		t.Errorf("shards: Job succeeded %d failed %d, BulkJob %d of %d", job.Status.Succeeded, job.Status.Failed, bj.Status.ShardsSucceeded, bj.Spec.Shards)
	}
	t.Logf("FAILOVER job: %d shards, %d processor pods seen", bj.Spec.Shards, len(seen))
	exactlyOnce(t, sub.JobID, st)
	if b := balance(t, acct); b != credits.Whole(opening-n) {
		t.Errorf("balance %s, want %s", b, credits.Whole(opening-n))
	}
	ledgerBalanced(t, acct, credits.Whole(n))
	// The killed pod was replaced; both replicas are there again.
	waitFor(t, 2*time.Minute, "two controller pods again", func() bool {
		pods, err := h.cs.CoreV1().Pods(h.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=controller"})
		if err != nil {
			return false
		}
		ready := 0
		for i := range pods.Items {
			if podReady(&pods.Items[i]) && pods.Items[i].Status.Phase == corev1.PodRunning {
				ready++
			}
		}
		return ready == 2
	})
}
