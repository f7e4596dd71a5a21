package apiserver

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/ratelimit"
)

// Single mounts a family's single-input endpoint (Method Path under /v1).
// Every single endpoint is served by the one handler below: the family
// validates and answers (family.Single); the charge, the deadline, the
// refunds and the writing are the same for all.
type Single struct {
	Method string // GET or POST
	Path   string // e.g. "/verify", under /v1
	Family family.Single
	// Keys is which keys the endpoint takes, and so how it is paid for:
	// Metered, the family's SinglePrice in credits; UnlimitedPlan, one
	// unit of the plan's monthly single-lookup cap.
	Keys KeyKind
	// ChargePrefix starts the request's charge id ("verify-"): the ledger
	// tells the endpoints apart by it.
	ChargePrefix string
	// MaxBody bounds the request body (admission and decoding); 0: the
	// server's MaxBodyBytes.
	MaxBody int64
	// AccountLimiter, when set, limits an account's requests a second
	// across its keys (keyed AccountLimitKey + account id), on top of the
	// per-key limit; AccountLimitWhat names the limit in the 429.
	AccountLimiter   *ratelimit.Limiter
	AccountLimitKey  string
	AccountLimitWhat string
}

// mountSingles mounts the single endpoints that take keys of kind k.
func (s *Server) mountSingles(g chi.Router, k KeyKind) {
	for _, m := range s.Singles {
		if m.Keys == k {
			g.With(s.idempotent).Method(m.Method, m.Path, s.single(m))
		}
	}
}

// singleMaxBody is the body limit of single mount m.
func (s *Server) singleMaxBody(m Single) int64 {
	if m.MaxBody > 0 {
		return min(s.MaxBodyBytes, m.MaxBody)
	}
	return s.MaxBodyBytes
}

// single is the handler of every single endpoint: validate, charge, call
// within the family's deadline, refund unless the answer is kept, write.
func (s *Server) single(m Single) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		call, e := m.Family.ParseSingle(family.SingleRequest{Query: r.URL.Query(),
			DecodeBody: func(v any) *apierr.Error { return decodeJSON(w, r, s.singleMaxBody(m), v) }})
		if e != nil {
			apierr.Write(w, e)
			return
		}
		if call.Free {
			ans, err := call.Answer(r.Context(), 0)
			if err != nil {
				s.serverError(w, r, err)
				return
			}
			s.writeSingle(w, r, ans.Body)
			return
		}
		p := PrincipalFrom(r.Context())
		if m.AccountLimiter != nil {
			rl, err := m.AccountLimiter.Allow(r.Context(), m.AccountLimitKey+p.Account.ID)
			if err != nil {
				s.internalError(w, r, err)
				return
			}
			if !rl.Allowed {
				s.rateLimited(w, rl, m.AccountLimitWhat)
				return
			}
		}
		if s.singleSuppressed(w, r, call) {
			return
		}
		chargeID, ok := s.newChargeID(w, r, p.Account.ID, m.ChargePrefix)
		if !ok {
			return
		}
		charged, err := s.chargeSingle(r.Context(), p, m, chargeID)
		if s.singleChargeFailed(w, r, m.Family.Name(), p.Account.ID, chargeID, err) {
			return
		}
		// Every way out that does not deliver a kept answer (an error, a
		// 502, a panic the recoverer turns into a 500) refunds: SPEC 2.10
		// and 7, a 5xx refunds what it deducted.
		kept := false
		defer func() {
			if !kept {
				s.refundSingle(r.Context(), m.Family.Name(), p.Account.ID, chargeID)
			}
		}()
		ctx := r.Context()
		if call.Timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, call.Timeout)
			defer cancel()
		}
		ans, err := call.Answer(ctx, charged)
		if err != nil {
			// The family's own backend failed (a company store, say), not
			// the service's Redis: that would have failed the charge first.
			// No temporarily_unavailable here.
			s.serverError(w, r, err)
			return
		}
		if ans.Failure != nil {
			apierr.Write(w, ans.Failure)
			return
		}
		b, err := singleBody(ans.Body)
		if err != nil {
			s.serverError(w, r, err)
			return
		}
		kept = ans.Keep
		if kept {
			markKept(r)
		}
		if kept && charged > 0 {
			s.Metrics.CreditsCharged.Add(float64(charged) / credits.Scale)
		}
		writeSingleBytes(w, b)
	}
}

// singleSuppressed answers a call whose input names a person on the
// suppression list (docs/privacy.md) with the family's suppressed answer,
// before anything is charged or looked up, and reports whether it did. A
// list that cannot be read is a 503: fail closed, as a bulk submission.
func (s *Server) singleSuppressed(w http.ResponseWriter, r *http.Request, call family.SingleCall) bool {
	if len(call.Subjects) == 0 || call.Suppressed == nil {
		return false
	}
	yes, err := s.Suppress.Any(r.Context(), call.Subjects...)
	if err != nil {
		s.Logger.Error("suppression list unavailable", "err", err)
		apierr.Write(w, errTemporarilyUnavailable())
		return true
	}
	if yes {
		s.writeSingle(w, r, call.Suppressed)
	}
	return yes
}

// chargeSingle takes a single request's price (credits on a metered
// mount, a unit of the monthly single-lookup cap on an unlimited-plan
// one) and returns the credits it took.
func (s *Server) chargeSingle(ctx context.Context, p *accounts.Principal, m Single, chargeID string) (credits.Amount, error) {
	if m.Keys == UnlimitedPlan {
		w := SingleLookupWindow(&p.Account, s.Now())
		w.Label = family.WordsOf(m.Family).SingleQuota
		_, err := s.Billing.Consume(ctx, billing.Consumption{AccountID: p.Account.ID, KeyID: p.Key.ID, ChargeID: chargeID,
			Window: w, N: 1, Limit: s.Plans[p.Account.Plan].MonthlySingleLookups})
		return 0, err
	}
	price := m.Family.SinglePrice()
	_, err := s.Billing.Charge(ctx, billing.Charge{AccountID: p.Account.ID, KeyID: p.Key.ID, ChargeID: chargeID,
		Amount: price, Note: m.Family.Name() + " single"})
	return price, err
}

// singleBody is an answer's JSON: a json.RawMessage as it is, anything
// else marshalled.
func singleBody(v any) ([]byte, error) {
	if raw, ok := v.(json.RawMessage); ok {
		return raw, nil
	}
	return json.Marshal(v)
}

// writeSingle writes a free answer (nothing to refund if it fails).
func (s *Server) writeSingle(w http.ResponseWriter, r *http.Request, v any) {
	b, err := singleBody(v)
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	writeSingleBytes(w, b)
}

func writeSingleBytes(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(b, '\n'))
}

// SingleLookupWindow is the window the monthly single-lookup cap counts
// in (the cap every UnlimitedPlan single mount draws on): the account's
// billing period, or the UTC calendar month for an account whose plan has
// no period end.
func SingleLookupWindow(a *accounts.Account, now time.Time) billing.Window {
	end := a.PeriodEnd
	if end.IsZero() {
		n := now.UTC()
		end = time.Date(n.Year(), n.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	}
	return billing.PeriodWindow(billing.SingleLookups, end)
}
