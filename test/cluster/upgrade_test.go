//go:build e2ecluster

package cluster_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/test/companyapi"
)

// helm upgrade mid-job: while a job of every family runs, the release is
// upgraded to another image tag (the same code: make image tags it with
// the chart's appVersion, the git version and latest) with changed values,
// so every Deployment rolls. Nothing is lost (every job completes, every
// row answered once), nothing is charged twice (each account's ledger
// equals its balance and holds one charge), and the API answers all the
// while: a client asking every 100 ms through the Service sees no error
// and no non-2xx answer, but for 503s with Retry-After (none expected).
func TestHelmUpgradeMidJob(t *testing.T) {
	restoreReleaseAtEnd(t)
	worlds := startFamilyWorlds(t)
	from := os.Getenv("E2E_IMAGE_TAG")
	to := "latest"

	// A long company job (100,000 rows: 20 shards of 5,000 at parallelism
	// 4, gated by the budget of 6) spans most of the rollout; the email
	// jobs are short and may finish before it.
	jobs := worlds.submitEveryFamily(t, "upgrade", 100_000)
	probe := probeAPI(t, jobs[0].key, companyapi.BulkPath+"/"+jobs[0].id)
	// Started: a processor pod runs for the company job.
	waitFor(t, 2*time.Minute, "the company job running", func() bool {
		code, st := clusterAPI(t).Status(jobs[0].key, jobs[0].id)
		return code == 200 && st.TotalProcessed > 0
	})
	bj, err := bulkJob(t, jobs[0].id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("upgrading %s -> %s while the company job is %s at %s shards", from, to, bj.Status.Phase, bj.Status.ShardProgress)
	took := upgradeRelease(t, "image.tag="+to, "config.BULKD_RATE_LIMIT=900", "controller.concurrency=3",
		"apiserver.resultsCacheBytes=134217728")
	timing(t, "(upgrade) helm upgrade --wait (every Deployment rolled)", took)

	// Every component runs the new tag.
	deps, err := h.cs.AppsV1().Deployments(h.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deps.Items {
		for _, c := range d.Spec.Template.Spec.Containers {
			if strings.HasPrefix(c.Image, "localhost/bulkd:") && c.Image != "localhost/bulkd:"+to {
				t.Errorf("Deployment %s still runs %s", d.Name, c.Image)
			}
		}
	}
	bj, _ = bulkJob(t, jobs[0].id)
	t.Logf("after the upgrade the company job is %s at %s shards", bj.Status.Phase, bj.Status.ShardProgress)

	for _, j := range jobs {
		j.waitDone(t, 10*time.Minute)
	}
	total, bad, errs := probe.Stop()
	t.Logf("UPGRADE rollout %v; API answers during the jobs: %d, codes %v, 503+Retry-After %d, non-2xx otherwise %d, transport errors %d %v",
		took.Round(time.Millisecond), total, probe.codes, probe.retryAfter, bad, len(errs), errs)
	if bad > 0 || len(errs) > 0 {
		t.Errorf("the API failed %d requests (%d non-2xx, %d transport errors) of %d during the upgrade", bad+len(errs), bad, len(errs), total)
	}
	var charged credits.Amount
	for _, j := range jobs {
		charged += j.charge
	}
	t.Logf("UPGRADE jobs %d (every family), charged %s in all, each once", len(jobs), charged)
}
