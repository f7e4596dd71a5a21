package billing_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/google/uuid"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }
func newClock(s string) *clock   { t, _ := time.Parse(time.RFC3339, s); return &clock{t: t} }
func mustAccount(t *testing.T, st *accounts.Store, bal credits.Amount) *accounts.Account {
	t.Helper()
	a, err := st.CreateAccount(context.Background(), "test", bal)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// 200 parallel charges of 1 credit against a balance of 50 accept exactly 50
// and leave exactly 0: the check and the debit are one atomic step.
func TestConcurrentChargesNeverOverdraw(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx := context.Background()
	st := accounts.NewStore(rdb, nil)
	b := billing.New(rdb, nil)
	acct := mustAccount(t, st, credits.Whole(50))

	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := b.Charge(ctx, billing.Charge{AccountID: acct.ID, KeyID: "k", ChargeID: uuid.NewString(), Amount: credits.Whole(1)})
			var ie *billing.InsufficientError
			switch {
			case err == nil:
				ok.Add(1)
			case errors.As(err, &ie):
				refused.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if ok.Load() != 50 || refused.Load() != 150 {
		t.Fatalf("accepted %d refused %d, want 50/150", ok.Load(), refused.Load())
	}
	bal, err := b.Balance(ctx, acct.ID)
	if err != nil || bal != 0 {
		t.Fatalf("balance %s %v, want 0", bal, err)
	}
	entries, err := b.Entries(ctx, acct.ID, "", 1000)
	if err != nil || len(entries) != 50 {
		t.Fatalf("ledger has %d entries (%v), want 50", len(entries), err)
	}
}

func TestChargeRefundIsExactAndOnce(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx := context.Background()
	st := accounts.NewStore(rdb, nil)
	b := billing.New(rdb, nil)
	acct := mustAccount(t, st, credits.Whole(10))

	price := credits.Amount(200) // 0.2 credits
	amt, _ := price.Mul(7)       // 1.4 credits
	after, err := b.Charge(ctx, billing.Charge{AccountID: acct.ID, KeyID: "k1", ChargeID: "job-1", Amount: amt})
	if err != nil || after.String() != "8.6" {
		t.Fatalf("after charge %s %v", after, err)
	}
	if _, err := b.Charge(ctx, billing.Charge{AccountID: acct.ID, ChargeID: "job-1", Amount: 1}); !errors.Is(err, billing.ErrDuplicateCharge) {
		t.Fatalf("duplicate charge id: %v", err)
	}
	var ie *billing.InsufficientError
	if _, err := b.Charge(ctx, billing.Charge{AccountID: acct.ID, ChargeID: "job-2", Amount: credits.Whole(9)}); !errors.As(err, &ie) ||
		ie.Balance.String() != "8.6" || ie.Required.String() != "9" {
		t.Fatalf("insufficient: %v", err)
	}
	for i, want := range []bool{true, false} {
		got, err := b.Reverse(ctx, acct.ID, "job-1", "test")
		if err != nil || got != want {
			t.Fatalf("reverse #%d = %v %v", i, got, err)
		}
	}
	if bal, _ := b.Balance(ctx, acct.ID); bal != credits.Whole(10) {
		t.Fatalf("balance after refund %s", bal)
	}
	if _, err := b.Reverse(ctx, acct.ID, "nope", ""); !errors.Is(err, billing.ErrChargeNotFound) {
		t.Fatalf("reverse unknown: %v", err)
	}
	es, _ := b.Entries(ctx, acct.ID, "", 10)
	if len(es) != 2 || es[0].Kind != "charge" || es[0].Amount != "-1.4" || es[1].Kind != "refund" || es[1].Amount != "1.4" || es[1].After != "10" {
		t.Fatalf("ledger %+v", es)
	}
}

func TestAdjustNeverGoesNegative(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx := context.Background()
	b := billing.New(rdb, nil)
	acct := mustAccount(t, accounts.NewStore(rdb, nil), credits.Whole(1))
	if after, err := b.Adjust(ctx, acct.ID, credits.Whole(5), "top-up"); err != nil || after != credits.Whole(6) {
		t.Fatal(after, err)
	}
	if _, err := b.Adjust(ctx, acct.ID, -credits.Whole(7), ""); err == nil {
		t.Fatal("overdraft allowed")
	}
	if _, err := b.Adjust(ctx, "acct_missing", 1, ""); !errors.Is(err, billing.ErrAccountNotFound) {
		t.Fatal(err)
	}
}

// The daily quota window aligns to UTC midnight: use in one day does not
// count against the next.
func TestDailyQuotaRollsOverAtUTCMidnight(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx := context.Background()
	clk := newClock("2026-03-09T23:59:58Z")
	b := billing.New(rdb, clk.Now)
	acct := mustAccount(t, accounts.NewStore(rdb, nil), 0)
	consume := func(id string, n int64) error {
		_, err := b.Consume(ctx, billing.Consumption{AccountID: acct.ID, ChargeID: id, N: n, Limit: 10_000,
			Window: billing.DailyWindow(billing.BulkSearches, clk.Now())})
		return err
	}
	if err := consume("a", 9_000); err != nil {
		t.Fatal(err)
	}
	err := consume("b", 1_001)
	var qe *billing.QuotaError
	if !errors.As(err, &qe) || qe.Used != 9_000 || billing.RetryAfterSeconds(qe.RetryAfter) != 2 {
		t.Fatalf("over quota: %v", err)
	}
	if err := consume("c", 1_000); err != nil {
		t.Fatal(err)
	}
	clk.Set(clk.Now().Add(3 * time.Second)) // 00:00:01 next day
	if err := consume("d", 10_000); err != nil {
		t.Fatalf("new day: %v", err)
	}
	if used, _ := b.Used(ctx, acct.ID, billing.DailyWindow(billing.BulkSearches, clk.Now())); used != 10_000 {
		t.Fatalf("used %d", used)
	}
	// Releasing yesterday's consumption gives back to yesterday's window, not today's.
	if ok, err := b.Reverse(ctx, acct.ID, "c", "failed"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if used, _ := b.Used(ctx, acct.ID, billing.DailyWindow(billing.BulkSearches, clk.Now())); used != 10_000 {
		t.Fatalf("today's use changed to %d", used)
	}
	// The ledger's amounts are signed changes of the quota use.
	es, _ := b.Entries(ctx, acct.ID, "", 10)
	last := es[len(es)-1]
	if len(es) != 4 || es[0].Kind != "quota_consume" || es[0].Amount != "9000" || es[0].After != "9000" ||
		last.Kind != "quota_release" || last.Amount != "-1000" || last.After != "9000" || last.Unit != "bulk_searches" {
		t.Fatalf("ledger %+v", es)
	}
}

func TestConcurrentQuotaNeverExceeds(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx := context.Background()
	b := billing.New(rdb, nil)
	acct := mustAccount(t, accounts.NewStore(rdb, nil), 0)
	var ok atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.Consume(ctx, billing.Consumption{AccountID: acct.ID, ChargeID: uuid.NewString(), N: 300, Limit: 10_000,
				Window: billing.DailyWindow(billing.BulkSearches, time.Now())})
			if err == nil {
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 33 {
		t.Fatalf("accepted %d consumptions of 300 under 10,000, want 33", ok.Load())
	}
}

func BenchmarkCharge(b *testing.B) {
	srv, err := testredis.StartProcess(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Stop()
	rdb := redisClient(srv.Addr)
	ctx := context.Background()
	bl := billing.New(rdb, nil)
	acct, _ := accounts.NewStore(rdb, nil).CreateAccount(ctx, "bench", credits.Whole(int64(b.N)+1))
	rt := &roundTrips{}
	rdb.AddHook(rt)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := bl.Charge(ctx, billing.Charge{AccountID: acct.ID, ChargeID: uuid.NewString(), Amount: credits.Whole(1)}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	// EVALSHA is one round trip; a NOSCRIPT fallback to EVAL would add one.
	b.ReportMetric(float64(rt.n.Load())/float64(b.N), "roundtrips/op")
}
