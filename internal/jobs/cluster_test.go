package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
)

// cmdLog records what a client sends: each command's size (its arguments'
// bytes) and each MULTI/EXEC block, and can fail the next transaction.
type cmdLog struct {
	mu       sync.Mutex
	on       bool
	maxArgs  int    // most field/value arguments of one HSET of row map or inputs
	maxBytes int    // largest command
	maxName  string // its name and key
	multis   [][]string
	failTx   bool
}

func (l *cmdLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func cmdSize(c redis.Cmder) int {
	n := 0
	for _, a := range c.Args() {
		switch v := a.(type) {
		case string:
			n += len(v)
		case []byte:
			n += len(v)
		default:
			n += 8
		}
	}
	return n
}

func (l *cmdLog) note(c redis.Cmder) {
	if n := cmdSize(c); n > l.maxBytes {
		l.maxBytes, l.maxName = n, fmt.Sprint(c.Args()[:min(2, len(c.Args()))])
	}
	if key := fmt.Sprint(c.Args()[min(1, len(c.Args())-1)]); c.Name() == "hset" && (strings.HasSuffix(key, ":rows") || strings.HasSuffix(key, ":in")) {
		l.maxArgs = max(l.maxArgs, len(c.Args())-2)
	}
}

func (l *cmdLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error {
		l.mu.Lock()
		if l.on {
			l.note(c)
		}
		l.mu.Unlock()
		return next(ctx, c)
	}
}

func (l *cmdLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		l.mu.Lock()
		if l.on {
			var names []string
			tx := false
			for _, c := range cmds {
				l.note(c)
				names = append(names, c.Name())
				tx = tx || c.Name() == "multi"
			}
			if tx {
				l.multis = append(l.multis, names)
				if l.failTx {
					l.mu.Unlock()
					err := errors.New("connection reset (injected)")
					for _, c := range cmds {
						c.SetErr(err)
					}
					return err
				}
			}
		}
		l.mu.Unlock()
		return next(ctx, cmds)
	}
}

// bigBuilder is a submission of n distinct rows of realistic size.
func bigBuilder(n int) *Builder {
	b := NewBuilder(testFamily, n)
	for i := 0; i < n; i++ {
		u := fmt.Sprintf("https://www.linkedin.com/company/company-number-%06d", i)
		b.AddValid(u, u, u)
	}
	return b
}

func (e *env) bigJob(n int) *Job {
	now := time.Now()
	return &Job{ID: uuid.NewString(), Family: testFamily, AccountID: e.p.Account.ID, KeyID: e.p.Key.ID, Status: StatusRunning,
		TotalRows: int64(n), Distinct: int64(n), ShardSize: 1000, Shards: (n + 999) / 1000, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
}

// A large job is written in commands of one field each (a 500-row chunk of
// the row map, or one shard's inputs), and the only transaction is the one
// that makes the job exist: its metadata and expiries, no row data. Before
// the fix the whole job was one MULTI/EXEC of HSETs of 20 chunks each,
// which kept every other client of Redis waiting while it ran.
func TestLargeJobWrittenInSmallSteps(t *testing.T) {
	e := newEnv(t)
	log := &cmdLog{}
	e.rdb.AddHook(log)
	const n = 20_000
	b := bigBuilder(n)
	j := e.bigJob(n)
	log.mu.Lock()
	log.on = true
	log.mu.Unlock()
	if err := e.st.create(e.ctx, j, b); err != nil {
		t.Fatal(err)
	}
	log.mu.Lock()
	log.on = false
	log.mu.Unlock()
	if log.maxArgs > 2 {
		t.Errorf("an HSET carried %d field/value arguments, want one field (2)", log.maxArgs)
	}
	if len(log.multis) != 1 {
		t.Fatalf("%d transactions, want 1: %v", len(log.multis), log.multis)
	}
	if got := strings.Join(log.multis[0], " "); got != "multi hset pexpireat pexpireat pexpireat exec" {
		t.Errorf("transaction %q, want the metadata and expiries only", got)
	}
	// One shard's inputs (1,000 URLs as JSON) is the largest single write.
	if log.maxBytes > 200_000 {
		t.Errorf("largest command %s is %d bytes", log.maxName, log.maxBytes)
	}
	got := e.get(j.ID)
	if got.TotalRows != n || !e.active(j.ID) {
		t.Fatalf("stored job %+v active %v", got, e.active(j.ID))
	}
	p, err := e.st.ReadPage(e.ctx, j.ID, n-500, 500)
	if err != nil || len(p.Rows) != 500 || p.Rows[499].Index != n-1 {
		t.Fatalf("last page: %+v, err %v", p, err)
	}
	in, err := e.st.ShardInputs(e.ctx, j.ID, j.Shards-1)
	if err != nil || len(in) != 1000 {
		t.Fatalf("last shard: %d inputs, err %v", len(in), err)
	}
}

// A write that dies before the job's metadata leaves no visible job: Get
// finds nothing, it is not active, what was written expires with the job,
// and the janitor's rollback of the submission deletes it at once.
func TestCreateCutShortLeavesNothingVisible(t *testing.T) {
	e := newEnv(t)
	log := &cmdLog{}
	e.rdb.AddHook(log)
	const n = 5_000
	j := e.bigJob(n)
	if err := e.st.markPending(e.ctx, j.ID, j.AccountID, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	log.mu.Lock()
	log.on, log.failTx = true, true
	log.mu.Unlock()
	if err := e.st.create(e.ctx, j, bigBuilder(n)); err == nil {
		t.Fatal("create succeeded through a failed transaction")
	}
	log.mu.Lock()
	log.on = false
	log.mu.Unlock()
	if _, err := e.st.Get(e.ctx, j.ID); !errors.Is(err, ErrJobNotFound) {
		t.Fatalf("half-written job visible: %v", err)
	}
	if e.active(j.ID) {
		t.Fatal("half-written job active")
	}
	left := e.jobKeysLeft(j.ID)
	if len(left) == 0 {
		t.Fatal("nothing written before the cut (the test proves nothing)")
	}
	for _, k := range left {
		if ttl := e.rdb.PTTL(e.ctx, k).Val(); ttl <= 0 || ttl > time.Hour {
			t.Errorf("%s: ttl %v, want the job's expiry", k, ttl)
		}
	}
	if _, err := e.eng.ReclaimAbandoned(e.ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if left := e.jobKeysLeft(j.ID); len(left) != 0 {
		t.Fatalf("keys left after the janitor: %v", left)
	}
}

// Completing a job owes things outside the job's hash slot: the refund of
// its uncharged outcome and leaving the active set. A process that dies
// right after the completing script leaves them to SettleActive (the
// janitor) or Resume, which do them exactly once.
func TestCompletionSettledAfterCrash(t *testing.T) {
	for _, via := range []string{"janitor", "resume", "janitor-after-active"} {
		t.Run(via, func(t *testing.T) {
			e := newEnv(t)
			price := credits.Amount(200)
			b := slugs("a", "b", "c")
			j, err := e.eng.Submit(e.ctx, e.p, b, Metering{Price: price, RefundOutcome: "unknown"})
			if err != nil {
				t.Fatal(err)
			}
			charged := e.balance - 3*price
			// The shard's answers, written by the job's script alone: the
			// process "dies" before anything else.
			rec := []Recorded{
				{Index: 0, Rows: 1, Outcome: "unknown", Data: []byte(`{}`)},
				{Index: 1, Rows: 1, Outcome: "unknown", Data: []byte(`{}`)},
				{Index: 2, Rows: 1, Outcome: OutcomeFound, Data: []byte(`{}`)},
			}
			if _, err := e.st.writeAnswers(e.ctx, j, time.Now(), "new", rec); err != nil {
				t.Fatal(err)
			}
			// Every input answered, not completed: a job reads completed
			// only once its refund is in the balance.
			if got := e.get(j.ID); got.Status != StatusRunning || !got.Settling || got.RowsProcessed != 3 || !e.active(j.ID) {
				t.Fatalf("after the crash: %s settling %v rows %d active %v", got.Status, got.Settling, got.RowsProcessed, e.active(j.ID))
			}
			if bal, _ := e.bl.Balance(e.ctx, e.p.Account.ID); bal != charged {
				t.Fatalf("balance %v before settling, want %v", bal, charged)
			}
			if via == "janitor-after-active" {
				// Died later: refunded and out of the active set, not yet
				// marked completed. Only the settling set remembers it.
				if err := e.rdb.ZAdd(e.ctx, settlingKey, redis.Z{Score: 1, Member: j.ID}).Err(); err != nil {
					t.Fatal(err)
				}
				if _, err := e.bl.RefundPart(e.ctx, e.p.Account.ID, e.p.Key.ID, j.ID, 2*price, "test"); err != nil {
					t.Fatal(err)
				}
				if err := e.st.ForgetActive(e.ctx, j.ID); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < 2; i++ { // twice: the second finds nothing to do
				switch via {
				case "janitor", "janitor-after-active":
					n, err := e.st.SettleActive(e.ctx)
					if err != nil || n != 1-i {
						t.Fatalf("settle #%d: %d %v", i, n, err)
					}
				case "resume":
					l := e.local("w1", newMapAnswerer(nil), 1)
					if err := l.Resume(e.ctx); err != nil {
						t.Fatal(err)
					}
				}
			}
			got := e.get(j.ID)
			if got.Status != StatusCompleted || got.Refunded != 2*price || e.active(j.ID) || e.rdb.ZCard(e.ctx, settlingKey).Val() != 0 {
				t.Fatalf("settled: %s refunded %v active %v", got.Status, got.Refunded, e.active(j.ID))
			}
			if bal, _ := e.bl.Balance(e.ctx, e.p.Account.ID); bal != charged+2*price {
				t.Fatalf("balance %v, want %v", bal, charged+2*price)
			}
			es, _ := e.bl.Entries(e.ctx, e.p.Account.ID, "", 10)
			refunds := 0
			for _, en := range es {
				if en.Kind == billing.KindRefund {
					refunds++
				}
			}
			if refunds != 1 {
				t.Fatalf("%d refunds in the ledger, want 1: %+v", refunds, es)
			}
		})
	}
}

// A job's place in the retrying-jobs set is written after its answers
// (another hash slot). SettleActive repairs both ways a crash can leave
// it: a job with due retries missing from the set, and a job without
// retries still in it.
func TestSettleActiveRepairsRetryingSet(t *testing.T) {
	e := newEnv(t)
	j := e.submit(slugs("a", "b"))
	due := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	if _, err := e.st.writeAnswers(e.ctx, j, time.Now(), "new", []Recorded{
		{Index: 0, Rows: 1, Outcome: "unknown", Data: []byte(`{}`), RetryAt: due},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rdb.ZScore(e.ctx, retryingKey, j.ID).Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("set before the repair: %v", err)
	}
	if n, err := e.st.SettleActive(e.ctx); err != nil || n != 1 {
		t.Fatalf("settle: %d %v", n, err)
	}
	if sc, err := e.rdb.ZScore(e.ctx, retryingKey, j.ID).Result(); err != nil || int64(sc) != due.UnixMilli() {
		t.Fatalf("score %v %v, want %d", sc, err, due.UnixMilli())
	}
	// The retry answered final, and the process died before dropping the job
	// from the set.
	if _, err := e.st.writeAnswers(e.ctx, j, time.Now(), "replace", []Recorded{
		{Index: 0, Rows: 1, Outcome: OutcomeFound, Data: []byte(`{}`)},
	}); err != nil {
		t.Fatal(err)
	}
	if n, err := e.st.SettleActive(e.ctx); err != nil || n != 1 {
		t.Fatalf("settle: %d %v", n, err)
	}
	if n := e.rdb.ZCard(e.ctx, retryingKey).Val(); n != 0 {
		t.Fatalf("%d jobs left in the retrying set", n)
	}
	if n, err := e.st.SettleActive(e.ctx); err != nil || n != 0 {
		t.Fatalf("settle of a consistent state: %d %v", n, err)
	}
}

// Marks that a version before the hash-tagged pending and reclaiming sets
// left in the old ones are rolled back by the new janitor (a refund must
// not be lost in an upgrade).
func TestLegacyMarksAdopted(t *testing.T) {
	e := newEnv(t)
	acct := e.p.Account.ID
	old := time.Now().Add(-time.Hour)
	for _, m := range []struct{ key, job string }{{legacyPendingKey, "old-pending"}, {legacyReclaimingKey, "old-reclaiming"}} {
		if _, err := e.bl.Charge(e.ctx, billing.Charge{AccountID: acct, KeyID: e.p.Key.ID, ChargeID: m.job, Amount: credits.Whole(5)}); err != nil {
			t.Fatal(err)
		}
		if err := e.rdb.ZAdd(e.ctx, m.key, redis.Z{Score: float64(old.UnixMilli()), Member: mark(m.job, acct)}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A fresh mark in the old pending set belongs to a live old process.
	if err := e.rdb.ZAdd(e.ctx, legacyPendingKey, redis.Z{Score: float64(time.Now().UnixMilli()), Member: mark("live", acct)}).Err(); err != nil {
		t.Fatal(err)
	}
	n, err := e.eng.ReclaimAbandoned(e.ctx, 2*time.Minute)
	if err != nil || n != 2 {
		t.Fatalf("reclaimed %d %v, want 2", n, err)
	}
	if bal, _ := e.bl.Balance(e.ctx, acct); bal != e.balance {
		t.Fatalf("balance %v, want %v (both refunded)", bal, e.balance)
	}
	if got := e.rdb.ZRange(e.ctx, legacyPendingKey, 0, -1).Val(); len(got) != 1 || got[0] != mark("live", acct) {
		t.Fatalf("old pending set %v, want the live mark only", got)
	}
	for _, k := range []string{legacyReclaimingKey, pendingKey, reclaimingKey} {
		if n := e.rdb.ZCard(e.ctx, k).Val(); n != 0 {
			t.Errorf("%s: %d marks left", k, n)
		}
	}
}
