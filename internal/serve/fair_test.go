package serve

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/testredis"
)

// --fair-weights gives an account its active plan's weight, payg's
// otherwise (no plan, a lapsed plan, an unknown account); the other
// --fair-* flags reach the executor; a bad spec stops the start.
func TestFairnessFlags(t *testing.T) {
	rdb, _ := testredis.Client(t)
	ctx := context.Background()
	st := accounts.NewStore(rdb, nil)
	mk := func(name string, plan accounts.Plan, state accounts.PlanState) string {
		a, err := st.CreateAccount(ctx, name, credits.Whole(1))
		if err != nil {
			t.Fatal(err)
		}
		if plan != accounts.PlanNone {
			if err := st.SetPlan(ctx, a.ID, plan, state, time.Now().Add(24*time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
		return a.ID
	}
	payg := mk("payg", accounts.PlanNone, "")
	pro := mk("pro", accounts.PlanProfessional, accounts.StateActive)
	lapsed := mk("lapsed", accounts.PlanProfessional, accounts.StateLapsed)
	starter := mk("starter", accounts.PlanStarter, accounts.StateActive)

	cfg := config.Default()
	cfg.FairWeights, cfg.FairAccountWorkers, cfg.FairPreempt, cfg.ShardSize = "PAYG=2,professional=5", 3, false, 700
	l := jobs.NewLocal(nil, 4, slog.Default())
	if err := configureFairness(l, cfg, st, nil); err != nil {
		t.Fatal(err)
	}
	if l.AccountWorkers != 3 || l.Preempt || l.Quantum != 700 {
		t.Errorf("executor settings %d %v %d", l.AccountWorkers, l.Preempt, l.Quantum)
	}
	for id, want := range map[string]int{payg: 2, pro: 5, lapsed: 2, starter: 1, "acct_nobody": 2} {
		if got := l.Weight(ctx, id); got != want {
			t.Errorf("weight of %s: %d, want %d", id, got, want)
		}
	}

	// Every weight 1 (the default): no lookups at all.
	l = jobs.NewLocal(nil, 4, slog.Default())
	if err := configureFairness(l, config.Default(), st, nil); err != nil || l.Weight != nil || !l.Preempt {
		t.Errorf("defaults: err %v, weight func set %v, preempt %v", err, l.Weight != nil, l.Preempt)
	}
	for _, bad := range []string{"gold=2", "payg=0", "starter"} {
		cfg.FairWeights = bad
		if err := configureFairness(jobs.NewLocal(nil, 1, nil), cfg, st, nil); err == nil {
			t.Errorf("--fair-weights %q accepted", bad)
		}
	}
}
