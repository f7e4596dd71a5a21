package jobs

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/credits"
)

// Fair scheduling across accounts in the Local executor (issue 19): these
// tests run real shards on a real Redis, several accounts at once. Each
// one fails on the FIFO queue Local had before.

// fairAnswerer answers inputs named "<account>.<anything>" after delay per
// Answer call (honouring ctx, so a preempted batch ends at once). It
// records the order in which inputs were answered, how many times each,
// and the most Answer calls of one account in flight at once. An input
// whose name starts with "<account>.grey" is answered provisionally
// (RetryAt greyDelay later) on its first attempt, like a greylisted
// address.
type fairAnswerer struct {
	delay     time.Duration
	greyDelay time.Duration

	mu       sync.Mutex
	order    []string
	calls    map[string]int
	inflight map[string]int
	peak     map[string]int
}

func newFairAnswerer(delay time.Duration) *fairAnswerer {
	return &fairAnswerer{delay: delay, calls: map[string]int{}, inflight: map[string]int{}, peak: map[string]int{}}
}

func acctOf(payload string) string { a, _, _ := strings.Cut(payload, "."); return a }

func (f *fairAnswerer) Answer(ctx context.Context, payloads []string) ([]Answer, error) {
	return f.Retry(ctx, payloads, nil)
}

func (f *fairAnswerer) Retry(ctx context.Context, payloads []string, attempts []int) ([]Answer, error) {
	acct := acctOf(payloads[0])
	f.mu.Lock()
	f.inflight[acct]++
	f.peak[acct] = max(f.peak[acct], f.inflight[acct])
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inflight[acct]--
		f.mu.Unlock()
	}()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(f.delay):
	}
	out := make([]Answer, len(payloads))
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, p := range payloads {
		out[i] = Answer{Outcome: OutcomeFound, Data: []byte(`{}`)}
		if _, rest, _ := strings.Cut(p, "."); strings.HasPrefix(rest, "grey") && attempts == nil {
			out[i] = Answer{Outcome: "unknown", Data: []byte(`{"reason":"greylisted"}`), RetryAt: time.Now().Add(f.greyDelay)}
		}
		f.order = append(f.order, p)
		f.calls[p]++
	}
	return out, nil
}

func (f *fairAnswerer) ErrorAnswer() Answer { return Answer{Outcome: OutcomeError, Data: errorData} }

func (f *fairAnswerer) answeredOrder() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.order...)
}

func (f *fairAnswerer) peakOf(acct string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.peak[acct]
}

// checkOnce checks that every input of jobs was answered exactly once
// (a preempted batch is answered again, but its cut-short call answered
// nothing).
func (f *fairAnswerer) checkOnce(t *testing.T, bs ...*Builder) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, b := range bs {
		for _, in := range b.inputs {
			if n := f.calls[in.Payload]; n != 1 {
				t.Errorf("input %q answered %d times, want 1", in.Payload, n)
			}
		}
	}
}

// principal creates another funded account with a key.
func (e *env) principal(name string) *accounts.Principal {
	e.t.Helper()
	as := accounts.NewStore(e.rdb, nil)
	a, err := as.CreateAccount(e.ctx, name, credits.Whole(100_000))
	if err != nil {
		e.t.Fatal(err)
	}
	key, _, err := as.CreateKey(e.ctx, a.ID, accounts.PayAsYouGo)
	if err != nil {
		e.t.Fatal(err)
	}
	p, err := as.Authenticate(e.ctx, key)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// bulk builds a job of n distinct inputs "<acct>.<tag>.<i>".
func bulk(acct, tag string, n int) *Builder {
	b := NewBuilder(testFamily, n)
	for i := 0; i < n; i++ {
		addSlug(b, fmt.Sprintf("%s.%s.%d", acct, tag, i))
	}
	return b
}

func (e *env) submitAs(p *accounts.Principal, b *Builder) *Job {
	e.t.Helper()
	j, err := e.eng.Submit(e.ctx, p, b, Metering{Price: credits.Amount(1)})
	if err != nil {
		e.t.Fatalf("submit: %v", err)
	}
	return j
}

func (l *Local) queuedTasks() []task {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []task
	for _, t := range l.scheduler().QueuedTasks() {
		out = append(out, t.Key)
	}
	return out
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// The scenario in small: account A has three large jobs queued and
// running on every worker; account B, otherwise idle, submits 3 inputs.
// B's job completes within about one batch of its submission, long before
// A's queue drains: with preemption (the default) the youngest of A's
// shards gives B its worker at once; without, B takes the first worker
// that frees, within one shard time. A's jobs still complete with every
// input answered exactly once.
func TestFairIdleAccountsSmallJobStartsAtOnce(t *testing.T) {
	for _, preempt := range []bool{true, false} {
		t.Run(fmt.Sprintf("preempt=%v", preempt), func(t *testing.T) {
			e := newEnv(t)
			pa, pb := e.principal("A"), e.principal("B")
			fa := newFairAnswerer(30 * time.Millisecond) // shards of 10 inputs, batches of 4: 90 ms a shard
			l := e.local("w1", fa, 2)
			l.Preempt = preempt
			start(t, l)
			var aJobs []*Job
			var aBuilders []*Builder
			for k := 0; k < 3; k++ {
				b := bulk("a", fmt.Sprint("big", k), 200) // 20 shards each: 60 shards, ~2.7 s on 2 workers
				j := e.submitAs(pa, b)
				if err := l.Enqueue(e.ctx, j); err != nil {
					t.Fatal(err)
				}
				aJobs, aBuilders = append(aJobs, j), append(aBuilders, b)
			}
			waitFor(t, 2*time.Second, "A under way", func() bool { return e.get(aJobs[0].ID).DistinctProcessed >= 4 })

			bb := bulk("b", "small", 3)
			t0 := time.Now()
			jb := e.submitAs(pb, bb)
			if err := l.Enqueue(e.ctx, jb); err != nil {
				t.Fatal(err)
			}
			e.waitJob(jb.ID, 5*time.Second)
			took := time.Since(t0)
			t.Logf("B's job completed %v after its submission", took)
			limit := 250 * time.Millisecond // one batch of B (30 ms) and the submission, with room
			if !preempt {
				limit = 400 * time.Millisecond // plus one of A's shards (90 ms)
			}
			if took > limit {
				t.Errorf("B's 3-input job took %v with A's queue ahead, want <= %v", took, limit)
			}
			if last := e.get(aJobs[2].ID); last.DistinctProcessed > 100 {
				t.Errorf("A's last job %d/%d done when B completed: the test did not overlap", last.DistinctProcessed, last.Distinct)
			}
			for k, j := range aJobs {
				expectCounts(t, e.waitJob(j.ID, 10*time.Second), aBuilders[k], func(int) string { return OutcomeFound })
			}
			fa.checkOnce(t, append(aBuilders, bb)...)
		})
	}
}

// Weights 2:1 give rows 2:1 while both accounts are backlogged, although
// the lighter account's job was submitted first.
func TestFairWeightsGiveRowsInProportion(t *testing.T) {
	e := newEnv(t)
	pa, pb := e.principal("A"), e.principal("B")
	fa := newFairAnswerer(0)
	l := e.local("w1", fa, 1)
	l.Quantum = 10 // the test engine's shard size, as serve sets --shard-size
	l.Weight = func(_ context.Context, acct string) int {
		if acct == pa.Account.ID {
			return 2
		}
		return 1
	}
	jb := e.submitAs(pb, bulk("b", "x", 400))
	ja := e.submitAs(pa, bulk("a", "x", 400))
	for _, j := range []*Job{jb, ja} { // queued before the worker starts
		if err := l.Enqueue(e.ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	start(t, l)
	e.waitJob(ja.ID, 10*time.Second)
	order := fa.answeredOrder()
	n := map[string]int{}
	for _, p := range order[:300] { // both still backlogged: a's 400 end near input 600
		n[acctOf(p)]++
	}
	// 2:1 is 200:100; allow one shard (10 inputs) either way.
	if n["a"] < 190 || n["a"] > 210 {
		t.Errorf("first 300 inputs answered: %v, want a:b = 2:1 (a 200 +- 10)", n)
	}
}

// Within an account jobs run in submission order, also after a restart
// (Resume finds the active jobs in no particular order) and for due
// retries: a due retry of an older job runs before the newer job's
// queued shards.
func TestFairFIFOWithinAccount(t *testing.T) {
	e := newEnv(t)
	pa := e.principal("A")
	var jobs []*Job
	for k := 0; k < 6; k++ {
		jobs = append(jobs, e.submitAs(pa, bulk("a", fmt.Sprint("j", k), 20)))
		time.Sleep(2 * time.Millisecond) // submission times are kept to the millisecond
	}
	// Nothing was enqueued (the engine's executor records only): a new
	// process resumes them.
	fa := newFairAnswerer(0)
	l := e.local("w1", fa, 1)
	start(t, l)
	for _, j := range jobs {
		e.waitJob(j.ID, 5*time.Second)
	}
	var got []string
	for _, p := range fa.answeredOrder() {
		tag := strings.Split(p, ".")[1]
		if len(got) == 0 || got[len(got)-1] != tag {
			got = append(got, tag)
		}
	}
	if strings.Join(got, " ") != "j0 j1 j2 j3 j4 j5" {
		t.Errorf("resumed jobs ran in the order %v, want submission order", got)
	}

	// A due retry of an older job goes before a newer job's shards.
	e2 := newEnv(t)
	pa = e2.principal("A")
	fa = newFairAnswerer(20 * time.Millisecond)
	fa.greyDelay = 50 * time.Millisecond
	l = e2.local("w1", fa, 1)
	l.RetryEvery = 10 * time.Millisecond
	start(t, l)
	older := e2.submitAs(pa, bulk("a", "grey", 1))
	if err := l.Enqueue(e2.ctx, older); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "first pass", func() bool { return e2.get(older.ID).Status == StatusRetrying })
	newer := e2.submitAs(pa, bulk("a", "new", 200)) // 20 shards of 3 batches: 1.2 s
	if err := l.Enqueue(e2.ctx, newer); err != nil {
		t.Fatal(err)
	}
	e2.waitJob(older.ID, 5*time.Second)
	if g := e2.get(newer.ID); g.DistinctProcessed > 60 {
		t.Errorf("the older job's retry waited for the newer job: %d/%d of it done", g.DistinctProcessed, g.Distinct)
	}
}

// An account never runs more than AccountWorkers shards at once, even with
// workers idle; another account uses the rest.
func TestFairPerAccountBudget(t *testing.T) {
	e := newEnv(t)
	pa, pb := e.principal("A"), e.principal("B")
	fa := newFairAnswerer(10 * time.Millisecond)
	l := e.local("w1", fa, 4)
	l.AccountWorkers = 2
	start(t, l)
	ja := e.submitAs(pa, bulk("a", "x", 200))
	if err := l.Enqueue(e.ctx, ja); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "A under way", func() bool { return e.get(ja.ID).DistinctProcessed >= 40 })
	jb := e.submitAs(pb, bulk("b", "x", 200))
	if err := l.Enqueue(e.ctx, jb); err != nil {
		t.Fatal(err)
	}
	e.waitJob(ja.ID, 10*time.Second)
	e.waitJob(jb.ID, 10*time.Second)
	if p := fa.peakOf("a"); p != 2 {
		t.Errorf("A ran %d shards at once, budget 2", p)
	}
	if p := fa.peakOf("b"); p != 2 {
		t.Errorf("B ran %d shards at once, want its budget 2 (the two workers A may not use)", p)
	}
}

// Due retries take part in the same fairness: the due retry of an account
// that is otherwise idle is run ahead of the deep queue of another account,
// as a small job would be, instead of behind it.
func TestFairRetriesTakeTurns(t *testing.T) {
	e := newEnv(t)
	pa, pb := e.principal("A"), e.principal("B")
	fa := newFairAnswerer(30 * time.Millisecond)
	fa.greyDelay = 300 * time.Millisecond
	l := e.local("w1", fa, 2)
	l.RetryEvery = 10 * time.Millisecond
	start(t, l)
	jb := e.submitAs(pb, bulk("b", "grey", 2))
	if err := l.Enqueue(e.ctx, jb); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "B's first pass", func() bool { return e.get(jb.ID).Status == StatusRetrying })
	ja := e.submitAs(pa, bulk("a", "big", 400)) // 40 shards: 1.8 s on 2 workers
	if err := l.Enqueue(e.ctx, ja); err != nil {
		t.Fatal(err)
	}
	due := e.get(jb.ID).NextRetryAt
	e.waitJob(jb.ID, 5*time.Second)
	late := time.Since(due)
	t.Logf("B's retry completed %v after it came due", late)
	if late > 300*time.Millisecond {
		t.Errorf("B's retry completed %v after it came due, A's queue ahead of it", late)
	}
	if g := e.get(ja.ID); g.DistinctProcessed >= g.Distinct {
		t.Error("A's job was already done: the test did not overlap")
	}
	e.waitJob(ja.ID, 10*time.Second)
}
