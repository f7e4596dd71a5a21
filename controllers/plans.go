package controllers

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
)

// planTTL is how long an account's plan is remembered: a plan changes
// rarely, and a Job created a minute after a change weighs its account
// by the old one at worst.
const planTTL = time.Minute

// planCache remembers accounts' plans, so that creating many Jobs of one
// account reads its plan once a minute.
type planCache struct {
	mu    sync.Mutex
	plans map[string]cachedPlan
}

type cachedPlan struct {
	plan string
	at   time.Time
}

// planOf is the account's unlimited plan when it is active ("" otherwise,
// or when it cannot be read: the account then weighs as pay-as-you-go and
// its job still runs).
func (r *BulkJobReconciler) planOf(ctx context.Context, account string) string {
	if r.Plans == nil || account == "" {
		return ""
	}
	now := r.Now()
	c := &r.plans
	c.mu.Lock()
	if p, ok := c.plans[account]; ok && now.Sub(p.at) < planTTL && now.Sub(p.at) >= 0 {
		c.mu.Unlock()
		return p.plan
	}
	c.mu.Unlock()
	plan := ""
	a, err := r.Plans.Account(ctx, account)
	switch {
	case err == nil && a.PlanActive(now):
		plan = string(a.Plan)
	case err != nil && !errors.Is(err, accounts.ErrNotFound):
		return "" // not remembered: read again next time
	}
	c.mu.Lock()
	if c.plans == nil || len(c.plans) > 100_000 {
		c.plans = map[string]cachedPlan{} // bounded: start over rather than grow
	}
	c.plans[account] = cachedPlan{plan, now}
	c.mu.Unlock()
	return plan
}
