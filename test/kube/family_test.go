package kube_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/controllers"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/serve"
	"github.com/bulkd/bulkd/test/builders"
	"github.com/bulkd/bulkd/test/nodeagent"
)

// The CRD names no family: a well-formed name it never heard of is
// accepted by the API server, and the controller (whose registry does not
// know it) holds the BulkJob with an UnknownFamily condition and event
// instead of creating a Job whose pods could only fail.
func TestBulkJobOfAnUnknownFamilyIsHeld(t *testing.T) {
	ctx := context.Background()
	id := uuid.NewString()
	bj := builders.MakeBulkJob(id, namespace).Family("phone_lookup").Obj()
	bj.UID, bj.Generation, bj.CreationTimestamp = "", 0, metav1.Time{}
	bj.Finalizers = nil
	if err := h.k8s.Create(ctx, bj); err != nil {
		t.Fatalf("a well-formed family the CRD does not list is refused: %v", err)
	}
	t.Cleanup(func() { _ = h.k8s.Delete(context.Background(), bj) })
	got := h.waitBulkJob(t, id, 20*time.Second, "held as of an unknown family", func(bj *v1alpha1.BulkJob) bool {
		c := meta.FindStatusCondition(bj.Status.Conditions, v1alpha1.ConditionComplete)
		return c != nil && c.Reason == controllers.ReasonUnknownFamily
	})
	c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionComplete)
	if got.Status.Phase != v1alpha1.PhasePending || c.Status != metav1.ConditionFalse ||
		!strings.Contains(c.Message, `family "phone_lookup" is not one this controller knows`) {
		t.Fatalf("status %+v", got.Status)
	}
	waitFor(t, 10*time.Second, "an UnknownFamily event", func() bool {
		return strings.Contains(h.eventReasons(t, id), controllers.ReasonUnknownFamily)
	})
	var job batchv1.Job
	if err := h.k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: id}, &job); !apierrors.IsNotFound(err) {
		t.Fatalf("a Job exists for an unknown family (err %v)", err)
	}
	// Deleting it still works (the finalizer deletes its data: none).
	if err := h.k8s.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the BulkJob gone", func() bool {
		return apierrors.IsNotFound(h.k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: id}, &v1alpha1.BulkJob{}))
	})
}

// A family name the CRD's pattern refuses is refused by the API server.
func TestBulkJobFamilyNameForm(t *testing.T) {
	for _, fam := range []string{"Phone_Lookup", "phone-lookup", "9lookup", "", strings.Repeat("a", 64)} {
		bj := builders.MakeBulkJob(uuid.NewString(), namespace).Family(v1alpha1.Family(fam)).Obj()
		bj.UID, bj.Generation, bj.CreationTimestamp = "", 0, metav1.Time{}
		if err := h.k8s.Create(context.Background(), bj); err == nil || !strings.Contains(err.Error(), "spec.family") {
			t.Errorf("family %q: error %v, want one about spec.family", fam, err)
		}
	}
}

// The controller checks --family-profiles against its family registry when
// it starts: a profile of a family it does not know is a start-up error.
func TestControllerStartChecksFamilyProfilesAgainstTheRegistry(t *testing.T) {
	bcfg := config.Default()
	bcfg.RedisURL = h.redisURL
	proc, err := serve.NewProcessor(bcfg, h.rdb, h.log)
	if err != nil {
		t.Fatal(err)
	}
	opts := controllers.DefaultOptions()
	opts.Families = map[v1alpha1.Family]controllers.FamilyProfile{"phone_lookup": {ParallelismCap: 1}}
	_, err = controllers.NewManager(h.cfg, controllers.ManagerOptions{Namespace: namespace, MetricsAddr: "0", HealthAddr: "0",
		Reconciler: opts, Data: proc.Store, Shards: proc, Logger: logr.FromSlogHandler(h.log.Handler()), SkipNameValidation: true})
	if err == nil || !strings.Contains(err.Error(), `unknown family "phone_lookup"`) || !strings.Contains(err.Error(), "email_lookup") {
		t.Fatalf("NewManager: %v", err)
	}
	opts.Families = map[v1alpha1.Family]controllers.FamilyProfile{v1alpha1.FamilyEmailLookup: {ParallelismCap: 1}}
	if _, err := controllers.NewManager(h.cfg, controllers.ManagerOptions{Namespace: namespace, MetricsAddr: "0", HealthAddr: "0",
		Reconciler: opts, Data: proc.Store, Shards: proc, Logger: logr.FromSlogHandler(h.log.Handler()), SkipNameValidation: true}); err != nil {
		t.Fatalf("NewManager with a known family's profile: %v", err)
	}
}

// `bulkd processor` on a job of a family its build has no answerer for
// fails before answering anything, with a message naming the family and
// the ones it knows (exit 1: the Job retries the index; a build that knows
// the family can answer it).
func TestProcessorRefusesAnUnknownFamily(t *testing.T) {
	id := uuid.NewString()
	key := "bulkd:job:{" + id + "}"
	if err := h.rdb.HSet(context.Background(), key, "id", id, "family", "phone_lookup", "status", "running",
		"shards", 1, "shard_size", 10, "distinct", 1, "total_rows", 1).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.rdb.Del(context.Background(), key) })
	cmd := exec.Command(h.bin, "processor", "--job", id, "--shard", "0")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "BULKD_REDIS_URL=" + h.redisURL, "BULKD_LOG_FORMAT=text"}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != v1alpha1.ProcessorExitRetry {
		t.Fatalf("exit %v, want %d:\n%s", err, v1alpha1.ProcessorExitRetry, out)
	}
	if !strings.Contains(string(out), `unknown job family "phone_lookup"`) || !strings.Contains(string(out), "email_verification") {
		t.Fatalf("output does not name the family and the known ones:\n%s", out)
	}
}

// A failed shard's rows are answered as the family's error outcome, and the
// BulkJob's ShardsFailed condition and event say which: email lookup
// answers not_found (substatus processing_error), not "error" as company
// enrichment does. Every attempt of the job's one shard finds Redis
// unreachable, so the shard fails for good and the controller answers it.
func TestLookupShardFailingForGoodIsAnsweredNotFound(t *testing.T) {
	_, key := h.account(t, credits.Whole(100))
	in := []lookupIn{{FirstName: "Ada", LastName: "Lovelace", Domain: "failed-shard.example"},
		{FirstName: "Alan", LastName: "Turing", Domain: "failed-shard.example"}}
	// The tests of this suite run one at a time: every attempt while this
	// one runs is this job's.
	h.setHook(func(at *nodeagent.Attempt) { at.Env["BULKD_REDIS_URL"] = "redis://127.0.0.1:1/0" })
	t.Cleanup(func() { h.setHook(nil) })
	a := h.kubeAPI(t)
	code, body := a.Do(http.MethodPost, lookupPath, key, map[string]any{"input": in})
	if code != http.StatusOK {
		t.Fatalf("submit: %d %s", code, body)
	}
	var sub struct {
		JobID string `json:"job_id"`
	}
	if err := json.Unmarshal(body, &sub); err != nil {
		t.Fatal(err)
	}
	bj := h.waitBulkJob(t, sub.JobID, 90*time.Second, "completed", completed)
	c := meta.FindStatusCondition(bj.Status.Conditions, v1alpha1.ConditionShardsFailed)
	if bj.Status.ShardsFailed != 1 || bj.Status.OutcomeRows("not_found") != 2 || c == nil ||
		c.Message != "1 of 1 shards failed after retries; their unanswered rows are answered as not_found" {
		t.Fatalf("BulkJob status %+v", bj.Status)
	}
	waitFor(t, 10*time.Second, "a ShardsFailed event", func() bool {
		return strings.Contains(h.eventReasons(t, sub.JobID), "ShardsFailed")
	})
	code, body = a.Do(http.MethodGet, lookupPath+"/"+sub.JobID+"/results", key, nil)
	if code != http.StatusOK || strings.Count(string(body), `"processing_error"`) != 2 {
		t.Fatalf("results: %d %s", code, body)
	}
}
