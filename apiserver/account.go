package apiserver

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
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
	writeJSON(w, http.StatusOK, Credits(&p.Account))
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
	resp, err := s.Usage(r.Context(), &p.Account)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// Credits is GET /v1/credits's answer for an account (the dashboard shows
// the same).
func Credits(a *accounts.Account) CreditsResponse {
	return CreditsResponse{Credits: a.Balance, UserID: a.ID}
}

// Usage is GET /v1/unlimited/usage's answer for an account at the
// server's clock: the API and the dashboard show the same numbers.
func (s *Server) Usage(ctx context.Context, a *accounts.Account) (UsageResponse, error) {
	now := s.Now()
	limits := s.Plans[a.Plan]
	day := billing.DailyWindow(billing.BulkSearches, now)
	single := SingleLookupWindow(a, now)
	used, err := s.Billing.UsedIn(ctx, a.ID, day, single)
	if err != nil {
		return UsageResponse{}, err
	}
	resp := UsageResponse{
		Plan: string(a.Plan), PlanStatus: string(a.PlanState),
		BulkSearchesUsed: used[0], BulkSearchesLimit: limits.DailyBulkSearches,
		BulkSearchesRemaining: max(0, limits.DailyBulkSearches-used[0]),
		BulkSearchesResetAt:   day.Reset,
		SingleLookupsUsed:     used[1],
		SingleLookupsLimit:    limits.MonthlySingleLookups,
		SingleLookupsResetAt:  single.Reset,
	}
	if !a.PeriodEnd.IsZero() {
		pe := a.PeriodEnd
		resp.CurrentPeriodEnd = &pe
	}
	return resp, nil
}
