package serve

import (
	"context"
	"fmt"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/fairshare"
	"github.com/bulkd/bulkd/internal/jobs"
)

// fairPlans are the names --fair-weights takes: payg (no active unlimited
// plan, as --spam-check-allowances says it) and the unlimited plans.
var fairPlans = []string{"payg", string(accounts.PlanStarter), string(accounts.PlanStandard), string(accounts.PlanProfessional)}

// FairWeights parses --fair-weights: a weight per plan name, 1 unless given.
func FairWeights(spec string) (map[string]int, error) {
	w, err := fairshare.ParseWeights(spec, fairPlans, nil)
	if err != nil {
		return nil, fmt.Errorf("--fair-weights: %w", err)
	}
	return w, nil
}

// configureFairness applies the --fair-* flags to the standalone executor.
// An account's weight is its plan's while the plan is active, payg's
// otherwise; with every weight 1 no account is read at all.
func configureFairness(l *jobs.Local, cfg config.Config, st *accounts.Store, now func() time.Time) error {
	w, err := FairWeights(cfg.FairWeights)
	if err != nil {
		return err
	}
	// A turn is one shard per unit of weight (shards are sized in distinct
	// inputs, the unit the turns are counted in).
	l.AccountWorkers, l.Preempt, l.Quantum = cfg.FairAccountWorkers, cfg.FairPreempt, int64(cfg.ShardSize)
	flat := true
	for _, v := range w {
		flat = flat && v == 1
	}
	if flat {
		return nil
	}
	if now == nil {
		now = time.Now
	}
	l.Weight = func(ctx context.Context, accountID string) int {
		a, err := st.Account(ctx, accountID)
		if err != nil {
			return w["payg"] // unknown for now: looked up again within a minute
		}
		if a.PlanActive(now()) {
			if v, ok := w[string(a.Plan)]; ok {
				return v
			}
		}
		return w["payg"]
	}
	return nil
}
