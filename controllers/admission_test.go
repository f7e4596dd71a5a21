package controllers

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/admission"
	"github.com/bulkd/bulkd/internal/batchjob"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/test/builders"
)

// These tests drive the admission pass on a fake API (the envtest suite in
// test/kube runs it with the real API server, processors and the Job
// controller's stand-in): each step plays the Job controller and the
// kubelet by hand, so the order of admissions is exact.

type admissionScene struct {
	t     *testing.T
	c     client.WithWatch
	a     *admission.Admitter
	opts  Options
	now   time.Time
	t0    time.Time
	seq   int
	order []string // "<bulkjob>/<index>" in the order pods were admitted
	seen  map[types.UID]bool
	// most is the most processor pods ever seen running at once.
	most int
}

func newAdmissionScene(t *testing.T, global, perAccount int32) *admissionScene {
	c := fake.NewClientBuilder().WithScheme(v1alpha1.NewScheme()).WithIndex(&corev1.Pod{}, podJobIDField, indexPodJobID).
		WithStatusSubresource(&v1alpha1.BulkJob{}, &batchv1.Job{}, &corev1.Pod{}).Build()
	opts := DefaultOptions().withDefaults()
	opts.MaxRunningShards, opts.MaxRunningShardsPerAccount = global, perAccount
	s := &admissionScene{t: t, c: c, opts: opts, now: time.Now(), t0: time.Now().Add(-time.Hour).Truncate(time.Second), seen: map[types.UID]bool{}}
	s.a = admission.New(c, admissionConfig(opts), func() time.Time { return s.now })
	return s
}

// keepNewcomerSlots restarts the admission with n slots of the global
// budget kept for accounts with nothing running.
func (s *admissionScene) keepNewcomerSlots(n int32) {
	s.opts.NewcomerSlots = n
	s.a = admission.New(s.c, admissionConfig(s.opts), func() time.Time { return s.now })
}

// submit makes a BulkJob of account acct with shards shards and
// parallelism par, and its shard Job as the controller creates it.
func (s *admissionScene) submit(name, acct string, shards, par int32) *v1alpha1.BulkJob {
	s.t.Helper()
	s.seq++
	bj := builders.MakeBulkJob(name, ns).Rows(int64(shards)*10, int64(shards)*10).Shards(shards, 10).Parallelism(par).
		Created(s.t0.Add(time.Duration(s.seq) * time.Second)).Phase(v1alpha1.PhaseQueued).Obj()
	bj.Labels = map[string]string{v1alpha1.LabelAccount: acct}
	s.create(bj)
	job := desiredJob(bj, s.opts)
	if err := admissionControl(job, bj, s.opts); err != nil {
		s.t.Fatal(err)
	}
	s.own(bj, job)
	return bj
}

// retryRound makes a retry Job for bj, as the controller does.
func (s *admissionScene) retryRound(bj *v1alpha1.BulkJob, round int32) {
	s.t.Helper()
	job := desiredRetryJob(bj, s.opts, round)
	if err := admissionControl(job, bj, s.opts); err != nil {
		s.t.Fatal(err)
	}
	s.own(bj, job)
}

func (s *admissionScene) own(bj *v1alpha1.BulkJob, job *batchv1.Job) {
	s.t.Helper()
	job.UID = types.UID("uid-job-" + job.Name)
	if err := controllerutil.SetControllerReference(bj, job, s.c.Scheme()); err != nil {
		s.t.Fatal(err)
	}
	s.create(job)
}

func (s *admissionScene) create(o client.Object) {
	s.t.Helper()
	if err := s.c.Create(context.Background(), o); err != nil {
		s.t.Fatal(err)
	}
}

// pass runs one admission pass, then plays the Job controller: every
// Job that is not suspended gets gated pods for its pending indexes, up
// to its parallelism (gated pods count as active).
func (s *admissionScene) pass() {
	s.t.Helper()
	if _, err := s.a.Reconcile(context.Background(), ctrl.Request{}); err != nil {
		s.t.Fatalf("admission pass: %v", err)
	}
	s.record()
	s.jobController()
	s.record()
}

func (s *admissionScene) jobs() []batchv1.Job {
	var l batchv1.JobList
	if err := s.c.List(context.Background(), &l); err != nil {
		s.t.Fatal(err)
	}
	return l.Items
}

func (s *admissionScene) pods() []corev1.Pod {
	var l corev1.PodList
	if err := s.c.List(context.Background(), &l); err != nil {
		s.t.Fatal(err)
	}
	slices.SortFunc(l.Items, func(x, y corev1.Pod) int { return strings.Compare(x.Name, y.Name) })
	return l.Items
}

func (s *admissionScene) jobController() {
	s.t.Helper()
	pods := s.pods()
	for _, job := range s.jobs() {
		if ptr.Deref(job.Spec.Suspend, false) {
			continue
		}
		taken := map[int]bool{}
		active := 0
		for _, p := range pods {
			if !metav1.IsControlledBy(&p, &job) {
				continue
			}
			if p.Status.Phase == corev1.PodSucceeded || !batchjob.PodFinished(&p) {
				taken[batchjob.PodIndex(&p)] = true
			}
			if !batchjob.PodFinished(&p) {
				active++
			}
		}
		for i := 0; i < int(*job.Spec.Completions) && active < int(*job.Spec.Parallelism); i++ {
			if taken[i] {
				continue
			}
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", job.Name, i), Namespace: job.Namespace,
				UID:         types.UID(fmt.Sprintf("uid-pod-%s-%d", job.Name, i)),
				Labels:      job.Spec.Template.Labels,
				Annotations: map[string]string{batchv1.JobCompletionIndexAnnotation: strconv.Itoa(i)}},
				Spec: job.Spec.Template.Spec}
			if err := controllerutil.SetControllerReference(&job, p, s.c.Scheme()); err != nil {
				s.t.Fatal(err)
			}
			s.create(p)
			active++
		}
	}
}

// record notes the pods admitted since last time, and how many run.
func (s *admissionScene) record() {
	running := 0
	for _, p := range s.pods() {
		if admission.HasGate(&p) || batchjob.PodFinished(&p) {
			continue
		}
		running++
		if !s.seen[p.UID] {
			s.seen[p.UID] = true
			s.order = append(s.order, p.Labels[v1alpha1.LabelJobID]+"/"+p.Annotations[batchv1.JobCompletionIndexAnnotation])
		}
	}
	s.most = max(s.most, running)
}

// finish plays the kubelet: the running pod of bulkjob's index ends.
func (s *admissionScene) finish(job string, index int, phase corev1.PodPhase) {
	s.t.Helper()
	for _, p := range s.pods() {
		if p.Labels[v1alpha1.LabelJobID] == job && batchjob.PodIndex(&p) == index && !admission.HasGate(&p) && !batchjob.PodFinished(&p) {
			p.Status.Phase = phase
			if err := s.c.Status().Update(context.Background(), &p); err != nil {
				s.t.Fatal(err)
			}
			return
		}
	}
	s.t.Fatalf("no running pod of %s index %d", job, index)
}

func (s *admissionScene) running(acct string) int {
	n := 0
	for _, p := range s.pods() {
		if !admission.HasGate(&p) && !batchjob.PodFinished(&p) && (acct == "" || p.Labels[v1alpha1.LabelAccount] == acct) {
			n++
		}
	}
	return n
}

func (s *admissionScene) suspended(name string) bool {
	var job batchv1.Job
	if err := s.c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &job); err != nil {
		s.t.Fatal(err)
	}
	return ptr.Deref(job.Spec.Suspend, false)
}

const (
	jobA1 = "a1a1a1a1-0000-4000-8000-000000000001"
	jobA2 = "a2a2a2a2-0000-4000-8000-000000000002"
	jobA3 = "a3a3a3a3-0000-4000-8000-000000000003"
	jobB1 = "b1b1b1b1-0000-4000-8000-000000000001"
	jobC1 = "c1c1c1c1-0000-4000-8000-000000000001"
)

// With a global budget of 4, account A's three big BulkJobs hold all of
// it; account B's small BulkJob, submitted next, gets the first slot that
// frees, ahead of A's remaining shards, and the budget is never exceeded.
func TestAdmissionSmallJobOfAnotherAccountGoesBeforeTheBigOnesRemainingShards(t *testing.T) {
	s := newAdmissionScene(t, 4, 4)
	for _, name := range []string{jobA1, jobA2, jobA3} {
		s.submit(name, "acct_a", 10, 4)
	}
	for range 3 {
		s.pass()
	}
	if got := s.running("acct_a"); got != 4 {
		t.Fatalf("A runs %d shards, want the whole budget (4); admitted %v", got, s.order)
	}
	s.submit(jobB1, "acct_b", 1, 4)
	s.pass()
	if !s.suspended(jobB1) || s.running("") != 4 {
		t.Fatalf("B started though the budget is held: running %d", s.running(""))
	}
	// One of A's shards ends: its slot goes to B, not to A's next shard.
	first := s.order[0]
	s.finish(first[:strings.IndexByte(first, '/')], 0, corev1.PodSucceeded)
	for range 3 {
		s.pass()
	}
	if s.suspended(jobB1) || s.running("acct_b") != 1 || s.running("acct_a") != 3 {
		t.Fatalf("after one of A's shards ended: B runs %d, A %d; admitted %v", s.running("acct_b"), s.running("acct_a"), s.order)
	}
	if last := s.order[len(s.order)-1]; last != jobB1+"/0" {
		t.Fatalf("the freed slot went to %s, want B's shard; admitted %v", last, s.order)
	}
	if s.most > 4 {
		t.Fatalf("%d shards ran at once with a budget of 4", s.most)
	}
}

// With slots kept for newcomers, one account's burst fills the budget but
// for them: B, an account with nothing running, starts at once instead of
// waiting for one of A's shards to end (shards run minutes); then B waits
// its turn like A, and the kept slots stay free for the next newcomer.
func TestAdmissionNewcomerSlotsLetANewAccountStartAtOnce(t *testing.T) {
	s := newAdmissionScene(t, 6, 0)
	s.keepNewcomerSlots(2)
	for _, name := range []string{jobA1, jobA2, jobA3} {
		s.submit(name, "acct_a", 10, 6)
	}
	for range 3 {
		s.pass()
	}
	if got := s.running("acct_a"); got != 4 {
		t.Fatalf("A runs %d shards, want the budget less the newcomers' slots (6-2); admitted %v", got, s.order)
	}
	s.submit(jobB1, "acct_b", 3, 3)
	for range 2 {
		s.pass()
	}
	if s.running("acct_b") != 1 || s.running("acct_a") != 4 {
		t.Fatalf("B runs %d, A %d: B must start one shard at once, no more", s.running("acct_b"), s.running("acct_a"))
	}
	s.submit(jobC1, "acct_c", 1, 1)
	for range 2 {
		s.pass()
	}
	if s.running("acct_c") != 1 || s.running("") != 6 {
		t.Fatalf("C runs %d, all %d: the second newcomer takes the last kept slot", s.running("acct_c"), s.running(""))
	}
	// The established accounts share the budget less the kept slots: the
	// slot A frees refills the newcomers' part, which the next newcomer
	// takes at once.
	first := s.order[0]
	s.finish(first[:strings.IndexByte(first, '/')], 0, corev1.PodSucceeded)
	for range 3 {
		s.pass()
	}
	if s.running("acct_b") != 1 || s.running("acct_a") != 3 {
		t.Fatalf("after one of A's shards ended: B runs %d, A %d; admitted %v", s.running("acct_b"), s.running("acct_a"), s.order)
	}
	const jobD1 = "d1d1d1d1-0000-4000-8000-000000000001"
	s.submit(jobD1, "acct_d", 1, 1)
	for range 2 {
		s.pass()
	}
	if s.running("acct_d") != 1 || s.most > 6 {
		t.Fatalf("D runs %d, most at once %d: the next newcomer starts at once, within the budget", s.running("acct_d"), s.most)
	}
}

// One account's burst gives a pass hundreds of pods to admit; a pass
// sends 128 patches at most and the next follows at once, so a Job of
// another account created meanwhile starts at the next pass instead of
// waiting for the whole burst's patches; and nothing of the burst is lost.
func TestAdmissionPassesAreBoundedSoANewJobIsServedNext(t *testing.T) {
	s := newAdmissionScene(t, 1000, 0)
	s.keepNewcomerSlots(0)
	for i := range 70 {
		s.submit(fmt.Sprintf("%08x-0000-4000-8000-%012x", 0xa0000000+i, i), "acct_a", 4, 4)
	}
	const most = 128 // what one pass may un-suspend and un-gate
	res, err := s.a.Reconcile(context.Background(), ctrl.Request{})
	if err != nil || res.RequeueAfter > time.Second {
		t.Fatalf("the first pass of a burst: %v, next pass after %v, want at once", err, res.RequeueAfter)
	}
	s.record()
	s.jobController() // 280 gated pods
	started := func() int {
		n := 0
		for _, j := range s.jobs() {
			if !ptr.Deref(j.Spec.Suspend, false) {
				n++
			}
		}
		return n
	}
	before := len(s.seen)
	s.pass()
	if got := len(s.seen) - before; got == 0 || got > most {
		t.Fatalf("one pass un-gated %d of the burst's pods, want some and at most %d", got, most)
	}
	s.submit(jobB1, "acct_b", 1, 1)
	startedBefore := started()
	s.pass()
	if s.suspended(jobB1) {
		t.Fatalf("B's Job still waits after the next pass (%d Jobs started before it)", startedBefore)
	}
	for i := 0; i < 12 && s.running("acct_a") < 280; i++ {
		s.pass()
	}
	if got := s.running("acct_a"); got != 280 {
		t.Fatalf("A runs %d of its 280 shards after the passes, want all (budget 1,000)", got)
	}
	if s.running("acct_b") != 1 || s.most > 1000 {
		t.Fatalf("B runs %d; most at once %d", s.running("acct_b"), s.most)
	}
}

// A's shards take turns across A's jobs in FIFO order (its oldest job
// first), and one account never holds more than its own budget: with 2
// per account out of 4, B starts at once although A has 30 shards queued.
func TestAdmissionPerAccountBudget(t *testing.T) {
	s := newAdmissionScene(t, 4, 2)
	for _, name := range []string{jobA1, jobA2, jobA3} {
		s.submit(name, "acct_a", 10, 4)
	}
	for range 3 {
		s.pass()
	}
	if got := s.running("acct_a"); got != 2 {
		t.Fatalf("A runs %d shards, want its budget (2)", got)
	}
	s.submit(jobB1, "acct_b", 1, 4)
	s.pass()
	s.pass()
	if s.running("acct_b") != 1 || s.running("acct_a") != 2 {
		t.Fatalf("B runs %d, A %d: B must start at once on the budget A cannot take", s.running("acct_b"), s.running("acct_a"))
	}
	// A's first two admissions were its oldest job's.
	if !strings.HasPrefix(s.order[0], jobA1) || !strings.HasPrefix(s.order[1], jobA1) {
		t.Fatalf("A's admissions %v: want its oldest job's shards first", s.order)
	}
	if s.most > 3 {
		t.Fatalf("%d shards ran at once", s.most)
	}
}

// A controller that becomes leader (a restart) counts the pods already
// running against the budget before it admits anything.
func TestAdmissionCountsPodsRunningBeforeItStarted(t *testing.T) {
	s := newAdmissionScene(t, 3, 3)
	s.submit(jobA1, "acct_a", 10, 3)
	s.pass()
	s.pass()
	if s.running("acct_a") != 3 {
		t.Fatalf("A runs %d", s.running("acct_a"))
	}
	// A new leader: nothing remembered.
	s.a = admission.New(s.c, admissionConfig(s.opts), func() time.Time { return s.now })
	s.submit(jobB1, "acct_b", 1, 1)
	s.pass()
	if !s.suspended(jobB1) || s.running("") != 3 {
		t.Fatalf("the new leader admitted beyond the budget: running %d", s.running(""))
	}
	s.finish(jobA1, 1, corev1.PodSucceeded)
	s.pass()
	s.pass()
	if s.running("acct_b") != 1 || s.running("") != 3 {
		t.Fatalf("B runs %d, all %d", s.running("acct_b"), s.running(""))
	}
}

// A failed pod releases its slot; the Job controller's replacement (the
// index's retry) waits for admission like any shard.
func TestAdmissionFailedPodsReleaseTheirSlot(t *testing.T) {
	s := newAdmissionScene(t, 1, 1)
	s.submit(jobA1, "acct_a", 2, 2)
	s.pass()
	s.pass()
	s.finish(jobA1, 0, corev1.PodFailed)
	// The replacement is a new pod: gone pod, new gated one.
	for _, p := range s.pods() {
		if batchjob.PodFinished(&p) {
			if err := s.c.Delete(context.Background(), &p); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.pass()
	s.pass()
	if s.running("") != 1 {
		t.Fatalf("running %d, want 1", s.running(""))
	}
}

// Due retries take part: a BulkJob's retry Job waits suspended like a
// shard Job, and is admitted in its account's turn.
func TestAdmissionRetryJobsTakePart(t *testing.T) {
	s := newAdmissionScene(t, 2, 2)
	s.submit(jobA1, "acct_a", 10, 2)
	s.pass()
	s.pass()
	b := builders.MakeBulkJob(jobB1, ns).Family(v1alpha1.FamilyEmailVerification).Created(s.t0).Phase(v1alpha1.PhaseRetrying).Retrying(3, 0).Obj()
	b.Labels = map[string]string{v1alpha1.LabelAccount: "acct_b"}
	s.create(b)
	s.retryRound(b, 1)
	retry := retryJobName(b, 1)
	s.pass()
	if !s.suspended(retry) {
		t.Fatal("a retry Job started while A holds the budget")
	}
	s.finish(jobA1, 0, corev1.PodSucceeded)
	s.pass()
	s.pass()
	if s.suspended(retry) || s.running("acct_b") != 1 || s.running("acct_a") != 1 {
		t.Fatalf("retry Job suspended=%v, B runs %d, A %d", s.suspended(retry), s.running("acct_b"), s.running("acct_a"))
	}
}

// Accounts' turns are weighed by plan (--fair-weights): with the budget of
// one pod contended, a professional account of weight 3 gets three
// shards for each of a pay-as-you-go account's.
func TestAdmissionWeighsAccountsByPlan(t *testing.T) {
	s := newAdmissionScene(t, 1, 1)
	s.opts.PlanWeights = map[string]int{"payg": 1, "professional": 3}
	s.a = admission.New(s.c, admissionConfig(s.opts), func() time.Time { return s.now })
	big := func(name, acct, plan string) {
		s.seq++
		bj := builders.MakeBulkJob(name, ns).Rows(40_000, 40_000).Shards(40, 1000).Parallelism(2).
			Created(s.t0.Add(time.Duration(s.seq) * time.Second)).Obj()
		bj.Labels = map[string]string{v1alpha1.LabelAccount: acct}
		if plan != "" {
			bj.Labels[v1alpha1.LabelPlan] = plan
		}
		s.create(bj)
		job := desiredJob(bj, s.opts)
		if err := admissionControl(job, bj, s.opts); err != nil {
			t.Fatal(err)
		}
		s.own(bj, job)
	}
	big(jobA1, "acct_a", "professional")
	big(jobB1, "acct_b", "")
	for range 3 {
		s.pass()
	}
	for i := 0; i < 24; i++ {
		// The running shard ends; the next is admitted.
		for _, p := range s.pods() {
			if !admission.HasGate(&p) && !batchjob.PodFinished(&p) {
				p.Status.Phase = corev1.PodSucceeded
				if err := s.c.Status().Update(context.Background(), &p); err != nil {
					t.Fatal(err)
				}
			}
		}
		s.pass()
		s.pass()
	}
	n := map[string]int{}
	for _, o := range s.order[4:] { // past the start of both
		n[o[:2]]++
	}
	t.Logf("admissions per account %v", n)
	if n["a1"] < 2*n["b1"] || n["a1"] > 4*n["b1"] {
		t.Fatalf("admissions per account %v, want about 3:1 (order %v)", n, s.order)
	}
}

// The place in line of Queued BulkJobs: accounts take turns, those running
// nothing first.
func TestAdmissionPlaceInLine(t *testing.T) {
	s := newAdmissionScene(t, 1, 1)
	s.submit(jobA1, "acct_a", 2, 1)
	s.pass()
	s.pass()
	s.submit(jobA2, "acct_a", 2, 1)
	s.submit(jobA3, "acct_a", 2, 1)
	s.submit(jobB1, "acct_b", 2, 1)
	s.submit(jobC1, "acct_c", 2, 1)
	s.pass()
	got := map[string]int32{}
	for _, name := range []string{jobA1, jobA2, jobA3, jobB1, jobC1} {
		got[name] = s.a.Position(types.NamespacedName{Namespace: ns, Name: name})
	}
	want := map[string]int32{jobA1: 0, jobB1: 1, jobC1: 2, jobA2: 3, jobA3: 4}
	for name, p := range want {
		if got[name] != p {
			t.Fatalf("places %v, want %v", got, want)
		}
	}
	// The BulkJobs whose place changed are woken.
	woken := map[string]bool{}
	for len(s.a.Woken()) > 0 {
		woken[(<-s.a.Woken()).Object.GetName()] = true
	}
	if !woken[jobB1] || !woken[jobA3] {
		t.Fatalf("woken %v", woken)
	}
}

// The reconciler's side: a BulkJob whose Job waits for admission is
// Queued with its place in line, and is Admitted (an event) once a pod of
// its Job has no gate.
func TestReconcileQueuedThenAdmitted(t *testing.T) {
	data := newFakeData(builders.MakeJobData(id).Obj())
	bj := builders.MakeBulkJob(id, ns).Finalizer().Obj()
	s := newScenario(t, data, bj)
	s.r.Options.MaxRunningShards, s.r.Options.MaxRunningShardsPerAccount = 1, 1
	pass := admission.New(s.c, admissionConfig(s.r.Options), func() time.Time { return s.now })
	s.r.admission = pass
	data.setData(id, func(j *jobs.Job) { j.AccountID = "acct_b" })
	s.mustReconcile()
	// The fake API gives objects no uid; the real one always does.
	job := s.jobs()[0]
	job.UID = "uid-job"
	if err := s.c.Update(context.Background(), &job); err != nil {
		t.Fatal(err)
	}
	got := s.bulkJob()
	if got.Labels[v1alpha1.LabelAccount] != "acct_b" {
		t.Fatalf("account label not filled from the job's data: %v", got.Labels)
	}
	job = s.jobs()[0]
	if !ptr.Deref(job.Spec.Suspend, false) || len(job.Spec.Template.Spec.SchedulingGates) != 1 ||
		job.Spec.Template.Labels[v1alpha1.LabelAccount] != "acct_b" {
		t.Fatalf("Job %+v", job)
	}
	// Another account's shard holds the budget of 1.
	other := builders.MakeBulkJob(jobA1, ns).Phase(v1alpha1.PhaseRunning).Obj()
	other.Labels = map[string]string{v1alpha1.LabelAccount: "acct_a"}
	otherJob := desiredJob(other, s.r.Options)
	otherJob.UID = "uid-other-job"
	if err := controllerutil.SetControllerReference(other, otherJob, s.c.Scheme()); err != nil {
		t.Fatal(err)
	}
	running := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: jobA1 + "-0", Namespace: ns, UID: "uid-other-pod", Labels: otherJob.Spec.Template.Labels,
		Annotations: map[string]string{batchv1.JobCompletionIndexAnnotation: "0"}}, Spec: otherJob.Spec.Template.Spec}
	if err := controllerutil.SetControllerReference(otherJob, running, s.c.Scheme()); err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{other, otherJob, running} {
		if err := s.c.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	// The admission pass places it (first in line) and wakes it.
	if _, err := pass.Reconcile(context.Background(), ctrl.Request{}); err != nil {
		t.Fatal(err)
	}
	s.mustReconcile()
	if st := s.bulkJob().Status; st.Phase != v1alpha1.PhaseQueued || st.QueuePosition != 1 || st.StartTime != nil {
		t.Fatalf("status %+v", st)
	}
	if ev := s.events(); !strings.Contains(ev, "Queued") || strings.Contains(ev, "Admitted") {
		t.Fatalf("events %q", ev)
	}
	// The other shard ends: B's Job is admitted.
	running.Status.Phase = corev1.PodSucceeded
	if err := s.c.Status().Update(context.Background(), running); err != nil {
		t.Fatal(err)
	}
	if _, err := pass.Reconcile(context.Background(), ctrl.Request{}); err != nil {
		t.Fatal(err)
	}
	// Admitted: un-suspended; its pod appears and the pass removes its gate.
	if err := s.c.Get(context.Background(), client.ObjectKeyFromObject(&job), &job); err != nil {
		t.Fatal(err)
	}
	if ptr.Deref(job.Spec.Suspend, true) {
		t.Fatal("the pass did not un-suspend the Job")
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: id + "-0", Namespace: ns, UID: "uid-pod-0", Labels: job.Spec.Template.Labels,
		Annotations: map[string]string{batchv1.JobCompletionIndexAnnotation: "0"}}, Spec: job.Spec.Template.Spec}
	if err := controllerutil.SetControllerReference(&job, pod, s.c.Scheme()); err != nil {
		t.Fatal(err)
	}
	if err := s.c.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	if _, err := pass.Reconcile(context.Background(), ctrl.Request{}); err != nil {
		t.Fatal(err)
	}
	s.mustReconcile()
	st := s.bulkJob().Status
	if st.Phase != v1alpha1.PhasePending && st.Phase != v1alpha1.PhaseRunning || st.QueuePosition != 0 || st.ShardsActive != 1 {
		t.Fatalf("status %+v", st)
	}
	if ev := s.events(); !strings.Contains(ev, "Admitted") {
		t.Fatalf("events %q", ev)
	}
}

// Kueue mode: the Job carries its queue's label and starts suspended;
// the controller never un-suspends it; once Kueue does, the BulkJob runs.
func TestReconcileKueueMode(t *testing.T) {
	data := newFakeData(builders.MakeJobData(id).Obj())
	bj := builders.MakeBulkJob(id, ns).Finalizer().Obj()
	bj.Labels = map[string]string{v1alpha1.LabelAccount: "acct_b"}
	s := newScenario(t, data, bj)
	s.r.Options.KueueQueueName = "bulkd-{plan}-{account}"
	for range 2 {
		s.mustReconcile()
	}
	job := s.jobs()[0]
	if job.Labels[v1alpha1.KueueQueueLabel] != "bulkd-none-acct-b" || !ptr.Deref(job.Spec.Suspend, false) || len(job.Spec.Template.Spec.SchedulingGates) != 0 {
		t.Fatalf("Job labels %v suspend %v gates %v", job.Labels, job.Spec.Suspend, job.Spec.Template.Spec.SchedulingGates)
	}
	if st := s.bulkJob().Status; st.Phase != v1alpha1.PhaseQueued {
		t.Fatalf("status %+v", st)
	}
	// Kueue admits: un-suspends; the Job controller starts it.
	job.Spec.Suspend = ptr.To(false)
	if err := s.c.Update(context.Background(), &job); err != nil {
		t.Fatal(err)
	}
	s.reportJob(id, builders.MakeJob(id, ns, 2).Started(s.now).Active(2).Obj())
	s.mustReconcile()
	if st := s.bulkJob().Status; st.Phase != v1alpha1.PhaseRunning {
		t.Fatalf("status %+v", st)
	}
	if ev := s.events(); !strings.Contains(ev, "Admitted") {
		t.Fatalf("events %q", ev)
	}
}

func TestKueueQueueNames(t *testing.T) {
	for _, c := range []struct{ tmpl, acct, plan, want string }{
		{"bulkd", "acct_x1", "", "bulkd"},
		{"bulkd-{plan}", "acct_x1", "professional", "bulkd-professional"},
		{"bulkd-{plan}", "acct_x1", "", "bulkd-none"},
		{"{account}", "acct_X1", "", "acct-x1"},
		{"q-{family}", "acct_x1", "", "q-company-enrichment"},
	} {
		got, err := kueueQueue(c.tmpl, c.acct, c.plan, v1alpha1.FamilyCompanyEnrichment)
		if err != nil || got != c.want {
			t.Fatalf("%q: %q %v, want %q", c.tmpl, got, err, c.want)
		}
	}
	if _, err := kueueQueue("Bulkd_{plan}", "a", "", v1alpha1.FamilyCompanyEnrichment); err == nil {
		t.Fatal("an invalid queue name was accepted")
	}
	kc := config.DefaultKube()
	kc.KueueQueueName = "bulkd.{plan}"
	o := OptionsFrom(kc, time.Hour, corev1.ResourceRequirements{})
	if o.Validate() == nil {
		t.Fatal("a template giving no DNS label passed Validate")
	}
}

// Budgets set to 0 after Jobs were made waiting for admission: the
// controller starts them and removes their pods' gates, or nothing would.
func TestReconcileStartsWaitingJobsWhenAdmissionIsOff(t *testing.T) {
	data := newFakeData(builders.MakeJobData(id).Obj())
	bj := builders.MakeBulkJob(id, ns).Finalizer().Obj()
	s := newScenario(t, data, bj)
	s.r.Options.MaxRunningShards = 1
	s.mustReconcile() // made suspended, gated
	job := s.jobs()[0]
	if !ptr.Deref(job.Spec.Suspend, false) {
		t.Fatal("not suspended")
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: id + "-0", Namespace: ns, Labels: job.Spec.Template.Labels,
		Annotations: map[string]string{batchv1.JobCompletionIndexAnnotation: "0"}}, Spec: job.Spec.Template.Spec}
	if err := s.c.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	s.r.Options.MaxRunningShards = 0
	s.mustReconcile()
	job = s.jobs()[0]
	if err := s.c.Get(context.Background(), client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
	if ptr.Deref(job.Spec.Suspend, false) || admission.HasGate(pod) {
		t.Fatalf("suspend %v, gates %v", job.Spec.Suspend, pod.Spec.SchedulingGates)
	}
}

// Switching admission modes with a BulkJob waiting: its Job is handed to
// the admission that now runs, in both directions and to none, so it is
// never left waiting for an admission nobody performs.
func TestSwitchingAdmissionHandsOverWaitingJobs(t *testing.T) {
	bulkdMode := func(o *Options) { o.KueueQueueName, o.MaxRunningShards, o.MaxRunningShardsPerAccount = "", 1, 1 }
	kueueMode := func(o *Options) { o.KueueQueueName = "bulkd-{plan}" }
	noAdmission := func(o *Options) { o.KueueQueueName, o.MaxRunningShards, o.MaxRunningShardsPerAccount = "", 0, 0 }
	waitingFor := func(t *testing.T, job batchv1.Job) string {
		t.Helper()
		_, kq := job.Labels[v1alpha1.KueueQueueLabel]
		gated := len(job.Spec.Template.Spec.SchedulingGates) == 1 && job.Spec.Template.Spec.SchedulingGates[0].Name == v1alpha1.AdmissionGate
		switch {
		case !ptr.Deref(job.Spec.Suspend, false) && !kq:
			return "started" // a template gate left is removed from each pod as it comes (releaseAdmission)
		case ptr.Deref(job.Spec.Suspend, false) && kq && len(job.Spec.Template.Spec.SchedulingGates) == 0:
			return "kueue:" + job.Labels[v1alpha1.KueueQueueLabel]
		case ptr.Deref(job.Spec.Suspend, false) && !kq && gated:
			return "bulkd"
		}
		return fmt.Sprintf("neither: suspend %v labels %v gates %v", job.Spec.Suspend, job.Labels, job.Spec.Template.Spec.SchedulingGates)
	}
	for _, c := range []struct {
		name          string
		from, to      func(*Options)
		before, after string
	}{
		{"bulkd to Kueue", bulkdMode, kueueMode, "bulkd", "kueue:bulkd-none"},
		{"Kueue to bulkd", kueueMode, bulkdMode, "kueue:bulkd-none", "bulkd"},
		{"Kueue to none", kueueMode, noAdmission, "kueue:bulkd-none", "started"},
		{"bulkd to none", bulkdMode, noAdmission, "bulkd", "started"},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := newFakeData(builders.MakeJobData(id).Obj())
			data.setData(id, func(j *jobs.Job) { j.AccountID = "acct_b" })
			bj := builders.MakeBulkJob(id, ns).Finalizer().Obj()
			bj.Labels = map[string]string{v1alpha1.LabelAccount: "acct_b"}
			s := newScenario(t, data, bj)
			s.withOptions(c.from)
			for range 2 {
				s.mustReconcile()
			}
			if got := waitingFor(t, s.jobs()[0]); got != c.before {
				t.Fatalf("before the switch the Job waits for %s, want %s", got, c.before)
			}
			s.withOptions(c.to) // the controller restarted in the other mode
			s.mustReconcile()
			if got := waitingFor(t, s.jobs()[0]); got != c.after {
				t.Fatalf("after the switch the Job waits for %s, want %s", got, c.after)
			}
			if st := s.bulkJob().Status; c.after != "started" && st.Phase != v1alpha1.PhaseQueued {
				t.Fatalf("status %+v", st)
			}
			if ev := s.events(); c.after != "started" && !strings.Contains(ev, "AdmissionSwitched") {
				t.Fatalf("events %q", ev)
			}
		})
	}
	// Handed to bulkd, the Job takes its turn: the admission pass starts it.
	t.Run("Kueue to bulkd, then admitted", func(t *testing.T) {
		data := newFakeData(builders.MakeJobData(id).Obj())
		data.setData(id, func(j *jobs.Job) { j.AccountID = "acct_b" })
		bj := builders.MakeBulkJob(id, ns).Finalizer().Obj()
		bj.Labels = map[string]string{v1alpha1.LabelAccount: "acct_b"}
		s := newScenario(t, data, bj)
		s.withOptions(kueueMode)
		s.mustReconcile()
		job := s.jobs()[0]
		job.UID = "uid-job"
		if err := s.c.Update(context.Background(), &job); err != nil {
			t.Fatal(err)
		}
		s.withOptions(bulkdMode)
		pass := admission.New(s.c, admissionConfig(s.r.Options), func() time.Time { return s.now })
		s.r.admission = pass
		// A pass before the hand-over leaves the Kueue-labelled Job alone.
		if _, err := pass.Reconcile(context.Background(), ctrl.Request{}); err != nil {
			t.Fatal(err)
		}
		if got := waitingFor(t, s.jobs()[0]); got != "kueue:bulkd-none" {
			t.Fatalf("the pass touched a Job still waiting for Kueue: %s", got)
		}
		s.mustReconcile()
		if _, err := pass.Reconcile(context.Background(), ctrl.Request{}); err != nil {
			t.Fatal(err)
		}
		job = s.jobs()[0]
		if ptr.Deref(job.Spec.Suspend, true) || len(job.Spec.Template.Spec.SchedulingGates) != 1 {
			t.Fatalf("not admitted by bulkd: suspend %v gates %v", job.Spec.Suspend, job.Spec.Template.Spec.SchedulingGates)
		}
	})
}

// A Job bulkd started (one shard done, the next pods gated from its
// template) is not stranded when the controller restarts without its own
// admission (Kueue mode, or no budget): its gated pods are released
// although some of its shards have ended (issue 27: TestKueueAdmission's
// Y1 waited so for ever after the switch to Kueue).
func TestSwitchingAdmissionReleasesAStartedJobsGatedPods(t *testing.T) {
	for name, to := range map[string]func(*Options){
		"to Kueue": func(o *Options) { o.KueueQueueName = "bulkd-{plan}" },
		"to none":  func(o *Options) { o.MaxRunningShards, o.MaxRunningShardsPerAccount = 0, 0 },
	} {
		t.Run(name, func(t *testing.T) {
			data := newFakeData(builders.MakeJobData(id).Obj())
			data.setData(id, func(j *jobs.Job) { j.AccountID = "acct_b" })
			bj := builders.MakeBulkJob(id, ns).Finalizer().Obj()
			bj.Labels = map[string]string{v1alpha1.LabelAccount: "acct_b"}
			s := newScenario(t, data, bj)
			s.withOptions(func(o *Options) { o.KueueQueueName, o.MaxRunningShards, o.MaxRunningShardsPerAccount = "", 1, 1 })
			for range 2 {
				s.mustReconcile()
			}
			// bulkd admitted shard 0, which ended; the Job controller made
			// shard 1's pod from the gated template.
			job := s.jobs()[0]
			job.Spec.Suspend = ptr.To(false)
			if err := s.c.Update(context.Background(), &job); err != nil {
				t.Fatal(err)
			}
			now := metav1.Now()
			s.reportJob(job.Name, &batchv1.Job{Status: batchv1.JobStatus{StartTime: &now, CompletedIndexes: "0", Succeeded: 1, Active: 1}})
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: job.Name + "-1", Namespace: ns, Labels: map[string]string{v1alpha1.LabelJobID: id},
					Annotations: map[string]string{batchv1.JobCompletionIndexAnnotation: "1"}},
				Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: v1alpha1.AdmissionGate}}},
			}
			if err := s.c.Create(context.Background(), pod); err != nil {
				t.Fatal(err)
			}
			s.withOptions(to)
			s.mustReconcile()
			if err := s.c.Get(context.Background(), client.ObjectKeyFromObject(pod), pod); err != nil {
				t.Fatal(err)
			}
			if admission.HasGate(pod) {
				t.Fatalf("shard 1's pod still waits for an admission that no longer runs: gates %v", pod.Spec.SchedulingGates)
			}
		})
	}
}
