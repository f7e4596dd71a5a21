package apiserver

import (
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/lookup"
	"github.com/bulkd/bulkd/internal/ratelimit"
)

// SingleLookup is what the single email lookups need (POST
// /v1/email-lookup and /v1/unlimited/email-lookup, docs/api.md): New
// mounts them as two Single mounts of a lookup.Single.
type SingleLookup struct {
	Finder lookup.Finder
	// Timeout bounds one lookup (DNS, the catch-all probe and every
	// candidate's RCPT); past it the answer is 502 and nothing is charged.
	Timeout time.Duration
	// AccountLimiter is the per-account requests-per-second limit of the
	// unlimited single lookups (SPEC section 8, quota rule 6), on top of
	// the per-key limit every endpoint has.
	AccountLimiter *ratelimit.Limiter
}

// mounts are the two single lookup endpoints.
func (l *SingleLookup) mounts() []Single {
	one := &lookup.Single{Finder: l.Finder, Timeout: l.Timeout}
	return []Single{
		{Method: "POST", Path: "/email-lookup", Family: one, Keys: Metered, ChargePrefix: "lookup-", MaxBody: lookup.MaxSingleBody},
		{Method: "POST", Path: "/unlimited/email-lookup", Family: one, Keys: UnlimitedPlan, ChargePrefix: "ulookup-", MaxBody: lookup.MaxSingleBody,
			AccountLimiter: l.AccountLimiter, AccountLimitKey: "lookup-acct:", AccountLimitWhat: "single lookups per second per account"},
	}
}

// SingleLookupWindow is the window the monthly single-lookup cap counts
// in: the account's billing period, or the UTC calendar month for an
// account whose plan has no period end.
func SingleLookupWindow(a *accounts.Account, now time.Time) billing.Window {
	end := a.PeriodEnd
	if end.IsZero() {
		n := now.UTC()
		end = time.Date(n.Year(), n.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	}
	return billing.PeriodWindow(billing.SingleLookups, end)
}
