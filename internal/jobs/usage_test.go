package jobs

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
)

// answerAll records an answer for every distinct input of j (which
// completes and settles it).
func (e *env) answerAll(j *Job, data string) {
	e.t.Helper()
	var rec []Recorded
	for i := 0; i < int(j.Distinct); i++ {
		rec = append(rec, Recorded{Index: i, Rows: 1, Outcome: OutcomeFound, Data: []byte(data)})
	}
	if _, err := e.st.Record(e.ctx, j, time.Now(), rec); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) usage() Usage {
	e.t.Helper()
	u, err := AccountUsage(e.ctx, e.rdb, e.p.Account.ID, e.eng.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	return u
}

// Concurrent submissions of one account over its active-job limit: the
// reservation is one script on the account's slot before the charge, so
// exactly the limit's worth are admitted, the others are refused with
// nothing charged, nothing in the ledger and nothing stored; a completed
// job and a deleted one give their places back. Before the fix every
// submission was admitted (there was no limit). Also on a Redis Cluster
// (BULKD_TEST_REDIS=cluster): every script stays in the account's slot.
func TestActiveJobLimitExactUnderConcurrency(t *testing.T) {
	e := newEnv(t)
	e.eng.Limits = accounts.Limits{ActiveJobs: 3}
	const n = 24
	var wg sync.WaitGroup
	var mu sync.Mutex
	var admitted []*Job
	var refused []*accounts.LimitError
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			j, err := e.eng.Submit(e.ctx, e.p, slugs(fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)), Metering{Price: credits.Whole(1)})
			mu.Lock()
			defer mu.Unlock()
			var le *accounts.LimitError
			switch {
			case err == nil:
				admitted = append(admitted, j)
			case errors.As(err, &le):
				refused = append(refused, le)
			default:
				t.Errorf("submit %d: %v", i, err)
			}
		}(i)
	}
	wg.Wait()
	if len(admitted) != 3 || len(refused) != n-3 {
		t.Fatalf("%d admitted, %d refused; want exactly 3 admitted", len(admitted), len(refused))
	}
	for _, le := range refused {
		if le.Limit != accounts.LimitActiveJobs || le.Max != 3 || le.Used != 3 || le.RetryAfter <= 0 {
			t.Fatalf("refusal %+v", le)
		}
	}
	// Only the admitted jobs were charged, and the ledger has their three
	// charges and nothing else (no charge-and-refund of the refused).
	if bal, _ := e.bl.Balance(e.ctx, e.p.Account.ID); bal != e.balance-credits.Whole(6) {
		t.Fatalf("balance %v, want %v", bal, e.balance-credits.Whole(6))
	}
	es := e.ledger()
	if len(es) != 3 {
		t.Fatalf("ledger has %d entries, want the 3 charges: %+v", len(es), es)
	}
	for _, en := range es {
		if en.Kind != billing.KindCharge {
			t.Fatalf("ledger entry %+v", en)
		}
	}
	if metas := e.keys(prefix + "job:{*}"); len(metas) != 3 {
		t.Fatalf("%d jobs stored, want 3: %v", len(metas), metas)
	}
	if n := e.rdb.ZCard(e.ctx, pendingKey).Val(); n != 0 {
		t.Fatalf("%d pending marks left", n)
	}
	if u := e.usage(); u.ActiveJobs != 3 {
		t.Fatalf("usage %+v", u)
	}

	// A completed job gives its place back (settle), a deleted one too.
	e.answerAll(admitted[0], `{}`)
	if got := e.get(admitted[0].ID); got.Status != StatusCompleted {
		t.Fatalf("status %s", got.Status)
	}
	if err := e.st.Delete(e.ctx, admitted[1].ID); err != nil {
		t.Fatal(err)
	}
	if u := e.usage(); u.ActiveJobs != 1 {
		t.Fatalf("usage after a completion and a deletion: %+v", u)
	}
	for i := 0; i < 2; i++ {
		e.submit(slugs(fmt.Sprintf("again%d", i)))
	}
	if _, err := e.eng.Submit(e.ctx, e.p, slugs("one too many"), Metering{Price: credits.Whole(1)}); err == nil {
		t.Fatal("a fourth active job was admitted")
	}
	// The account's own limit (bulkd admin account limits) wins over the
	// default, read in the same step.
	if err := accounts.NewStore(e.rdb, nil).SetLimit(e.ctx, e.p.Account.ID, accounts.LimitActiveJobs, 4); err != nil {
		t.Fatal(err)
	}
	e.submit(slugs("fourth"))
}

// The stored-bytes limit: a submission reserves its row map and inputs
// exactly and an estimate for its answers before it is charged; one that
// does not fit is refused with nothing charged and a Retry-After for when
// enough of the account's data expires; a completed job's reservation
// becomes its exact size; an expired job's bytes stop counting. Before the
// fix nothing limited what an account stored.
func TestStoredBytesLimit(t *testing.T) {
	e := newEnv(t)
	now := time.Now()
	e.eng.Now = func() time.Time { return now }
	e.eng.Retention = 24 * time.Hour
	values := func(tag string, n int) *Builder {
		var vs []string
		for i := 0; i < n; i++ {
			vs = append(vs, fmt.Sprintf("%s-%03d", tag, i))
		}
		return slugs(vs...)
	}
	const perJob = 40
	a := e.submit(values("a", perJob))
	one := e.usage().StoredBytes
	if one < perJob*DefaultAnswerBytes || one > perJob*DefaultAnswerBytes+4096 {
		t.Fatalf("one job reserved %d bytes", one)
	}
	e.eng.Limits = accounts.Limits{StoredBytes: 2*one + one/2}
	now = now.Add(time.Hour)
	b := e.submit(values("b", perJob))
	before, _ := e.bl.Balance(e.ctx, e.p.Account.ID)
	entries := len(e.ledger())
	_, err := e.eng.Submit(e.ctx, e.p, values("c", perJob), Metering{Price: credits.Whole(1)})
	var le *accounts.LimitError
	if !errors.As(err, &le) || le.Limit != accounts.LimitStoredBytes || le.Used != 2*one || le.Requested != one {
		t.Fatalf("third job: %v", err)
	}
	// Room comes when the first job expires, 23 hours from now.
	if le.RetryAfter < 23*time.Hour-time.Second || le.RetryAfter > 23*time.Hour+time.Second {
		t.Fatalf("retry after %v, want 23h", le.RetryAfter)
	}
	if bal, _ := e.bl.Balance(e.ctx, e.p.Account.ID); bal != before || len(e.ledger()) != entries {
		t.Fatalf("a refused submission moved money: balance %v (was %v), ledger %d entries (was %d)", bal, before, len(e.ledger()), entries)
	}
	// A submission larger than the whole limit can never fit.
	_, err = e.eng.Submit(e.ctx, e.p, values("huge", 3*perJob), Metering{Price: credits.Whole(1)})
	if !errors.As(err, &le) || le.Limit != accounts.LimitStoredBytes || le.RetryAfter != 0 || le.Requested <= le.Max {
		t.Fatalf("a job larger than the limit: %v", err)
	}

	// Completed, the jobs hold their exact bytes: row map, inputs and
	// answers of 2 bytes each, far less than the estimate.
	e.answerAll(a, `{}`)
	e.answerAll(b, `{}`)
	exact := e.usage().StoredBytes
	base := e.rdb.HGet(e.ctx, metaKey(a.ID), "base_bytes").Val()
	ans := e.rdb.HGet(e.ctx, metaKey(a.ID), "answer_bytes").Val()
	if want := fmt.Sprintf("%d", perJob*len(OutcomeFound+"\n{}")); ans != want {
		t.Fatalf("answer_bytes %s, want %s", ans, want)
	}
	if exact >= one || exact <= 0 {
		t.Fatalf("after completion %d bytes, reserved %d per job", exact, one)
	}
	t.Logf("per job: reserved %d bytes, exact %d (base %s + answers %s)", one, exact/2, base, ans)
	c := e.submit(values("c", perJob))
	// Past the first two jobs' expiry their bytes no longer count.
	now = now.Add(24 * time.Hour)
	if u := e.usage(); u.StoredBytes != 0 || u.ActiveJobs != 0 {
		t.Fatalf("usage past every expiry: %+v", u)
	}
	_ = c
}

// Reservations a crash left behind are dropped when they would refuse a
// submission: a job deleted whose release never ran, and a completed job
// still counted as active. A reservation whose submission is still in
// flight (marked pending, not stored yet) is kept.
func TestUsageRepairedOnRefusal(t *testing.T) {
	e := newEnv(t)
	e.eng.Limits = accounts.Limits{ActiveJobs: 2}
	gone := e.submit(slugs("gone"))
	done := e.submit(slugs("done"))
	// The job's keys deleted without its release (a crash in Delete).
	if err := e.rdb.Del(e.ctx, jobKeys(gone.ID)...).Err(); err != nil {
		t.Fatal(err)
	}
	// Completed, but the process died before settle released its place.
	if _, err := e.st.writeAnswers(e.ctx, done, time.Now(), "new", []Recorded{{Index: 0, Rows: 1, Outcome: OutcomeFound, Data: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.HSet(e.ctx, metaKey(done.ID), "status", StatusCompleted).Err(); err != nil {
		t.Fatal(err)
	}
	// An in-flight submission: reserved and marked, not stored.
	flight := &Job{ID: "in-flight", AccountID: e.p.Account.ID, Status: StatusRunning, ExpiresAt: time.Now().Add(time.Hour)}
	if err := e.st.markPending(e.ctx, flight.ID, flight.AccountID, time.Now()); err != nil {
		t.Fatal(err)
	}
	e.eng.Limits.ActiveJobs = 3
	if err := e.eng.reserve(e.ctx, flight, 10); err != nil {
		t.Fatal(err)
	}
	if u := e.usage(); u.ActiveJobs != 3 {
		t.Fatalf("usage %+v", u)
	}
	// Two of the three places are stale: both come back; the third is
	// the in-flight one.
	e.submit(slugs("x"))
	e.submit(slugs("y"))
	if _, err := e.eng.Submit(e.ctx, e.p, slugs("z"), Metering{Price: credits.Whole(1)}); err == nil {
		t.Fatal("the in-flight reservation was dropped")
	}
	members := e.rdb.ZRange(e.ctx, accountActiveKey(e.p.Account.ID), 0, -1).Val()
	if strings.Contains(strings.Join(members, ","), gone.ID) || strings.Contains(strings.Join(members, ","), done.ID) ||
		!strings.Contains(strings.Join(members, ","), "in-flight") {
		t.Fatalf("active set %v", members)
	}
}

// A submission rolled back after its reservation (the charge failed, the
// store failed) and one the janitor reclaims after a crash give their
// reservation back.
func TestUsageReleasedOnRollback(t *testing.T) {
	for _, step := range []string{StepCharge, StepStore, StepEnqueue, StepCommit} {
		t.Run(step, func(t *testing.T) {
			e := newEnv(t)
			e.eng.SetFailpoint(func(s string) error {
				if s == step {
					return errors.New("injected")
				}
				return nil
			})
			if _, err := e.eng.Submit(e.ctx, e.p, slugs("a", "b"), Metering{Price: credits.Whole(1)}); err == nil {
				t.Fatal("submission succeeded through a failure")
			}
			if u := e.usage(); u != (Usage{}) {
				t.Fatalf("usage after the rollback: %+v", u)
			}
		})
	}
	t.Run("janitor", func(t *testing.T) {
		e := newEnv(t)
		e.eng.SetFailpoint(func(s string) error {
			if s == StepCommit {
				panic("crash")
			}
			return nil
		})
		func() {
			defer func() { _ = recover() }()
			_, _ = e.eng.Submit(e.ctx, e.p, slugs("a"), Metering{Price: credits.Whole(1)})
		}()
		if u := e.usage(); u.ActiveJobs != 1 {
			t.Fatalf("usage after the crash: %+v", u)
		}
		e.eng.SetFailpoint(nil)
		if n, err := e.eng.ReclaimAbandoned(e.ctx, -time.Minute); err != nil || n != 1 {
			t.Fatalf("reclaim: %d %v", n, err)
		}
		if u := e.usage(); u != (Usage{}) {
			t.Fatalf("usage after the janitor: %+v", u)
		}
	})
}

// An invalid row's echo is stored cut to MaxInvalidEcho characters with
// a marker, and its reason says how long the value was; valid rows keep
// their echo whole. Before the fix a 2,048-character invalid value was
// stored whole for the retention, for free.
func TestInvalidEchoCapped(t *testing.T) {
	long := strings.Repeat("é", 2000) + strings.Repeat("x", 48)
	b := NewBuilder(testFamily, 4)
	b.EchoTag = 1
	b.AddInvalid("n"+long, "not a company")
	b.AddInvalid("dshort", "not a domain")
	b.AddValid("v"+long, "k", "k")
	rows, err := decodeRows(encodeRows(b.rows))
	if err != nil {
		t.Fatal(err)
	}
	want := "n" + strings.Repeat("é", MaxInvalidEcho) + InvalidEchoMarker
	if rows[0].Echo != want {
		t.Fatalf("cut echo: %d bytes %q...", len(rows[0].Echo), rows[0].Echo[:20])
	}
	if rows[0].Reason != "not a company (value cut from 2048 characters)" {
		t.Fatalf("reason %q", rows[0].Reason)
	}
	if rows[1].Echo != "dshort" || rows[1].Reason != "not a domain" {
		t.Fatalf("short row %+v", rows[1])
	}
	if rows[2].Echo != "v"+long {
		t.Fatal("a valid row's echo was cut")
	}
}
