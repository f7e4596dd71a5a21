package apiserver

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// CreditsResponse is SPEC 2.9.
type CreditsResponse struct {
	Credits credits.Amount `json:"credits"`
	UserID  string         `json:"user_id"`
}

// getCredits answers from the balance read atomically with the key during
// authentication: one Redis round trip fewer on the hottest read.
func (s *Server) getCredits(w http.ResponseWriter, r *http.Request) {
	p := PrincipalFrom(r.Context())
	writeJSON(w, http.StatusOK, CreditsResponse{Credits: p.Account.Balance, UserID: p.Account.ID})
}

// UsageResponse is GET /v1/unlimited/usage. SPEC 4.5 names two fields; the
// others are ours (docs/api.md).
type UsageResponse struct {
	Plan                  string     `json:"plan"`
	PlanStatus            string     `json:"plan_status"`
	BulkSearchesUsed      int64      `json:"bulk_searches_used"`
	BulkSearchesLimit     int64      `json:"bulk_searches_limit"`
	BulkSearchesRemaining int64      `json:"bulk_searches_remaining"`
	BulkSearchesResetAt   time.Time  `json:"bulk_searches_reset_at"`
	SingleLookupsUsed     int64      `json:"single_lookups_used"`
	SingleLookupsLimit    int64      `json:"single_lookups_limit"`
	SingleLookupsResetAt  time.Time  `json:"single_lookups_reset_at"`
	CurrentPeriodEnd      *time.Time `json:"current_period_end"`
}

func (s *Server) getUsage(w http.ResponseWriter, r *http.Request) {
	p := PrincipalFrom(r.Context())
	now := s.Now()
	limits := s.Plans[p.Account.Plan]
	day := billing.DailyWindow(billing.BulkSearches, now)
	single := SingleLookupWindow(&p.Account, now)
	used, err := s.Billing.UsedIn(r.Context(), p.Account.ID, day, single)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	resp := UsageResponse{
		Plan: string(p.Account.Plan), PlanStatus: string(p.Account.PlanState),
		BulkSearchesUsed: used[0], BulkSearchesLimit: limits.DailyBulkSearches,
		BulkSearchesRemaining: max(0, limits.DailyBulkSearches-used[0]),
		BulkSearchesResetAt:   day.Reset,
		SingleLookupsUsed:     used[1],
		SingleLookupsLimit:    limits.MonthlySingleLookups,
		SingleLookupsResetAt:  single.Reset,
	}
	if !p.Account.PeriodEnd.IsZero() {
		pe := p.Account.PeriodEnd
		resp.CurrentPeriodEnd = &pe
	}
	writeJSON(w, http.StatusOK, resp)
}
