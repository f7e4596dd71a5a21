package jobs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
)

func (e *env) ledger() []billing.Entry {
	e.t.Helper()
	es, err := e.bl.Entries(e.ctx, e.p.Account.ID, "", 1000)
	if err != nil {
		e.t.Fatal(err)
	}
	return es
}

func (e *env) checkNothingLeft(id string) {
	e.t.Helper()
	if bal, _ := e.bl.Balance(e.ctx, e.p.Account.ID); bal != e.balance {
		e.t.Errorf("balance %v, want %v", bal, e.balance)
	}
	if left := e.jobKeysLeft(id); len(left) != 0 {
		e.t.Errorf("job keys left: %v", left)
	}
	if e.active(id) {
		e.t.Error("job left in the active set")
	}
	if n := e.rdb.ZCard(e.ctx, pendingKey).Val(); n != 0 {
		e.t.Errorf("%d submission marks left", n)
	}
}

// A failure at any submission step leaves no job, no charge and no mark;
// a charge already taken shows in the ledger followed by its refund.
func TestSubmitRollbackAtEachStep(t *testing.T) {
	for _, step := range []string{StepMark, StepCharge, StepStore, StepEnqueue, StepCommit} {
		t.Run(step, func(t *testing.T) {
			e := newEnv(t)
			boom := errors.New("injected")
			var seen []string
			e.eng.SetFailpoint(func(s string) error {
				seen = append(seen, s)
				if s == step {
					return boom
				}
				return nil
			})
			var id string
			e.exec.mu.Lock()
			e.exec.enqueued = nil
			e.exec.mu.Unlock()
			j, err := e.eng.Submit(e.ctx, e.p, slugs("a", "b", "a", "!x"), Metering{Price: credits.Whole(1)})
			if !errors.Is(err, boom) || j != nil {
				t.Fatalf("submit: %v, %v", j, err)
			}
			if seen[len(seen)-1] != step {
				t.Fatalf("steps seen %v", seen)
			}
			if len(e.exec.enqueued) > 0 {
				id = e.exec.enqueued[0]
				if len(e.exec.canceled) != 1 || e.exec.canceled[0] != id {
					t.Errorf("enqueued job %s not canceled: %v", id, e.exec.canceled)
				}
			}
			ledger := e.ledger()
			charged := step != StepMark && step != StepCharge
			if !charged {
				if len(ledger) != 0 {
					t.Errorf("ledger %+v, want nothing", ledger)
				}
			} else {
				if len(ledger) != 2 || ledger[0].Kind != billing.KindCharge || ledger[1].Kind != billing.KindRefund ||
					ledger[0].JobID != ledger[1].JobID || ledger[0].Amount != "-2" || ledger[1].Amount != "2" {
					t.Errorf("ledger %+v, want a charge of 2 then its refund", ledger)
				}
				id = ledger[0].JobID
			}
			if id != "" {
				e.checkNothingLeft(id)
			} else if keys := e.keys(prefix + "job:*"); len(keys) != 0 {
				t.Errorf("job keys left: %v", keys)
			}
			if n := e.rdb.ZCard(e.ctx, pendingKey).Val(); n != 0 {
				t.Errorf("%d submission marks left", n)
			}
		})
	}
}

// dieAtCommit submits rows and "dies" at the commit: the failpoint panics
// out of Submit, so no rollback runs, like a killed process. It returns the
// abandoned job's id.
func (e *env) dieAtCommit(rows *Builder) string {
	e.eng.SetFailpoint(func(s string) error {
		if s == StepCommit {
			panic("process killed")
		}
		return nil
	})
	func() {
		defer func() { _ = recover() }()
		_, _ = e.eng.Submit(e.ctx, e.p, rows, Metering{Price: credits.Whole(1)})
	}()
	e.eng.SetFailpoint(nil)
	return e.exec.enqueued[len(e.exec.enqueued)-1]
}

// A submission that died between charge and commit is rolled back by the
// janitor; a committed one is never touched.
func TestReclaimAbandoned(t *testing.T) {
	e := newEnv(t)
	committed := e.submit(slugs("a", "b"))

	dead := e.dieAtCommit(slugs("c", "d", "e"))
	if e.get(dead).Charge != 3000 {
		t.Fatal("abandoned job not stored")
	}
	// Too young for the janitor.
	if n, err := e.eng.ReclaimAbandoned(e.ctx, time.Hour); err != nil || n != 0 {
		t.Fatalf("reclaim young: %d, %v", n, err)
	}
	n, err := e.eng.ReclaimAbandoned(e.ctx, 0)
	if err != nil || n != 1 {
		t.Fatalf("reclaim: %d, %v", n, err)
	}
	if left := e.jobKeysLeft(dead); len(left) != 0 || e.active(dead) {
		t.Errorf("abandoned job left %v", left)
	}
	if bal, _ := e.bl.Balance(e.ctx, e.p.Account.ID); bal != e.balance-committed.Charge {
		t.Errorf("balance %v, want only the committed job's charge taken", bal)
	}
	if n, _ := e.eng.ReclaimAbandoned(e.ctx, 0); n != 0 {
		t.Errorf("second pass reclaimed %d", n)
	}
	if _, err := e.st.Get(e.ctx, committed.ID); err != nil {
		t.Errorf("committed job: %v", err)
	}
	var kinds []string
	for _, en := range e.ledger() {
		kinds = append(kinds, fmt.Sprintf("%s %s %s", en.Kind, en.JobID, en.Amount))
	}
	want := []string{"charge " + committed.ID + " -2", "charge " + dead + " -3", "refund " + dead + " 3"}
	if fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Errorf("ledger %v, want %v", kinds, want)
	}
}

// A janitor that dies after claiming an abandoned submission but before
// rolling it back leaves the claim in the reclaiming set; the next pass
// finishes the rollback, so the refund is never lost.
func TestReclaimSurvivesJanitorDeath(t *testing.T) {
	e := newEnv(t)
	dead := e.dieAtCommit(slugs("x", "y"))

	// The first janitor claims the mark and dies before doing anything else.
	if n, err := e.st.claimStale(e.ctx, time.Now(), time.Now()); err != nil || n != 1 {
		t.Fatalf("claim: %d %v", n, err)
	}
	if bal, _ := e.bl.Balance(e.ctx, e.p.Account.ID); bal != e.balance-credits.Whole(2) {
		t.Fatalf("balance %v before the rollback", bal)
	}
	// The next janitor pass, whatever its age threshold, finishes the job.
	n, err := e.eng.ReclaimAbandoned(e.ctx, time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("reclaim: %d %v", n, err)
	}
	if bal, _ := e.bl.Balance(e.ctx, e.p.Account.ID); bal != e.balance {
		t.Fatalf("balance %v after the rollback, want %v", bal, e.balance)
	}
	if left := e.jobKeysLeft(dead); len(left) != 0 {
		t.Fatalf("job keys left: %v", left)
	}
	if n, _ := e.rdb.ZCard(e.ctx, reclaimingKey).Result(); n != 0 {
		t.Fatalf("%d claims left", n)
	}
	if n, _ := e.eng.ReclaimAbandoned(e.ctx, 0); n != 0 {
		t.Fatalf("second pass reclaimed %d", n)
	}
}

// With MaxShards, a large job gets larger shards instead of more of them;
// small jobs keep the configured shard size.
func TestMaxShardsGrowsShardSize(t *testing.T) {
	e := newEnv(t)
	e.eng.ShardSize, e.eng.MaxShards = 10, 4
	small := slugs("a", "b", "c")
	for i := 0; i < 37; i++ {
		addSlug(small, fmt.Sprintf("s%d", i))
	}
	j := e.submit(small) // 40 distinct: 4 shards of 10, exactly the cap
	if j.ShardSize != 10 || j.Shards != 4 {
		t.Fatalf("40 inputs: shard size %d, %d shards", j.ShardSize, j.Shards)
	}
	big := slugs()
	for i := 0; i < 101; i++ {
		addSlug(big, fmt.Sprintf("b%d", i))
	}
	j = e.submit(big) // 101 distinct, cap 4: shards of 26 (4 shards)
	if j.ShardSize != 26 || j.Shards != 4 {
		t.Fatalf("101 inputs: shard size %d, %d shards", j.ShardSize, j.Shards)
	}
	if got := e.get(j.ID); got.ShardSize != 26 || got.Shards != 4 {
		t.Fatalf("stored: %+v", got)
	}
}

// countingExecutor is a real Local executor that counts the calls the
// engine makes to it.
type countingExecutor struct {
	*Local
	mu       sync.Mutex
	enqueues int
	cancels  []string
}

func (c *countingExecutor) Enqueue(ctx context.Context, j *Job) error {
	c.mu.Lock()
	c.enqueues++
	c.mu.Unlock()
	return c.Local.Enqueue(ctx, j)
}

func (c *countingExecutor) Cancel(ctx context.Context, jobID string) error {
	c.mu.Lock()
	c.cancels = append(c.cancels, jobID)
	c.mu.Unlock()
	return c.Local.Cancel(ctx, jobID)
}

// A submission the account cannot pay for (403 insufficient credits, 429
// quota), or one that fails before the executor was given the job, must not
// call the executor at all: in Kubernetes mode every Cancel is a DELETE to
// the API server. Before the fix every refused charge sent one (and Local
// remembered every refused job id in its canceled set).
func TestRejectedSubmissionNeverCallsExecutor(t *testing.T) {
	e := newEnv(t)
	ce := &countingExecutor{Local: e.local("w1", newMapAnswerer(nil), 1)}
	e.eng.Executor = ce
	calls := func() (int, int) {
		ce.mu.Lock()
		defer ce.mu.Unlock()
		return ce.enqueues, len(ce.cancels)
	}

	// 403: more than the balance.
	_, err := e.eng.Submit(e.ctx, e.p, slugs("a", "b"), Metering{Price: e.balance})
	var ie *billing.InsufficientError
	if !errors.As(err, &ie) {
		t.Fatalf("submit over the balance: %v, want InsufficientError", err)
	}
	// 429: over the quota.
	q := &Quota{Window: billing.DailyWindow(billing.BulkSearches, time.Now()), Limit: 1}
	_, err = e.eng.Submit(e.ctx, e.p, slugs("a", "b"), Metering{Quota: q})
	var qe *billing.QuotaError
	if !errors.As(err, &qe) {
		t.Fatalf("submit over the quota: %v, want QuotaError", err)
	}
	if enq, can := calls(); enq != 0 || can != 0 {
		t.Fatalf("refused submissions called the executor: %d enqueues, %d cancels; want none", enq, can)
	}
	if n := e.rdb.ZCard(e.ctx, pendingKey).Val(); n != 0 {
		t.Errorf("%d submission marks left", n)
	}
	if bal, _ := e.bl.Balance(e.ctx, e.p.Account.ID); bal != e.balance {
		t.Errorf("balance %v, want %v", bal, e.balance)
	}

	// Failures before Enqueue: no call; failures at or after it: exactly one
	// Cancel of the job that was enqueued.
	for _, tc := range []struct {
		step              string
		enqueues, cancels int
	}{{StepCharge, 0, 0}, {StepStore, 0, 0}, {StepEnqueue, 0, 0}, {StepCommit, 1, 1}} {
		ce.mu.Lock()
		ce.enqueues, ce.cancels = 0, nil
		ce.mu.Unlock()
		e.eng.SetFailpoint(func(s string) error {
			if s == tc.step {
				return errors.New("injected")
			}
			return nil
		})
		if _, err := e.eng.Submit(e.ctx, e.p, slugs("a", "b"), Metering{Price: credits.Whole(1)}); err == nil {
			t.Fatalf("%s: submit succeeded", tc.step)
		}
		if enq, can := calls(); enq != tc.enqueues || can != tc.cancels {
			t.Errorf("failure at %s: %d enqueues, %d cancels; want %d, %d", tc.step, enq, can, tc.enqueues, tc.cancels)
		}
	}
	e.eng.SetFailpoint(nil)

	// An executor that refuses the job may still have made it (a create
	// whose reply was lost): it is canceled.
	ce.mu.Lock()
	ce.enqueues, ce.cancels = 0, nil
	ce.mu.Unlock()
	e.eng.Executor = refusingExecutor{ce}
	if _, err := e.eng.Submit(e.ctx, e.p, slugs("a"), Metering{Price: credits.Whole(1)}); err == nil {
		t.Fatal("submit to a refusing executor succeeded")
	}
	if _, can := calls(); can != 1 {
		t.Errorf("refused Enqueue: %d cancels, want 1", can)
	}
}

// refusingExecutor fails every Enqueue after passing it on.
type refusingExecutor struct{ *countingExecutor }

func (r refusingExecutor) Enqueue(ctx context.Context, j *Job) error {
	_ = r.countingExecutor.Enqueue(ctx, j)
	return errors.New("api server timeout")
}
