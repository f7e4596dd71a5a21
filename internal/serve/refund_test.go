package serve

import (
	"context"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/accounts/accountstest"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/testredis"
)

// unknownAnswerer answers every input with the refunded outcome.
type unknownAnswerer struct{}

func (unknownAnswerer) Answer(_ context.Context, payloads []string) ([]jobs.Answer, error) {
	out := make([]jobs.Answer, len(payloads))
	for i := range out {
		out[i] = jobs.Answer{Outcome: "unknown", Data: []byte(`{}`)}
	}
	return out, nil
}

func (unknownAnswerer) ErrorAnswer() jobs.Answer {
	return jobs.Answer{Outcome: "error", Data: []byte(`{}`)}
}

// idleExecutor accepts jobs and runs nothing: the test runs the shards.
type idleExecutor struct{}

func (idleExecutor) Enqueue(context.Context, *jobs.Job) error { return nil }
func (idleExecutor) Cancel(context.Context, string) error     { return nil }

// A completion refund is dated by the clock the components were built
// with, like the charge it answers: the processor's store pays it through
// the engine's billing. It used to build its own billing on the wall
// clock, so the refund's ledger entry said "now" while the charge said
// the injected time.
func TestCompletionRefundUsesInjectedClock(t *testing.T) {
	rdb, _ := testredis.Client(t)
	ctx := context.Background()
	at := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC) // far from the wall clock
	now := func() time.Time { return at }
	c, err := BuildWith(config.Default(), rdb, quietLog(), Options{Executor: idleExecutor{}, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	const fam = "test_refund"
	c.Processor.Families[fam] = unknownAnswerer{}

	p := accountstest.PayAsYouGo(t, rdb, now, "refund clock", credits.Whole(100))
	b := jobs.NewBuilder(fam, 2)
	b.AddValid("a", "a", "a")
	b.AddValid("b", "b", "b")
	price := credits.Amount(200)
	j, err := c.Engine.Submit(ctx, p, b, jobs.Metering{Price: price, RefundOutcome: "unknown"})
	if err != nil {
		t.Fatal(err)
	}
	for s := 0; s < j.Shards; s++ {
		if err := c.Processor.ProcessShard(ctx, j.ID, s); err != nil {
			t.Fatalf("shard %d: %v", s, err)
		}
	}
	got, err := c.Engine.Store.Get(ctx, j.ID)
	if err != nil || got.Status != jobs.StatusCompleted || got.Refunded != 2*price {
		t.Fatalf("job %+v, %v: want completed with %v refunded", got, err, 2*price)
	}
	entries, err := billing.New(rdb, nil).Entries(ctx, p.Key.AccountID, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	refunds := 0
	for _, en := range entries {
		if en.Kind != "refund" && en.Kind != "charge" {
			continue
		}
		if en.Kind == "refund" {
			refunds++
		}
		if !en.Time.Equal(at) {
			t.Errorf("%s entry dated %v, want the injected clock's %v", en.Kind, en.Time, at)
		}
	}
	if refunds != 1 {
		t.Fatalf("%d refund entries, want 1: %+v", refunds, entries)
	}
}
