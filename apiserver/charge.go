package apiserver

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/billing"
)

// The answers to charges, for the bulk submissions (bulk.go) and the
// single requests (single.go) alike.

// chargeFailed counts a charge (a submission's or a single lookup's) by
// outcome and answers a failed one: 403 when the account cannot pay, 500
// otherwise (a submission has reversed its charge by then). It reports
// whether it answered.
func (s *Server) chargeFailed(w http.ResponseWriter, r *http.Request, err error) bool {
	e := s.chargeError(r.Context(), err)
	if e != nil {
		apierr.Write(w, e)
	}
	return e != nil
}

// chargeError counts a charge by outcome and returns chargeFailed's
// answer to a failed one; nil when err is nil.
func (s *Server) chargeError(ctx context.Context, err error) *apierr.Error {
	if err == nil {
		s.Metrics.ChargesByOutcome.WithLabelValues("ok").Inc()
		return nil
	}
	if e := s.chargeRefused(err); e != nil {
		return e
	}
	s.Metrics.ChargesByOutcome.WithLabelValues("failed").Inc()
	return s.internalAPIError(ctx, err)
}

// chargeRefused is the answer to a charge the account cannot pay (403
// insufficient credits, 429 quota) or a submission past an account limit
// (429, limits.go), counted; nil for any other error.
func (s *Server) chargeRefused(err error) *apierr.Error {
	var ie *billing.InsufficientError
	if errors.As(err, &ie) {
		s.Metrics.ChargesByOutcome.WithLabelValues("insufficient").Inc()
		return apierr.New(http.StatusForbidden, ie.Error())
	}
	var qe *billing.QuotaError
	if errors.As(err, &qe) {
		s.Metrics.ChargesByOutcome.WithLabelValues("quota").Inc()
		return quotaExceeded(qe)
	}
	var le *accounts.LimitError
	if errors.As(err, &le) {
		// Refused before the charge (jobs.Engine.Submit): nothing taken.
		s.Metrics.ChargesByOutcome.WithLabelValues("limit").Inc()
		return LimitAPIError(le)
	}
	return nil
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
func (s *Server) singleChargeFailed(w http.ResponseWriter, r *http.Request, fam, accountID, chargeID string, err error) bool {
	if err != nil && !chargeMovedNothing(err) {
		s.refundSingle(r.Context(), fam, accountID, chargeID)
	}
	return s.chargeFailed(w, r, err)
}

// chargeMovedNothing reports whether a charge error is the charge
// script's own refusal, which moved nothing (so there is nothing to
// reverse); chargeRefused is the answer to one.
func chargeMovedNothing(err error) bool {
	var ie *billing.InsufficientError
	var qe *billing.QuotaError
	return errors.As(err, &ie) || errors.As(err, &qe) ||
		errors.Is(err, billing.ErrAccountNotFound) || errors.Is(err, billing.ErrDuplicateCharge)
}

// refundSingle reverses a single request of family fam's charge. It is
// detached from the request: a client that hung up mid-call is still
// refunded. The ledger note names the family as the charge's does
// ("<family> single").
func (s *Server) refundSingle(ctx context.Context, fam, accountID, chargeID string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, err := s.Billing.Reverse(ctx, accountID, chargeID, fam+" single refunded")
	switch {
	case errors.Is(err, billing.ErrChargeNotFound):
		// An ambiguous charge that never ran: nothing to give back.
		s.Logger.Info("refund: no charge to reverse", "charge", chargeID)
	case err != nil:
		s.Logger.Error("refund failed", "charge", chargeID, "err", err)
	}
}
