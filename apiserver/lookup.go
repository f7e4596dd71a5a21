package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/finder"
	"github.com/bulkd/bulkd/internal/lookup"
	"github.com/bulkd/bulkd/internal/ratelimit"
)

// SingleLookup is what the single email lookups need (POST
// /v1/email-lookup and /v1/unlimited/email-lookup, docs/api.md).
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

// maxLookupBody bounds a single lookup's body: three fields of at most 255
// characters (4 bytes each in UTF-8, 6 when JSON-escaped) and some JSON.
const maxLookupBody = 16 << 10

// LookupResponse is a single lookup's answer: a bulk lookup row plus what
// it cost (1 credit on a pay-as-you-go key, 0 on an unlimited key, whose
// lookups count against the monthly cap instead).
type LookupResponse struct {
	lookup.Response
	CreditsConsumed credits.Amount `json:"credits_consumed"`
}

// postEmailLookup is the credit-metered single lookup: 1 credit, taken
// upfront and refunded when no answer can be given (502) or the server
// fails (500).
func (s *Server) postEmailLookup(w http.ResponseWriter, r *http.Request) {
	row, e := s.decodeLookup(w, r)
	if e != nil {
		apierr.Write(w, e)
		return
	}
	p := PrincipalFrom(r.Context())
	chargeID, ok := s.newChargeID(w, r, p.Account.ID, "lookup-")
	if !ok {
		return
	}
	_, err := s.Billing.Charge(r.Context(), billing.Charge{AccountID: p.Account.ID, KeyID: p.Key.ID, ChargeID: chargeID,
		Amount: lookup.Price, Note: "email_lookup single"})
	if s.singleChargeFailed(w, r, p.Account.ID, chargeID, err) {
		return
	}
	s.answerLookup(w, r, p, row, chargeID, lookup.Price)
}

// postUnlimitedEmailLookup is the unlimited plan's single lookup: the
// account's per-second limit, then one lookup from the monthly cap of the
// billing period (released when no answer can be given).
func (s *Server) postUnlimitedEmailLookup(w http.ResponseWriter, r *http.Request) {
	row, e := s.decodeLookup(w, r)
	if e != nil {
		apierr.Write(w, e)
		return
	}
	p := PrincipalFrom(r.Context())
	if s.Lookup.AccountLimiter != nil {
		rl, err := s.Lookup.AccountLimiter.Allow(r.Context(), "lookup-acct:"+p.Account.ID)
		if err != nil {
			s.internalError(w, r, err)
			return
		}
		if !rl.Allowed {
			s.rateLimited(w, rl, "single lookups per second per account")
			return
		}
	}
	chargeID, ok := s.newChargeID(w, r, p.Account.ID, "ulookup-")
	if !ok {
		return
	}
	_, err := s.Billing.Consume(r.Context(), billing.Consumption{AccountID: p.Account.ID, KeyID: p.Key.ID, ChargeID: chargeID,
		Window: SingleLookupWindow(&p.Account, s.Now()), N: 1, Limit: s.Plans[p.Account.Plan].MonthlySingleLookups})
	if s.singleChargeFailed(w, r, p.Account.ID, chargeID, err) {
		return
	}
	s.answerLookup(w, r, p, row, chargeID, 0)
}

// singleChargeFailed answers a single request's failed charge (or quota
// consumption) as chargeFailed does, after reversing it when the failure
// leaves open whether the charge script ran: a timeout or a dropped
// connection may come after Redis ran it, and then the account paid for a
// 500. The reversal is detached from the request and idempotent; it finds
// nothing when the script never ran, and a script that runs after it
// (still queued when the reply timed out) finds the reversal's tombstone
// and charges nothing (internal/billing). A clean refusal (403, 429) took
// nothing and is not reversed. Submit does the same for bulk submissions.
func (s *Server) singleChargeFailed(w http.ResponseWriter, r *http.Request, accountID, chargeID string, err error) bool {
	if err != nil && !chargeRefused(err) {
		s.refundSingle(r.Context(), accountID, chargeID)
	}
	return s.chargeFailed(w, r, err)
}

// chargeRefused reports whether a charge error is the script's own
// refusal, which moved nothing.
func chargeRefused(err error) bool {
	var ie *billing.InsufficientError
	var qe *billing.QuotaError
	return errors.As(err, &ie) || errors.As(err, &qe) ||
		errors.Is(err, billing.ErrAccountNotFound) || errors.Is(err, billing.ErrDuplicateCharge)
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

func (s *Server) decodeLookup(w http.ResponseWriter, r *http.Request) (lookup.Row, *apierr.Error) {
	var row lookup.Row
	if e := decodeJSON(w, r, min(s.MaxBodyBytes, maxLookupBody), &row); e != nil {
		return row, e
	}
	var v apierr.Validation
	row.Validate(&v, 10, "body")
	return row, v.Err()
}

// answerLookup runs the finder for one person whose charge (credits or a
// quota unit) is chargeID, and answers. Every way out without an answer
// (502, a 500, a panic) reverses the charge: SPEC 7.
func (s *Server) answerLookup(w http.ResponseWriter, r *http.Request, p *accounts.Principal, row lookup.Row, chargeID string, price credits.Amount) {
	kept := false
	defer func() {
		if !kept {
			s.refundSingle(r.Context(), p.Account.ID, chargeID)
		}
	}()
	ctx, cancel := context.WithTimeout(r.Context(), s.Lookup.Timeout)
	defer cancel()
	res := s.Lookup.Finder.Find(ctx, []finder.Person{row.Person()})[0]
	if lookup.Undetermined(res) {
		why := "the domain's mail server did not give a final answer (it may be greylisting; try again in a few minutes)"
		if ctx.Err() != nil {
			why = fmt.Sprintf("the lookup did not finish within %s (the mail host or DNS did not answer in time)", s.Lookup.Timeout)
		}
		apierr.Write(w, apierr.New(http.StatusBadGateway, "The email lookup could not be completed: "+why+
			". Nothing was charged for it."))
		return
	}
	kept = true
	if price > 0 {
		s.Metrics.CreditsCharged.Add(float64(price) / credits.Scale)
	}
	writeJSON(w, http.StatusOK, LookupResponse{
		Response:        lookup.Response{Result: res, FirstName: *row.FirstName, LastName: *row.LastName, Domain: *row.Domain},
		CreditsConsumed: price,
	})
}
