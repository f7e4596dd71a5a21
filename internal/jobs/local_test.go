package jobs

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/credits"
)

func (e *env) local(owner string, fam Answerer, workers int) *Local {
	l := NewLocal(e.processor(owner, fam), workers, discard)
	l.Backoff = 20 * time.Millisecond
	return l
}

// start runs l until the test ends (or the returned stop is called).
func start(t *testing.T, l *Local) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	l.Start(ctx)
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			l.Wait()
		}
	}
	t.Cleanup(stop)
	return stop
}

// A shard whose answerer fails is retried with doubling backoff and
// succeeds once the answerer is back.
func TestLocalRetriesWithBackoff(t *testing.T) {
	e := newEnv(t)
	j, b, known := directoryJob(t, e, 12, 8) // one shard, two batches
	fl := &flakyAnswerer{mapAnswerer: newMapAnswerer(known), failures: 2}
	l := e.local("w1", fl, 1)
	l.Backoff = 50 * time.Millisecond
	l.Attempts = 3
	start(t, l)
	if err := l.Enqueue(e.ctx, j); err != nil {
		t.Fatal(err)
	}
	g := e.waitJob(j.ID, 5*time.Second)
	expectCounts(t, g, b, outcomeOf(b, known)) // no error rows: the third try answered
	at := fl.attemptTimes()
	if len(at) != 4 { // fail, fail, batch 1, batch 2
		t.Fatalf("%d Answer calls, want 4", len(at))
	}
	if d := at[1].Sub(at[0]); d < 50*time.Millisecond {
		t.Errorf("first retry after %v, want >= 50ms", d)
	}
	if d := at[2].Sub(at[1]); d < 100*time.Millisecond {
		t.Errorf("second retry after %v, want >= 100ms (doubled)", d)
	}
	checkAnsweredOnce(t, b, fl.mapAnswerer)
}

// A shard that keeps failing is tried Attempts times, then its unanswered
// rows become error rows and the job completes; other shards are unaffected,
// and what the failing shard answered before it failed is kept.
func TestLocalFailsShardAfterAttempts(t *testing.T) {
	e := newEnv(t)
	// 25 distinct inputs: shard 0 (0-9), shard 1 (10-19), shard 2 (20-24).
	// In shard 1 the batch 14-17 holds a poison input the directory
	// always chokes on.
	b := NewBuilder(testFamily, 0)
	for i := 0; i < 25; i++ {
		s := "co-" + string(rune('a'+i))
		if i == 15 {
			s = "poison-" + s
		}
		addSlug(b, s)
		if i%4 == 0 {
			addSlug(b, strings.ToUpper(s)) // a repeat
		}
	}
	j := e.submit(b)
	known := map[string]string{"co-a": "A", "co-k": "K", "co-m": "M", "co-u": "U"}
	fa := &failingAnswerer{mapAnswerer: newMapAnswerer(known), poison: "poison-"}
	l := e.local("w1", fa, 2)
	l.Attempts = 3
	start(t, l)
	if err := l.Enqueue(e.ctx, j); err != nil {
		t.Fatal(err)
	}
	g := e.waitJob(j.ID, 5*time.Second)
	outcome := func(i int) string {
		if i >= 14 && i < 20 { // from the poisoned batch to the end of shard 1
			return OutcomeError
		}
		return outcomeOf(b, known)(i)
	}
	expectCounts(t, g, b, outcome)
	if fa.failures() != 3 {
		t.Errorf("poisoned batch tried %d times, want 3", fa.failures())
	}
	e.waitShardsDone(j)
	// Shard 1's first batch (10-13) was answered for real and kept.
	for i, a := range e.answers(j.ID) {
		if a.Outcome != outcome(i) {
			t.Errorf("input %d: %s, want %s", i, a.Outcome, outcome(i))
		}
	}
}

// An answerer that never works: every row ends as an error row after
// Attempts tries per shard, and the job still completes.
func TestLocalAlwaysFailing(t *testing.T) {
	e := newEnv(t)
	j, b, _ := directoryJob(t, e, 30, 15) // 2 shards
	fa := &failingAnswerer{mapAnswerer: newMapAnswerer(nil)}
	l := e.local("w1", fa, 2)
	l.Attempts = 4
	start(t, l)
	if err := l.Enqueue(e.ctx, j); err != nil {
		t.Fatal(err)
	}
	g := e.waitJob(j.ID, 5*time.Second)
	expectCounts(t, g, b, func(int) string { return OutcomeError })
	if fa.failures() != 8 {
		t.Errorf("%d failed tries, want 4 per shard", fa.failures())
	}
	if e.active(j.ID) {
		t.Error("failed job still active")
	}
}

// A restart: one Local is stopped in the middle of a job, a new one (a new
// process: another processor owner, a fresh answerer) on the same Redis
// resumes the unfinished shards and the job completes with exact counts;
// nothing answered before the restart is answered again.
func TestLocalResumeAfterRestart(t *testing.T) {
	e := newEnv(t)
	j, b, known := directoryJob(t, e, 300, 120) // 12 shards of 10, batches of 4
	before := newMapAnswerer(known)
	before.delay = 15 * time.Millisecond
	l1 := e.local("process-1", before, 2)
	stop1 := start(t, l1)
	if err := l1.Enqueue(e.ctx, j); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.get(j.ID).DistinctProcessed < 30 {
		if time.Now().After(deadline) {
			t.Fatal("first process made no progress")
		}
		time.Sleep(2 * time.Millisecond)
	}
	stop1()
	mid := e.get(j.ID)
	if mid.Status != StatusRunning || mid.DistinctProcessed >= mid.Distinct || !e.active(j.ID) {
		t.Fatalf("job not mid-way at the restart: %+v", mid)
	}
	answeredBefore := e.answers(j.ID)
	if int64(len(answeredBefore)) != mid.DistinctProcessed {
		t.Fatalf("%d answers stored, distinct_processed %d", len(answeredBefore), mid.DistinctProcessed)
	}
	// A graceful stop gives its leases back.
	for s := 0; s < j.Shards; s++ {
		if e.rdb.Exists(e.ctx, leaseKey(j.ID, s)).Val() != 0 {
			t.Errorf("shard %d lease held after a graceful stop", s)
		}
	}

	after := newMapAnswerer(known)
	l2 := e.local("process-2", after, 2)
	start(t, l2) // resumes on start: no Enqueue
	g := e.waitJob(j.ID, 10*time.Second)
	expectCounts(t, g, b, outcomeOf(b, known))
	e.waitShardsDone(j)
	for i := range answeredBefore {
		if n := after.callsOf(b.inputs[i].Payload); n != 0 {
			t.Errorf("input %d answered before the restart was answered again (%d times)", i, n)
		}
	}
	if got := int64(len(after.answered())); got != g.Distinct-mid.DistinctProcessed {
		t.Errorf("second process answered %d inputs, %d were left", got, g.Distinct-mid.DistinctProcessed)
	}
}

// A crash: the dead process's lease on a shard is not released. The new
// process skips the shard while the lease lives and picks it up on a later
// resume pass once it has expired.
func TestLocalResumeAfterCrashedLease(t *testing.T) {
	e := newEnv(t)
	j, b, known := directoryJob(t, e, 60, 30) // 3 shards
	// The crashed process had answered part of shard 1 and still holds its
	// lease for a while.
	var part []Recorded
	for i := 10; i < 14; i++ {
		part = append(part, rec(i, b.inputs[i].Rows, outcomeOf(b, known)(i), `{}`))
	}
	if _, err := e.st.Record(e.ctx, j, time.Now(), part); err != nil {
		t.Fatal(err)
	}
	if ok, _ := e.st.AcquireLease(e.ctx, j.ID, 1, "crashed", 400*time.Millisecond); !ok {
		t.Fatal("acquire")
	}
	ans := newMapAnswerer(known)
	l := e.local("process-2", ans, 2)
	l.ResumeEvery = 100 * time.Millisecond
	t0 := time.Now()
	start(t, l)
	g := e.waitJob(j.ID, 5*time.Second)
	if d := time.Since(t0); d < 350*time.Millisecond {
		t.Errorf("job completed after %v, before the dead lease expired", d)
	}
	expectCounts(t, g, b, outcomeOf(b, known))
	for i := 10; i < 14; i++ {
		if ans.callsOf(b.inputs[i].Payload) != 0 {
			t.Errorf("input %d answered again", i)
		}
	}
}

// Cancel drops a job's queued shards: they never run, not even through the
// resume pass at start, while other jobs run normally.
func TestLocalCancel(t *testing.T) {
	e := newEnv(t)
	dropped, _, known := directoryJob(t, e, 40, 30)
	kept, kb, _ := directoryJob(t, e, 20, 15)
	ans := newMapAnswerer(known)
	l := e.local("w1", ans, 2)
	if err := l.Enqueue(e.ctx, dropped); err != nil {
		t.Fatal(err)
	}
	if err := l.Cancel(e.ctx, dropped.ID); err != nil {
		t.Fatal(err)
	}
	if q := l.queuedTasks(); len(q) != 0 {
		t.Errorf("queued after cancel: %v", q)
	}
	if err := l.Enqueue(e.ctx, kept); err != nil {
		t.Fatal(err)
	}
	start(t, l) // its first resume pass sees the canceled job in the active set
	g := e.waitJob(kept.ID, 5*time.Second)
	expectCounts(t, g, kb, outcomeOf(kb, known))
	time.Sleep(50 * time.Millisecond)
	if d := e.get(dropped.ID); d.DistinctProcessed != 0 || d.ShardsDone != 0 {
		t.Errorf("canceled job was processed: %+v", d)
	}
}

func TestLocalEnqueueAfterStop(t *testing.T) {
	e := newEnv(t)
	j, _, _ := directoryJob(t, e, 5, 5)
	l := e.local("w1", newMapAnswerer(nil), 1)
	stop := start(t, l)
	stop()
	if err := l.Enqueue(e.ctx, j); err == nil {
		t.Error("a stopped executor accepted a job")
	}
}

// waitShardsDone waits for every shard to be marked done: the job completes
// with its last answer, a moment before its shard is marked.
func (e *env) waitShardsDone(j *Job) {
	e.t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		left, err := e.st.UnfinishedShards(e.ctx, j)
		if err != nil {
			e.t.Fatal(err)
		}
		g := e.get(j.ID)
		if len(left) == 0 && g.ShardsDone == int64(j.Shards) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("shards %v not marked done (shards_done %d of %d)", left, g.ShardsDone, j.Shards)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Every rolled-back submission cancels its job on the executor, a refused
// one (insufficient credits) included. The executor must not keep that
// forever: once the job is gone from the active set, a resume pass forgets
// it. (A long-running server sees a steady stream of refusals.)
func TestLocalForgetsCanceledJobs(t *testing.T) {
	e := newEnv(t)
	l := e.local("w1", newMapAnswerer(nil), 1)
	e.eng.Executor = l
	poor := *e.p
	poor.Account.ID = "acct_nobody" // no such account: the charge is refused
	for i := 0; i < 20; i++ {
		if _, err := e.eng.Submit(e.ctx, &poor, slugs("a", "b"), Metering{Price: credits.Whole(1)}); err == nil {
			t.Fatal("submission for a missing account accepted")
		}
	}
	live, _, _ := directoryJob(t, e, 5, 5)
	if err := l.Cancel(e.ctx, live.ID); err != nil { // canceled, not yet deleted
		t.Fatal(err)
	}
	if err := l.Resume(e.ctx); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.canceled) != 1 || !l.canceled[live.ID] {
		t.Errorf("executor remembers %d canceled jobs, want only the one still active", len(l.canceled))
	}
	if q := l.scheduler().QueuedTasks(); len(q) != 0 {
		t.Errorf("resume queued %v", q)
	}
}
