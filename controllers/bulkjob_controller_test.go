package controllers

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/enrich"
	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/lookup"
	"github.com/bulkd/bulkd/internal/verification"
	"github.com/bulkd/bulkd/test/builders"
)

// families are the real families (only their declarations are used here:
// no answerer runs), as bulkd registers them.
var families = family.NewRegistry(enrich.NewFamily(nil, &enrich.Answerer{}), verification.New(nil, nil), lookup.New(nil, nil))

// fakeData is the engine's Redis view of jobs, in memory: these tests are
// about reconcile decisions (the envtest suite in test/kube runs the real
// store, processors and API server).
type fakeData struct {
	mu      sync.Mutex
	jobs    map[string]*jobs.Job
	done    map[string]map[int]bool
	failed  []int
	deleted []string
}

func newFakeData(js ...*jobs.Job) *fakeData {
	d := &fakeData{jobs: map[string]*jobs.Job{}, done: map[string]map[int]bool{}}
	for _, j := range js {
		d.jobs[j.ID] = j
		d.done[j.ID] = map[int]bool{}
	}
	return d
}

func (d *fakeData) Get(_ context.Context, id string) (*jobs.Job, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	j, ok := d.jobs[id]
	if !ok {
		return nil, jobs.ErrJobNotFound
	}
	c := *j
	return &c, nil
}

func (d *fakeData) UnfinishedShards(_ context.Context, j *jobs.Job) ([]int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []int
	for s := 0; s < j.Shards; s++ {
		if !d.done[j.ID][s] {
			out = append(out, s)
		}
	}
	return out, nil
}

func (d *fakeData) Delete(_ context.Context, id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.jobs, id)
	d.deleted = append(d.deleted, id)
	return nil
}

// markDone marks a shard done with its distinct inputs answered as outcome.
func (d *fakeData) markDone(id string, shard int, outcome string, rows, distinct int64) {
	j := d.jobs[id]
	if d.done[id][shard] {
		return
	}
	d.done[id][shard] = true
	j.ShardsDone++
	j.Outcomes[outcome] += rows
	j.RowsProcessed += rows
	j.DistinctProcessed += distinct
	if j.DistinctProcessed >= j.Distinct {
		j.Status, j.CompletedAt = jobs.StatusCompleted, time.Now()
	}
}

func (d *fakeData) FailShard(_ context.Context, id string, shard int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.jobs[id]; !ok {
		return jobs.ErrJobNotFound
	}
	d.failed = append(d.failed, shard)
	// As the processor does: the family's error outcome.
	outcome, ok := families.ErrorOutcome(d.jobs[id].Family)
	if !ok {
		return jobs.ErrUnknownFamily
	}
	d.markDone(id, shard, outcome, 10, 10)
	return nil
}

func (d *fakeData) ErrorOutcome(fam string) (string, bool) { return families.ErrorOutcome(fam) }

func (d *fakeData) KnownFamilies() []string { return families.Names() }

const (
	ns = "bulkd"
	id = "0c6d7e7e-1111-4222-8333-944445555666"
)

type scenario struct {
	t    *testing.T
	c    client.WithWatch
	r    *BulkJobReconciler
	data *fakeData
	rec  *events.FakeRecorder
	now  time.Time
}

func newScenario(t *testing.T, data *fakeData, objs ...client.Object) *scenario {
	scheme := v1alpha1.NewScheme()
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithIndex(&corev1.Pod{}, podJobIDField, indexPodJobID).WithStatusSubresource(&v1alpha1.BulkJob{}, &batchv1.Job{}).Build()
	s := &scenario{t: t, c: c, data: data, rec: events.NewFakeRecorder(100), now: time.Now()}
	// Without budgets: Jobs start as they are created (admission has tests
	// of its own).
	opts := DefaultOptions()
	opts.MaxRunningShards, opts.MaxRunningShardsPerAccount = 0, 0
	s.r = NewBulkJobReconciler(ReconcilerDeps{Client: c, Scheme: scheme, Recorder: s.rec, Data: data, Shards: data,
		Options: opts, Now: func() time.Time { return s.now }})
	return s
}

// withOptions builds the scenario's reconciler again with its options
// changed by f (the defaults and the status-write pacer are the
// constructor's).
func (s *scenario) withOptions(f func(*Options)) {
	d := s.r.ReconcilerDeps
	f(&d.Options)
	s.r = NewBulkJobReconciler(d)
}

func (s *scenario) reconcile() (ctrl.Result, error) {
	s.t.Helper()
	return s.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: id}})
}

func (s *scenario) mustReconcile() ctrl.Result {
	s.t.Helper()
	res, err := s.reconcile()
	if err != nil {
		s.t.Fatalf("reconcile: %v", err)
	}
	return res
}

func (s *scenario) bulkJob() *v1alpha1.BulkJob {
	s.t.Helper()
	var bj v1alpha1.BulkJob
	if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: id}, &bj); err != nil {
		s.t.Fatal(err)
	}
	return &bj
}

func (s *scenario) jobs() []batchv1.Job {
	s.t.Helper()
	var l batchv1.JobList
	if err := s.c.List(context.Background(), &l, client.InNamespace(ns)); err != nil {
		s.t.Fatal(err)
	}
	return l.Items
}

func (s *scenario) events() string {
	var out []string
	for {
		select {
		case e := <-s.rec.Events:
			out = append(out, e)
		default:
			return strings.Join(out, "\n")
		}
	}
}

func TestReconcileCreatesOneJobAndAddsTheFinalizer(t *testing.T) {
	s := newScenario(t, newFakeData(builders.MakeJobData(id).Obj()), builders.MakeBulkJob(id, ns).Obj())
	res := s.mustReconcile()
	if res.RequeueAfter != DefaultOptions().RequeueInterval {
		t.Fatalf("a running BulkJob is requeued every %v: %+v", DefaultOptions().RequeueInterval, res)
	}
	// A second pass (a restart, a requeue) adopts what the first made.
	s.mustReconcile()
	js := s.jobs()
	if len(js) != 1 {
		t.Fatalf("want one Job, have %d", len(js))
	}
	bj := s.bulkJob()
	if !metav1.IsControlledBy(&js[0], bj) {
		t.Fatalf("the Job is not controlled by its BulkJob: %+v", js[0].OwnerReferences)
	}
	if len(bj.Finalizers) != 1 || bj.Finalizers[0] != v1alpha1.Finalizer {
		t.Fatalf("finalizers %v", bj.Finalizers)
	}
	if bj.Status.Phase != v1alpha1.PhasePending || bj.Status.ShardProgress != "0/2" || bj.Status.ProcessedRows != 5 {
		t.Fatalf("status %+v", bj.Status)
	}
	if ev := s.events(); strings.Count(ev, "JobCreated") != 1 {
		t.Fatalf("want one JobCreated event: %q", ev)
	}
}

func TestReconcileAdoptsAnOrphanJobMadeForIt(t *testing.T) {
	orphan := builders.MakeJob(id, ns, 2).Label(v1alpha1.LabelJobID, id).Obj()
	s := newScenario(t, newFakeData(builders.MakeJobData(id).Obj()), builders.MakeBulkJob(id, ns).Obj(), orphan)
	s.mustReconcile()
	js := s.jobs()
	if len(js) != 1 || !metav1.IsControlledBy(&js[0], s.bulkJob()) || js[0].Labels[v1alpha1.LabelManagedBy] != v1alpha1.ManagedByController {
		t.Fatalf("orphan not adopted: %+v", js)
	}
}

func TestReconcileRefusesAJobThatIsNotItsOwn(t *testing.T) {
	other := builders.MakeJob(id, ns, 2).Label(v1alpha1.LabelJobID, id).OwnedBy("batch/v1", "CronJob", "nightly", "uid-other").Obj()
	s := newScenario(t, newFakeData(builders.MakeJobData(id).Obj()), builders.MakeBulkJob(id, ns).Obj(), other)
	if _, err := s.reconcile(); err == nil {
		t.Fatal("a Job with another controller was taken over")
	}
	if ev := s.events(); !strings.Contains(ev, "JobConflict") {
		t.Fatalf("events %q", ev)
	}
}

func TestReconcileAnswersFailedShardsAsErrorsThenCompletes(t *testing.T) {
	data := newFakeData(builders.MakeJobData(id).Obj())
	data.markDone(id, 0, jobs.OutcomeFound, 10, 10)
	bj := builders.MakeBulkJob(id, ns).Finalizer().Obj()
	s := newScenario(t, data, bj)
	s.mustReconcile() // creates the Job
	// The Job controller reports index 1 failed for good and the Job failed.
	var job batchv1.Job
	if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: id}, &job); err != nil {
		t.Fatal(err)
	}
	reported := builders.MakeJob(id, ns, 2).Started(s.now).CompletedIndexes("0", 1).FailedIndexes("1").
		Condition(batchv1.JobFailureTarget, batchv1.JobReasonFailedIndexes).Condition(batchv1.JobFailed, batchv1.JobReasonFailedIndexes).Obj()
	job.Status = reported.Status
	if err := s.c.Status().Update(context.Background(), &job); err != nil {
		t.Fatal(err)
	}
	res := s.mustReconcile()
	if len(data.failed) != 1 || data.failed[0] != 1 {
		t.Fatalf("FailShard calls %v, want [1]", data.failed)
	}
	got := s.bulkJob()
	st := got.Status
	if st.Phase != v1alpha1.PhaseCompleted || st.ShardsFailed != 1 || st.ShardsSucceeded != 1 || st.OutcomeRows("error") != 10 || st.ShardProgress != "2/2" {
		t.Fatalf("status %+v", st)
	}
	c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionComplete)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonShardsFailed || !meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionShardsFailed) {
		t.Fatalf("conditions %+v", st.Conditions)
	}
	if res.RequeueAfter <= time.Hour {
		t.Fatalf("a finished BulkJob waits for its retention, not %v", res.RequeueAfter)
	}
	// Finished: later passes neither fail the shard again nor write.
	rv := got.ResourceVersion
	s.mustReconcile()
	if len(data.failed) != 1 || s.bulkJob().ResourceVersion != rv {
		t.Fatal("a finished BulkJob was worked on again")
	}
	if ev := s.events(); !strings.Contains(ev, "ShardsFailed") || !strings.Contains(ev, "Completed") ||
		!strings.Contains(ev, "All 25 rows answered: error 10, found 10; 5 invalid; 1 of 2 shards failed") {
		t.Fatalf("events %q", ev)
	}
}

// A failed shard's condition and event name the outcome its family answers
// the unanswered rows as (family.Family's ErrorAnswer), not "error" for
// every family: email lookup answers not_found, email verification unknown.
func TestReconcileFailedShardConditionNamesTheFamilysErrorOutcome(t *testing.T) {
	for _, c := range []struct {
		family  v1alpha1.Family
		outcome string
	}{
		{v1alpha1.FamilyCompanyEnrichment, "error"},
		{v1alpha1.FamilyEmailLookup, "not_found"},
		{v1alpha1.FamilyEmailVerification, "unknown"},
	} {
		t.Run(string(c.family), func(t *testing.T) {
			data := newFakeData(builders.MakeJobData(id).Family(string(c.family)).Obj())
			data.markDone(id, 0, "found", 10, 10)
			s := newScenario(t, data, builders.MakeBulkJob(id, ns).Family(c.family).Finalizer().Obj())
			s.mustReconcile() // creates the Job
			var job batchv1.Job
			if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: id}, &job); err != nil {
				t.Fatal(err)
			}
			job.Status = builders.MakeJob(id, ns, 2).Started(s.now).CompletedIndexes("0", 1).FailedIndexes("1").
				Condition(batchv1.JobFailureTarget, batchv1.JobReasonFailedIndexes).Condition(batchv1.JobFailed, batchv1.JobReasonFailedIndexes).Obj().Status
			if err := s.c.Status().Update(context.Background(), &job); err != nil {
				t.Fatal(err)
			}
			s.mustReconcile()
			st := s.bulkJob().Status
			if st.Phase != v1alpha1.PhaseCompleted || st.OutcomeRows(c.outcome) != 10 {
				t.Fatalf("status %+v", st)
			}
			want := "answered as " + c.outcome
			sf := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionShardsFailed)
			if sf == nil || sf.Message != "1 of 2 shards failed after retries; their unanswered rows are answered as "+c.outcome {
				t.Fatalf("ShardsFailed condition %+v", sf)
			}
			if cc := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionComplete); cc == nil || !strings.HasSuffix(cc.Message, want) {
				t.Fatalf("Complete condition %+v", cc)
			}
			if ev := s.events(); !strings.Contains(ev, "Shards [1] failed for good; their unanswered rows are "+want) {
				t.Fatalf("events %q", ev)
			}
		})
	}
}

// A BulkJob of a family this build does not know (the CRD accepts any
// well-formed name) gets no Job: it stays Pending with an UnknownFamily
// condition and one Warning event, and later passes write nothing.
func TestReconcileHoldsABulkJobOfAnUnknownFamily(t *testing.T) {
	data := newFakeData(builders.MakeJobData(id).Family("phone_lookup").Obj())
	s := newScenario(t, data, builders.MakeBulkJob(id, ns).Family("phone_lookup").Finalizer().Obj())
	res := s.mustReconcile()
	got := s.bulkJob()
	c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionComplete)
	if got.Status.Phase != v1alpha1.PhasePending || c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonUnknownFamily ||
		!strings.Contains(c.Message, `family "phone_lookup" is not one this controller knows`) || !strings.Contains(c.Message, "email_lookup") {
		t.Fatalf("status %+v", got.Status)
	}
	if len(s.jobs()) != 0 {
		t.Fatal("a Job was created for an unknown family")
	}
	if res.RequeueAfter <= time.Hour {
		t.Fatalf("an unknown family waits for its retention (or a controller that knows it), not %v", res.RequeueAfter)
	}
	if ev := s.events(); !strings.Contains(ev, "UnknownFamily") {
		t.Fatalf("events %q", ev)
	}
	rv := got.ResourceVersion
	s.mustReconcile()
	if s.bulkJob().ResourceVersion != rv || s.events() != "" || len(s.jobs()) != 0 {
		t.Fatal("a second pass wrote, emitted or created again")
	}
}

func TestReconcileMarksABulkJobWhoseDataIsGoneFailed(t *testing.T) {
	s := newScenario(t, newFakeData(), builders.MakeBulkJob(id, ns).Finalizer().Obj())
	s.mustReconcile()
	st := s.bulkJob().Status
	if st.Phase != v1alpha1.PhaseFailed || !meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionFailed) || len(s.jobs()) != 0 {
		t.Fatalf("status %+v, jobs %d", st, len(s.jobs()))
	}
}

func TestReconcileFinalizerDeletesTheJobData(t *testing.T) {
	data := newFakeData(builders.MakeJobData(id).Obj())
	s := newScenario(t, data, builders.MakeBulkJob(id, ns).Finalizer().Obj())
	if err := s.c.Delete(context.Background(), s.bulkJob()); err != nil {
		t.Fatal(err)
	}
	s.mustReconcile()
	if len(data.deleted) != 1 || data.deleted[0] != id {
		t.Fatalf("deleted %v", data.deleted)
	}
	var bj v1alpha1.BulkJob
	if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: id}, &bj); !apierrors.IsNotFound(err) {
		t.Fatalf("BulkJob still there: %v", err)
	}
}

func TestReconcileDeletesBulkJobsPastTheirRetention(t *testing.T) {
	data := newFakeData(builders.MakeJobData(id).Obj())
	created := time.Now().Add(-31 * 24 * time.Hour).Truncate(time.Second)
	s := newScenario(t, data, builders.MakeBulkJob(id, ns).Finalizer().Created(created).Phase(v1alpha1.PhaseCompleted).Obj())
	s.now = created.Add(29 * 24 * time.Hour)
	if res := s.mustReconcile(); res.RequeueAfter != 24*time.Hour {
		t.Fatalf("requeue after %v, want the day left", res.RequeueAfter)
	}
	s.now = created.Add(30*24*time.Hour + time.Second)
	s.mustReconcile() // deletes: the finalizer holds it
	s.mustReconcile() // finalizes
	if len(data.deleted) != 1 {
		t.Fatalf("data not deleted: %v", data.deleted)
	}
	var bj v1alpha1.BulkJob
	if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: id}, &bj); !apierrors.IsNotFound(err) {
		t.Fatalf("BulkJob still there: %v", err)
	}
}

// A BulkJob whose job expires sooner (its account's retention,
// annotation bulkd.io/expires-at) is deleted then, not at --retention.
func TestReconcileDeletesBulkJobsAtTheirAccountsRetention(t *testing.T) {
	data := newFakeData(builders.MakeJobData(id).Obj())
	created := time.Now().Add(-3 * 24 * time.Hour).Truncate(time.Second)
	bj := builders.MakeBulkJob(id, ns).Finalizer().Created(created).Phase(v1alpha1.PhaseCompleted).Obj()
	bj.Annotations = map[string]string{v1alpha1.AnnotationExpiresAt: created.Add(2 * 24 * time.Hour).UTC().Format(time.RFC3339)}
	s := newScenario(t, data, bj)
	s.now = created.Add(24 * time.Hour)
	if res := s.mustReconcile(); res.RequeueAfter != 24*time.Hour {
		t.Fatalf("requeue after %v, want the day left of the account's 2 days", res.RequeueAfter)
	}
	s.now = created.Add(2*24*time.Hour + time.Second)
	s.mustReconcile() // deletes: the finalizer holds it
	s.mustReconcile() // finalizes
	if len(data.deleted) != 1 {
		t.Fatalf("data not deleted: %v", data.deleted)
	}
	var got v1alpha1.BulkJob
	if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: id}, &got); !apierrors.IsNotFound(err) {
		t.Fatalf("BulkJob still there: %v", err)
	}
}

// setData changes the job's data in Redis.
func (d *fakeData) setData(id string, f func(j *jobs.Job)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f(d.jobs[id])
}

// reportJob writes a Job's status as the Job controller would.
func (s *scenario) reportJob(name string, reported *batchv1.Job) {
	s.t.Helper()
	var job batchv1.Job
	if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &job); err != nil {
		s.t.Fatal(err)
	}
	job.Status = reported.Status
	if err := s.c.Status().Update(context.Background(), &job); err != nil {
		s.t.Fatal(err)
	}
}

func (s *scenario) jobNames() []string {
	var names []string
	for _, j := range s.jobs() {
		names = append(names, j.Name)
	}
	slices.Sort(names)
	return names
}

// A job whose answers are provisional: Retrying while it waits, one retry
// Job per round when retries are due and none runs, a failed round
// recorded and followed by the next, Completed when the data says so.
func TestReconcileRunsRetryRounds(t *testing.T) {
	data := newFakeData(builders.MakeJobData(id).Family("email_verification").Obj())
	bj := builders.MakeBulkJob(id, ns).Family(v1alpha1.FamilyEmailVerification).Finalizer().Obj()
	s := newScenario(t, data, bj)
	s.r.Options.BackoffLimitPerIndex = 2
	s.mustReconcile() // creates the shard Job
	// Both shards give every input a first answer; 3 are provisional.
	data.markDone(id, 0, "valid", 10, 10)
	data.markDone(id, 1, "unknown", 10, 10)
	due := s.now.Add(10 * time.Minute)
	data.setData(id, func(j *jobs.Job) { j.Status, j.Retrying, j.NextRetryAt = jobs.StatusRetrying, 3, due })
	s.reportJob(id, builders.MakeJob(id, ns, 2).Started(s.now).CompletedIndexes("0-1", 2).
		Condition(batchv1.JobSuccessCriteriaMet, batchv1.JobReasonCompletionsReached).Condition(batchv1.JobComplete, batchv1.JobReasonCompletionsReached).Obj())

	res := s.mustReconcile()
	st := s.bulkJob().Status
	if st.Phase != v1alpha1.PhaseRetrying || st.Retrying != 3 || st.RetryRounds != 0 || st.NextRetryTime == nil || st.Progress != "100%" ||
		st.OutcomeRows("unknown") != 10 || len(s.jobs()) != 1 {
		t.Fatalf("status %+v, jobs %v", st, s.jobNames())
	}
	if res.RequeueAfter != 10*time.Minute {
		t.Fatalf("requeue after %v, want when the retry is due", res.RequeueAfter)
	}
	if ev := s.events(); !strings.Contains(ev, "Retrying") || strings.Contains(ev, "Completed") {
		t.Fatalf("events %q", ev)
	}

	// Due: round 1; while it runs, no other.
	s.now = due
	res = s.mustReconcile()
	s.mustReconcile()
	if names := s.jobNames(); !slices.Equal(names, []string{id, id + "-retry-1"}) {
		t.Fatalf("jobs %v", names)
	}
	if st := s.bulkJob().Status; st.RetryRounds != 1 || st.Phase != v1alpha1.PhaseRetrying || res.RequeueAfter != DefaultOptions().RequeueInterval {
		t.Fatalf("status %+v, requeue %v", st, res.RequeueAfter)
	}
	var retry batchv1.Job
	if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: id + "-retry-1"}, &retry); err != nil {
		t.Fatal(err)
	}
	if !metav1.IsControlledBy(&retry, s.bulkJob()) || *retry.Spec.BackoffLimit != 2 || !slices.Contains(retry.Spec.Template.Spec.Containers[0].Args, "--retries") {
		t.Fatalf("retry Job %+v", retry.Spec)
	}
	if ev := s.events(); strings.Count(ev, "RetryJobCreated") != 1 {
		t.Fatalf("events %q", ev)
	}

	// Round 1 fails for good before it claimed anything: its retries are
	// still due. One pass records the failure and starts round 2.
	s.reportJob(id+"-retry-1", builders.MakeJob(id+"-retry-1", ns, 1).NonIndexed(2).Started(s.now).
		Condition(batchv1.JobFailureTarget, batchv1.JobReasonBackoffLimitExceeded).Condition(batchv1.JobFailed, batchv1.JobReasonBackoffLimitExceeded).Obj())
	s.mustReconcile()
	s.mustReconcile()
	st = s.bulkJob().Status
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionRetryFailed); c == nil || c.Status != metav1.ConditionTrue ||
		!strings.Contains(c.Message, id+"-retry-1") || st.RetryRounds != 2 {
		t.Fatalf("status %+v", st)
	}
	if names := s.jobNames(); !slices.Equal(names, []string{id, id + "-retry-1", id + "-retry-2"}) {
		t.Fatalf("jobs %v", names)
	}
	if ev := s.events(); strings.Count(ev, "RetryJobFailed") != 1 || strings.Count(ev, "RetryJobCreated") != 1 {
		t.Fatalf("want one RetryJobFailed and one RetryJobCreated event: %q", ev)
	}

	// Round 2 answers the rest for good: Completed, outcomes by name.
	data.setData(id, func(j *jobs.Job) {
		j.Outcomes["unknown"] -= 3
		j.Outcomes["valid"] += 2
		j.Outcomes["invalid"] += 1
		j.Status, j.Retrying, j.NextRetryAt, j.CompletedAt = jobs.StatusCompleted, 0, time.Time{}, s.now
	})
	s.reportJob(id+"-retry-2", builders.MakeJob(id+"-retry-2", ns, 1).NonIndexed(2).Started(s.now).Succeeded(1).
		Condition(batchv1.JobSuccessCriteriaMet, batchv1.JobReasonCompletionsReached).Condition(batchv1.JobComplete, batchv1.JobReasonCompletionsReached).Obj())
	s.mustReconcile()
	st = s.bulkJob().Status
	if st.Phase != v1alpha1.PhaseCompleted || st.Retrying != 0 || st.NextRetryTime != nil || st.RetryRounds != 2 ||
		meta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionRetryFailed) {
		t.Fatalf("status %+v", st)
	}
	want := []v1alpha1.OutcomeCount{{Name: "invalid", Rows: 1}, {Name: "unknown", Rows: 7}, {Name: "valid", Rows: 12}}
	if !slices.Equal(st.Outcomes, want) {
		t.Fatalf("outcomes %+v, want %+v", st.Outcomes, want)
	}
	if ev := s.events(); !strings.Contains(ev, "All 25 rows answered: invalid 1, unknown 7, valid 12; 5 invalid; 0 of 2 shards failed") {
		t.Fatalf("events %q", ev)
	}
}

// A retry Job the cache does not show yet is still found: no second round
// starts while one runs.
func TestReconcileFindsARetryJobTheCacheMisses(t *testing.T) {
	data := newFakeData(builders.MakeJobData(id).Family("email_verification").ShardsDone(2).Answered("valid", 20, 20).Retrying(2, time.Now().Add(-time.Minute)).Obj())
	bj := builders.MakeBulkJob(id, ns).Family(v1alpha1.FamilyEmailVerification).Finalizer().Phase(v1alpha1.PhaseRetrying).Retrying(2, 1).Obj()
	running := builders.MakeJob(id+"-retry-1", ns, 1).NonIndexed(3).Active(1).OwnedBy("bulkd.io/v1alpha1", "BulkJob", id, bj.UID).Obj()
	s := newScenario(t, data, bj, running)
	live := s.c
	s.r.APIReader = live
	s.r.Client = interceptorClient(live)
	s.mustReconcile()
	if names := s.jobNames(); !slices.Equal(names, []string{id + "-retry-1"}) {
		t.Fatalf("jobs %v", names)
	}
}

// interceptorClient is c with a cache that has not seen retry Jobs yet.
func interceptorClient(c client.WithWatch) client.Client {
	return interceptor.NewClient(c, interceptor.Funcs{
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if _, ok := obj.(*batchv1.Job); ok && strings.Contains(key.Name, "-retry-") {
				return apierrors.NewNotFound(batchv1.Resource("jobs"), key.Name)
			}
			return cl.Get(ctx, key, obj, opts...)
		},
	})
}
