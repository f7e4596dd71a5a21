package billing

import "github.com/bulkd/bulkd/internal/accounts"

// Quota window names; they are also the ledger unit of quota movements.
const (
	BulkSearches  = "bulk_searches"
	SingleLookups = "single_lookups"
)

// PlanLimits are the quotas of an unlimited plan.
type PlanLimits struct {
	// DailyBulkSearches is SPEC section 8's daily bulk search quota: one
	// search per unique row of an accepted unlimited bulk-lookup submission,
	// per account, per UTC day.
	DailyBulkSearches int64
	// MonthlySingleLookups caps POST /v1/unlimited/email-lookup per billing
	// period. The spec leaves the values to us (section 8, quota rule 5); the
	// defaults below are documented in docs/billing.md and configurable.
	MonthlySingleLookups int64
}

// Plans maps a plan to its limits.
type Plans map[accounts.Plan]PlanLimits

// DefaultPlans are the limits used unless configured otherwise.
func DefaultPlans() Plans {
	return Plans{
		accounts.PlanStarter:      {DailyBulkSearches: 10_000, MonthlySingleLookups: 20_000},
		accounts.PlanStandard:     {DailyBulkSearches: 30_000, MonthlySingleLookups: 60_000},
		accounts.PlanProfessional: {DailyBulkSearches: 75_000, MonthlySingleLookups: 150_000},
	}
}
