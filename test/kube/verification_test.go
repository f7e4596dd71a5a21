package kube_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/test/nodeagent"
)

// verifyConfigMap is the email verification family's own ConfigMap (its
// profile in startController): where the mail world is.
const verifyConfigMap = "bulkd-verify"

// (f) Email verification on Kubernetes: the family's pods get its profile;
// a greylisted address gets a provisional first answer, the BulkJob is
// Retrying (the API says partial_complete_retrying) and the controller
// runs retry Jobs as retries come due, the real `bulkd processor
// --retries` answering them. The first round fails for good (Redis
// unreachable from its pods): it is recorded and the next round retries.
// The job completes with every address answered for good.
//
// bob@grey.test exists: it is deliverable once the greylist has passed,
// which a retry pod can only see because every process sends the domain's
// catch-all probe the first attempt sent (shared through Redis): a fresh
// random probe would be greylisted again on every round.
func TestEmailVerificationRetryRounds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const greylist = 2500 * time.Millisecond // longer than the first retry delay (1s)
	w, err := mailworld.Start(ctx, mailworld.Spec{
		Hosts: []mailworld.Host{{Name: "mx.ok.test"}, {Name: "mx.grey.test"}},
		Domains: []mailworld.Domain{
			{Name: "ok.test", MX: []string{"mx.ok.test"}, Users: []string{"alice"}},
			{Name: "grey.test", MX: []string{"mx.grey.test"}, Users: []string{"bob"}, Greylist: greylist},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: verifyConfigMap, Namespace: namespace},
		Data: map[string]string{"BULKD_DNS_SERVER": w.DNSAddr(), "BULKD_SMTP_PORT": fmt.Sprint(w.SMTPPort()),
			"BULKD_OUTBOUND_ALLOW_CIDRS": mailworld.AllowCIDRs}}
	if err := h.k8s.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.k8s.Delete(context.Background(), cm) })
	// Round 1's pod cannot reach Redis, every attempt: the Job fails.
	h.setHook(func(at *nodeagent.Attempt) {
		if strings.HasSuffix(at.Job, "-retry-1") {
			at.Env["BULKD_REDIS_URL"] = "redis://127.0.0.1:1/0"
		}
	})
	t.Cleanup(func() { h.setHook(nil) })

	_, key := h.account(t, credits.Whole(10))
	a := h.kubeAPI(t)
	emails := []string{"alice@ok.test", "carol@grey.test", "bob@grey.test", "Carol@grey.test"}
	code, body := a.Do(http.MethodPost, "/v1/bulk", key, map[string]any{"emails": emails})
	if code != http.StatusOK {
		t.Fatalf("submit: %d %s", code, body)
	}
	var sub struct {
		JobID string `json:"job_id"`
	}
	if err := json.Unmarshal(body, &sub); err != nil {
		t.Fatal(err)
	}
	id := sub.JobID

	// Waiting for its retries: Retrying, not finished, the API shows it.
	bj := h.waitBulkJob(t, id, 60*time.Second, "Retrying", func(bj *v1alpha1.BulkJob) bool {
		return bj.Status.Phase == v1alpha1.PhaseRetrying || bj.Status.Phase == v1alpha1.PhaseCompleted
	})
	if bj.Status.Phase != v1alpha1.PhaseRetrying {
		t.Fatalf("never Retrying: %+v", bj.Status)
	}
	// The duplicate (Carol@) is one address: 3 rows.
	if s := bj.Status; s.Retrying != 2 || s.ProcessedRows != 3 || s.Progress != "100%" || s.OutcomeRows("deliverable") != 1 ||
		s.OutcomeRows("unknown") != 2 || s.ShardProgress != "1/1" || s.NextRetryTime == nil {
		t.Fatalf("Retrying status %+v", s)
	}
	sawRetrying := false
	var st map[string]any
	waitFor(t, 60*time.Second, "the job complete", func() bool {
		code, body := a.Do(http.MethodGet, "/v1/bulk/"+id, key, nil)
		st = map[string]any{}
		if code != http.StatusOK || json.Unmarshal(body, &st) != nil {
			t.Fatalf("status: %d %s", code, body)
		}
		sawRetrying = sawRetrying || st["status"] == "partial_complete_retrying"
		return st["status"] == "complete"
	})
	if !sawRetrying {
		t.Error("the API never said partial_complete_retrying")
	}
	if sum := st["summary"].(map[string]any); sum["deliverable"] != 2.0 || sum["undeliverable"] != 1.0 || sum["unknown"] != 0.0 || st["total_retrying"] != 0.0 {
		t.Fatalf("final status %v", st)
	}

	bj = h.waitBulkJob(t, id, 10*time.Second, "Completed", completed)
	s := bj.Status
	if s.RetryRounds < 2 || s.Retrying != 0 || s.NextRetryTime != nil || s.OutcomeRows("unknown") != 0 ||
		!slices.Equal(s.Outcomes, []v1alpha1.OutcomeCount{{Name: "deliverable", Rows: 2}, {Name: "undeliverable", Rows: 1}}) {
		t.Fatalf("Completed status %+v", s)
	}
	if c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionRetryFailed); c == nil || c.Status != metav1.ConditionFalse {
		t.Fatalf("RetryFailed condition %+v: the last round succeeded", c)
	}

	// The shard Job and every retry Job: owned by the BulkJob, with the
	// family's profile.
	var list batchv1.JobList
	if err := h.k8s.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabels{v1alpha1.LabelJobID: id}); err != nil {
		t.Fatal(err)
	}
	byName := map[string]*batchv1.Job{}
	for i := range list.Items {
		j := &list.Items[i]
		byName[j.Name] = j
		pod := j.Spec.Template.Spec
		c := pod.Containers[0]
		if !metav1.IsControlledBy(j, bj) || j.Labels[v1alpha1.LabelFamily] != "email_verification" || pod.NodeSelector["bulkd.io/egress"] != "smtp" ||
			len(c.EnvFrom) != 2 || c.EnvFrom[1].ConfigMapRef.Name != verifyConfigMap {
			t.Errorf("Job %s: %+v", j.Name, j.Spec.Template)
		}
	}
	shardJob := byName[id]
	if shardJob == nil || *shardJob.Spec.Parallelism != 1 {
		t.Fatalf("shard Job %+v", shardJob)
	}
	for r := int32(1); r <= s.RetryRounds; r++ {
		name := fmt.Sprintf("%s-retry-%d", id, r)
		j := byName[name]
		if j == nil || j.Labels[v1alpha1.LabelRetryRound] != fmt.Sprint(r) || !slices.Contains(j.Spec.Template.Spec.Containers[0].Args, "--retries") {
			t.Fatalf("retry Job %s: %+v", name, j)
		}
		failed := false
		for _, c := range j.Status.Conditions {
			failed = failed || (c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue)
		}
		if failed != (r == 1) {
			t.Errorf("retry Job %s failed=%v: %+v", name, failed, j.Status)
		}
	}
	// Round 1: the first try and backoffLimit (2) retries, each unable to
	// reach Redis.
	if hist := h.agent.History(id + "-retry-1"); len(hist) != 3 || hist[0].ExitCode != v1alpha1.ProcessorExitRetry {
		t.Fatalf("round 1 attempts %+v", hist)
	}
	var reasons string
	defer func() { t.Logf("events: %s", reasons) }()
	waitFor(t, 10*time.Second, "Retrying, RetryJobCreated, RetryJobFailed and Completed events", func() bool {
		r := h.eventReasons(t, id)
		reasons = r
		return strings.Contains(r, "Retrying") && strings.Contains(r, "RetryJobCreated") && strings.Contains(r, "RetryJobFailed") &&
			strings.Contains(r, "Completed")
	})

	// Results: final answers, the greylisted addresses' after a retry.
	code, body = a.Do(http.MethodGet, "/v1/bulk/"+id+"/results", key, nil)
	if code != http.StatusOK {
		t.Fatalf("results: %d %s", code, body)
	}
	var page struct {
		Results []struct {
			Email    string `json:"email"`
			Status   string `json:"status"`
			Retrying bool   `json:"retrying"`
			Attempts int    `json:"attempts"`
		} `json:"results"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Results) != 3 {
		t.Fatalf("results %s", body)
	}
	for _, r := range page.Results {
		grey := strings.HasSuffix(r.Email, "@grey.test")
		want := map[string]string{"alice@ok.test": "deliverable", "bob@grey.test": "deliverable", "carol@grey.test": "undeliverable"}[r.Email]
		if r.Status != want || r.Retrying || (grey && r.Attempts < 2) {
			t.Errorf("row %+v", r)
		}
	}
}
