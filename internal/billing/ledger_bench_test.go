package billing_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/testredis"
)

// BenchmarkLedgerMemory measures what a ledger entry costs in Redis
// (MEMORY USAGE of the stream over its entries), for the documented bound
// in docs/billing.md: ledger entries as jobs write them (a charge per job
// with a uuid job id and a 12-character key id; every fourth job also
// refunded, with a note).
//
//	go test -run '^$' -bench LedgerMemory -benchtime 20000x ./internal/billing
func BenchmarkLedgerMemory(b *testing.B) {
	rdb, _ := testredis.Client(b)
	ctx := context.Background()
	a, err := accounts.NewStore(rdb, nil).CreateAccount(ctx, "bench", credits.Whole(1<<40))
	if err != nil {
		b.Fatal(err)
	}
	bl := billing.New(rdb, nil)
	const key = "k3Jd9QpX2mVb"
	entries := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := uuid.NewString()
		if _, err := bl.Charge(ctx, billing.Charge{AccountID: a.ID, KeyID: key, ChargeID: id, Amount: 1000 + credits.Amount(i%5000)*200}); err != nil {
			b.Fatal(err)
		}
		entries++
		if i%4 == 3 {
			if _, err := bl.Reverse(ctx, a.ID, id, "submission failed: refunded"); err != nil {
				b.Fatal(err)
			}
			entries++
		}
	}
	b.StopTimer()
	used, err := rdb.MemoryUsage(ctx, accounts.LedgerKey(a.ID), 0).Result()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(used)/float64(entries), "bytes/entry")
	b.ReportMetric(float64(entries), "entries")
}
