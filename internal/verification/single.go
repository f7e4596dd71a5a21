package verification

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/jsonbody"
	"github.com/bulkd/bulkd/internal/verify"
)

// Single verification limits (SPEC 4.6: timeout 3..97 seconds).
const (
	SingleMinTimeout     = 3
	SingleMaxTimeout     = 97
	SingleDefaultTimeout = 30
)

// SingleResponse is GET /v1/verify's answer: the verifier's result and
// what the call cost.
type SingleResponse struct {
	verify.Result
	CreditsConsumed credits.Amount `json:"credits_consumed"`
}

var _ family.Single = (*Family)(nil)

// SinglePrice implements family.Single.
func (f *Family) SinglePrice() credits.Amount { return Price }

// ParseSingle implements family.Single: GET /v1/verify?email=&timeout=
// (docs/api.md), 0.2 credits, refunded when the verdict is unknown
// (unknown is never charged) or when no verdict came within the timeout
// (502).
func (f *Family) ParseSingle(req family.SingleRequest) (family.SingleCall, *apierr.Error) {
	q := req.Query
	var v apierr.Validation
	email := q.Get("email")
	switch {
	case !q.Has("email"):
		v.Add("query.email", apierr.TypeMissing, "Field required")
	case len([]rune(email)) < MinLen:
		v.Add("query.email", apierr.TypeStringTooShort, fmt.Sprintf("String should have at least %d characters", MinLen))
	case jsonbody.OverChars(email, MaxLen):
		v.Add("query.email", apierr.TypeStringTooLong, fmt.Sprintf("String should have at most %d characters", MaxLen))
	}
	timeout := SingleDefaultTimeout
	if q.Has("timeout") {
		n, err := strconv.Atoi(q.Get("timeout"))
		switch {
		case err != nil:
			v.Add("query.timeout", apierr.TypeIntParsing, "Input should be a valid integer")
		case n < SingleMinTimeout:
			v.Add("query.timeout", apierr.TypeGreaterThanEqual, fmt.Sprintf("Input should be greater than or equal to %d", SingleMinTimeout))
		case n > SingleMaxTimeout:
			v.Add("query.timeout", apierr.TypeLessThanEqual, fmt.Sprintf("Input should be less than or equal to %d", SingleMaxTimeout))
		default:
			timeout = n
		}
	}
	if e := v.Err(); e != nil {
		return family.SingleCall{}, e
	}
	return family.SingleCall{
		// An erased address is answered suppressed, unchecked and free;
		// the answer does not echo it.
		Subjects: f.Subjects(email),
		Suppressed: SingleResponse{Result: verify.Result{Status: family.OutcomeSuppressed, Reason: family.OutcomeSuppressed,
			CheckedAt: time.Now().UTC()}},
		// The answer must be written within timeout: the check gets a
		// little less, the rest is for writing it.
		Timeout: time.Duration(timeout)*time.Second - 250*time.Millisecond,
		Answer: func(ctx context.Context, charged credits.Amount) (family.SingleAnswer, error) {
			res := f.SingleVerifier().Verify(ctx, []string{email})[0]
			if ctx.Err() != nil && res.Status == verify.StatusUnknown {
				return family.SingleAnswer{Failure: apierr.New(http.StatusBadGateway, fmt.Sprintf(
					"The verification could not be completed within %d seconds (the mail host or DNS did not answer in time). "+
						"The credits deducted for it have been refunded.", timeout))}, nil
			}
			out := SingleResponse{Result: res}
			keep := res.Status != verify.StatusUnknown
			if keep {
				out.CreditsConsumed = charged
			}
			return family.SingleAnswer{Body: out, Keep: keep}, nil
		},
	}, nil
}
