package billing_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/testredis"
)

// A charge whose reply was lost (a timeout) may reach Redis after the
// caller, taking it for failed, reversed it. The reversal finds no charge
// and must leave a tombstone, so the late charge takes nothing and writes
// no ledger entry. Before the fix the reversal wrote nothing and the late
// charge debited the account for a job that never existed.
func TestReverseBeforeChargeLeavesTombstone(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx := context.Background()
	b := billing.New(rdb, nil)
	acct := mustAccount(t, accounts.NewStore(rdb, nil), credits.Whole(10))

	if _, err := b.Reverse(ctx, acct.ID, "job-late", "submission failed"); !errors.Is(err, billing.ErrChargeNotFound) {
		t.Fatalf("reverse before the charge: %v, want ErrChargeNotFound", err)
	}
	if _, err := b.Charge(ctx, billing.Charge{AccountID: acct.ID, KeyID: "k", ChargeID: "job-late", Amount: credits.Whole(3)}); !errors.Is(err, billing.ErrDuplicateCharge) {
		t.Fatalf("late charge: %v, want ErrDuplicateCharge (refused by the tombstone)", err)
	}
	if bal, _ := b.Balance(ctx, acct.ID); bal != credits.Whole(10) {
		t.Fatalf("balance %s after a reversed late charge, want 10", bal)
	}
	if es, _ := b.Entries(ctx, acct.ID, "", 10); len(es) != 0 {
		t.Fatalf("ledger %+v, want no entry", es)
	}
	// Reversing again is still "nothing to reverse", and moves nothing.
	if _, err := b.Reverse(ctx, acct.ID, "job-late", "again"); !errors.Is(err, billing.ErrChargeNotFound) {
		t.Fatalf("second reverse: %v", err)
	}
	// The tombstone lives as long as a charge record would.
	ttl := rdb.TTL(ctx, accounts.ChargeKey(acct.ID, "job-late")).Val()
	if ttl < b.ChargeTTL-time.Minute || ttl > b.ChargeTTL {
		t.Fatalf("tombstone ttl %v, want about %v", ttl, b.ChargeTTL)
	}
	// Other charges are unaffected.
	if _, err := b.Charge(ctx, billing.Charge{AccountID: acct.ID, KeyID: "k", ChargeID: "job-2", Amount: credits.Whole(3)}); err != nil {
		t.Fatal(err)
	}
}

// The same for a quota consumption (unlimited plans): a consumption run
// after its release consumes nothing.
func TestReleaseBeforeConsumeLeavesTombstone(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx := context.Background()
	b := billing.New(rdb, nil)
	acct := mustAccount(t, accounts.NewStore(rdb, nil), 0)
	w := billing.DailyWindow(billing.BulkSearches, time.Now())

	if _, err := b.Reverse(ctx, acct.ID, "job-late", "submission failed"); !errors.Is(err, billing.ErrChargeNotFound) {
		t.Fatalf("release before the consumption: %v", err)
	}
	_, err := b.Consume(ctx, billing.Consumption{AccountID: acct.ID, KeyID: "k", ChargeID: "job-late", Window: w, N: 500, Limit: 10_000})
	if !errors.Is(err, billing.ErrDuplicateCharge) {
		t.Fatalf("late consumption: %v, want ErrDuplicateCharge", err)
	}
	if used, _ := b.Used(ctx, acct.ID, w); used != 0 {
		t.Fatalf("quota use %d after a released late consumption, want 0", used)
	}
	if es, _ := b.Entries(ctx, acct.ID, "", 10); len(es) != 0 {
		t.Fatalf("ledger %+v, want no entry", es)
	}
}

// A quota release gives back to the counter the consumption took from,
// which the reverse script now receives in KEYS (read from the charge
// record first) instead of reading its name from the record inside the
// script.
func TestReleaseReturnsToItsOwnWindow(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx := context.Background()
	b := billing.New(rdb, nil)
	acct := mustAccount(t, accounts.NewStore(rdb, nil), 0)
	end := time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
	w := billing.PeriodWindow(billing.SingleLookups, end)
	for _, id := range []string{"r1", "r2"} {
		if _, err := b.Consume(ctx, billing.Consumption{AccountID: acct.ID, ChargeID: id, Window: w, N: 1, Limit: 10}); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := b.Reverse(ctx, acct.ID, "r1", "lookup failed"); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	if used, _ := b.Used(ctx, acct.ID, w); used != 1 {
		t.Fatalf("used %d after one release, want 1", used)
	}
	if ok, err := b.Reverse(ctx, acct.ID, "r1", "again"); ok || err != nil {
		t.Fatalf("second release: %v %v", ok, err)
	}
	if used, _ := b.Used(ctx, acct.ID, w); used != 1 {
		t.Fatalf("used %d after a repeated release, want 1", used)
	}
}

// RefundPart gives back part of a charge once; reversing the charge
// afterwards gives back only the rest, and a part refund after a full
// reversal gives nothing.
func TestRefundPartOnceAndReverseGivesTheRest(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx := context.Background()
	b := billing.New(rdb, nil)
	acct := mustAccount(t, accounts.NewStore(rdb, nil), credits.Whole(10))
	if _, err := b.Charge(ctx, billing.Charge{AccountID: acct.ID, KeyID: "k", ChargeID: "j1", Amount: credits.Whole(4)}); err != nil {
		t.Fatal(err)
	}
	for i, amt := range []credits.Amount{600, 900} { // the second call pays nothing and reports the first amount
		got, err := b.RefundPart(ctx, acct.ID, "k", "j1", amt, "3 unknown results are not charged")
		if err != nil || got != 600 {
			t.Fatalf("refund part #%d: %v %v, want 0.6", i, got, err)
		}
	}
	if bal, _ := b.Balance(ctx, acct.ID); bal != credits.Amount(6600) {
		t.Fatalf("balance %s, want 6.6", bal)
	}
	if ok, err := b.Reverse(ctx, acct.ID, "j1", "rolled back"); !ok || err != nil {
		t.Fatalf("reverse: %v %v", ok, err)
	}
	if bal, _ := b.Balance(ctx, acct.ID); bal != credits.Whole(10) {
		t.Fatalf("balance %s after reversal, want 10 (not 10.6)", bal)
	}
	if _, err := b.Charge(ctx, billing.Charge{AccountID: acct.ID, KeyID: "k", ChargeID: "j2", Amount: credits.Whole(2)}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Reverse(ctx, acct.ID, "j2", ""); err != nil {
		t.Fatal(err)
	}
	if got, err := b.RefundPart(ctx, acct.ID, "k", "j2", credits.Whole(1), ""); got != 0 || err != nil {
		t.Fatalf("part refund of a reversed charge: %v %v", got, err)
	}
	if bal, _ := b.Balance(ctx, acct.ID); bal != credits.Whole(10) {
		t.Fatalf("balance %s, want 10", bal)
	}
	es, _ := b.Entries(ctx, acct.ID, "", 20)
	var sum credits.Amount
	for _, e := range es {
		a, err := credits.Parse(e.Amount)
		if err != nil {
			t.Fatal(err)
		}
		sum += a
	}
	if sum != 0 {
		t.Fatalf("ledger amounts sum to %s, want 0 (balance back where it started): %+v", sum, es)
	}
}
