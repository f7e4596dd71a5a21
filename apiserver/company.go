package apiserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/enrich"
	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/jobs"
)

// getCompany is the single lookup (SPEC 4.6 leaves its shape to us): query
// network_url or domain, the same row shape as a bulk result, 1 credit for a
// valid input, nothing for an invalid one.
func (s *Server) getCompany(w http.ResponseWriter, r *http.Request) {
	p := PrincipalFrom(r.Context())
	q := r.URL.Query()
	var nu, dm *string
	var v apierr.Validation
	for _, f := range []struct {
		name string
		dst  **string
	}{{"network_url", &nu}, {"domain", &dm}} {
		if !q.Has(f.name) {
			continue
		}
		val := q.Get(f.name)
		if family.OverChars(val, enrich.MaxValueLen) {
			v.Add("query."+f.name, apierr.TypeStringTooLong, fmt.Sprintf("String should have at most %d characters", enrich.MaxValueLen))
			continue
		}
		*f.dst = &val
	}
	if nu == nil && dm == nil && v.Empty() {
		v.Add("query.network_url", apierr.TypeMissing, "Either network_url or domain is required")
	}
	if e := v.Err(); e != nil {
		apierr.Write(w, e)
		return
	}
	echo, in, reason := enrich.Classify(s.Company.Normalizer, nu, dm)
	row := jobs.Row{Echo: echo, Index: -1, Reason: reason}
	var ans *jobs.StoredAnswer
	if reason == "" {
		row.Index, row.First = 0, true
		chargeID, ok := s.newChargeID(w, r, p.Account.ID, "single-")
		if !ok {
			return
		}
		_, err := s.Billing.Charge(r.Context(), billing.Charge{AccountID: p.Account.ID, KeyID: p.Key.ID, ChargeID: chargeID,
			Amount: enrich.Price, Note: "company_enrichment single"})
		if s.singleChargeFailed(w, r, p.Account.ID, chargeID, err) {
			return
		}
		// Until the lookup has answered, every way out (an error, a panic
		// the recoverer turns into a 500) refunds the charge (SPEC 2.10:
		// a 500 refunds what it deducted).
		answered := false
		defer func() {
			if !answered {
				s.refundSingle(r.Context(), p.Account.ID, chargeID)
			}
		}()
		answers, err := s.Company.Answer(r.Context(), []string{in.Key})
		if err != nil {
			// The company store failed (SPEC 2.10: 500, the credit
			// refunded), not the service's own Redis: that would have
			// failed the charge first. No temporarily_unavailable here.
			s.serverError(w, r, err)
			return
		}
		answered = true
		ans = &jobs.StoredAnswer{Outcome: answers[0].Outcome, Data: string(answers[0].Data)}
		s.Metrics.CreditsCharged.Add(float64(enrich.Price) / credits.Scale)
	}
	var buf bytes.Buffer
	enrich.RenderRow(&buf, row, ans, enrich.Price.String())
	buf.WriteByte('\n')
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(buf.Bytes())
}

// refundSingle reverses a single lookup's charge. It is detached from the
// request: a client that hung up mid-lookup is still refunded.
func (s *Server) refundSingle(ctx context.Context, accountID, chargeID string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, err := s.Billing.Reverse(ctx, accountID, chargeID, "lookup failed")
	switch {
	case errors.Is(err, billing.ErrChargeNotFound):
		// An ambiguous charge that never ran: nothing to give back.
		s.Logger.Info("refund: no charge to reverse", "charge", chargeID)
	case err != nil:
		s.Logger.Error("refund failed", "charge", chargeID, "err", err)
	}
}
