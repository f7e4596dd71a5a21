package apiserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/verification"
	"github.com/bulkd/bulkd/internal/verify"
)

// Single verification limits (SPEC 4.6: timeout 3..97 seconds).
const (
	verifyMinTimeout     = 3
	verifyMaxTimeout     = 97
	verifyDefaultTimeout = 30
)

// VerifyResponse is GET /v1/verify's answer: the verifier's result and
// what the call cost.
type VerifyResponse struct {
	verify.Result
	CreditsConsumed credits.Amount `json:"credits_consumed"`
}

// getVerify is the synchronous check (docs/api.md): 0.2 credits, taken
// upfront and refunded when the verdict is unknown (unknown is never
// charged) or when no verdict came within the timeout (502).
func (s *Server) getVerify(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var v apierr.Validation
	email := q.Get("email")
	switch {
	case !q.Has("email"):
		v.Add("query.email", apierr.TypeMissing, "Field required")
	case len([]rune(email)) < verification.MinLen:
		v.Add("query.email", apierr.TypeStringTooShort, fmt.Sprintf("String should have at least %d characters", verification.MinLen))
	case family.OverChars(email, verification.MaxLen):
		v.Add("query.email", apierr.TypeStringTooLong, fmt.Sprintf("String should have at most %d characters", verification.MaxLen))
	}
	timeout := verifyDefaultTimeout
	if q.Has("timeout") {
		n, err := strconv.Atoi(q.Get("timeout"))
		switch {
		case err != nil:
			v.Add("query.timeout", apierr.TypeIntParsing, "Input should be a valid integer")
		case n < verifyMinTimeout:
			v.Add("query.timeout", apierr.TypeGreaterThanEqual, fmt.Sprintf("Input should be greater than or equal to %d", verifyMinTimeout))
		case n > verifyMaxTimeout:
			v.Add("query.timeout", apierr.TypeLessThanEqual, fmt.Sprintf("Input should be less than or equal to %d", verifyMaxTimeout))
		default:
			timeout = n
		}
	}
	if e := v.Err(); e != nil {
		apierr.Write(w, e)
		return
	}
	p := PrincipalFrom(r.Context())
	chargeID, ok := s.newChargeID(w, r, p.Account.ID, "verify-")
	if !ok {
		return
	}
	_, err := s.Billing.Charge(r.Context(), billing.Charge{AccountID: p.Account.ID, KeyID: p.Key.ID, ChargeID: chargeID,
		Amount: verification.Price, Note: "email_verification single"})
	if s.singleChargeFailed(w, r, p.Account.ID, chargeID, err) {
		return
	}
	// Every way out that does not deliver a charged verdict refunds (a
	// panic included): SPEC 7, a 5xx refunds what it deducted.
	kept := false
	defer func() {
		if !kept {
			s.refundSingle(r.Context(), p.Account.ID, chargeID)
		}
	}()
	// The answer must be written within timeout: the check gets a little
	// less, the rest is for writing it.
	budget := time.Duration(timeout)*time.Second - 250*time.Millisecond
	ctx, cancel := context.WithTimeout(r.Context(), budget)
	defer cancel()
	res := s.Verification.SingleVerifier().Verify(ctx, []string{email})[0]
	if ctx.Err() != nil && res.Status == verify.StatusUnknown {
		apierr.Write(w, apierr.New(http.StatusBadGateway, fmt.Sprintf(
			"The verification could not be completed within %d seconds (the mail host or DNS did not answer in time). "+
				"The credits deducted for it have been refunded.", timeout)))
		return
	}
	out := VerifyResponse{Result: res}
	if res.Status != verify.StatusUnknown {
		kept = true
		out.CreditsConsumed = verification.Price
		s.Metrics.CreditsCharged.Add(float64(verification.Price) / credits.Scale)
	}
	b, err := json.Marshal(out)
	if err != nil {
		kept = false
		s.internalError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}
