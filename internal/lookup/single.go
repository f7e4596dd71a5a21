package lookup

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/finder"
)

// MaxSingleBody bounds a single lookup's body (the API mount's limit): three fields of at most 255
// characters (4 bytes each in UTF-8, 6 when JSON-escaped) and some JSON.
const MaxSingleBody = 16 << 10

// Single is the single email lookup (POST /v1/email-lookup and
// /v1/unlimited/email-lookup, docs/api.md): one person, answered within
// Timeout. Its finder may differ from the bulk family's (it may wait out a
// short greylist within the request).
type Single struct {
	Finder Finder
	// Timeout bounds one lookup (DNS, the catch-all probe and every
	// candidate's RCPT); past it the answer is 502 and nothing is charged.
	Timeout time.Duration
}

var _ family.Single = (*Single)(nil)

// SingleResponse is a single lookup's answer: a bulk lookup row plus what
// it cost (1 credit on a pay-as-you-go key, 0 on an unlimited key, whose
// lookups count against the monthly cap instead).
type SingleResponse struct {
	Response
	CreditsConsumed credits.Amount `json:"credits_consumed"`
}

// Name implements family.Single.
func (s *Single) Name() string { return Name }

// Words implements family.Worded: the quotas of the unlimited-plan mounts
// (SPEC section 8).
func (s *Single) Words() family.Words { return words }

// SinglePrice implements family.Single.
func (s *Single) SinglePrice() credits.Amount { return Price }

// ParseSingle implements family.Single: {first_name, last_name, domain},
// every field required, a string of at most 255 characters (422 at
// body.field). An answer that is undetermined (Undetermined) is a 502 and
// is not charged.
func (s *Single) ParseSingle(req family.SingleRequest) (family.SingleCall, *apierr.Error) {
	var row Row
	if e := req.DecodeBody(&row); e != nil {
		return family.SingleCall{}, e
	}
	var v apierr.Validation
	row.Validate(&v, 10, "body")
	if e := v.Err(); e != nil {
		return family.SingleCall{}, e
	}
	// An erased person is answered suppressed, not looked up and free; the
	// answer does not echo their name (as a bulk row's).
	sup := Response{Result: finder.Result{Status: family.OutcomeSuppressed, Substatus: family.OutcomeSuppressed}}
	return family.SingleCall{Timeout: s.Timeout, Subjects: []string{family.PersonSubject(*row.FirstName, *row.LastName, *row.Domain)},
		Suppressed: SingleResponse{Response: sup}, Answer: func(ctx context.Context, charged credits.Amount) (family.SingleAnswer, error) {
			res := s.Finder.Find(ctx, []finder.Person{row.Person()})[0]
			if Undetermined(res) {
				why := "the domain's mail server did not give a final answer (it may be greylisting; try again in a few minutes)"
				if ctx.Err() != nil {
					why = fmt.Sprintf("the lookup did not finish within %s (the mail host or DNS did not answer in time)", s.Timeout)
				}
				return family.SingleAnswer{Failure: apierr.New(http.StatusBadGateway, "The email lookup could not be completed: "+why+
					". Nothing was charged for it.")}, nil
			}
			return family.SingleAnswer{Keep: true, Body: SingleResponse{
				Response:        Response{Result: res, FirstName: *row.FirstName, LastName: *row.LastName, Domain: *row.Domain},
				CreditsConsumed: charged,
			}}, nil
		}}, nil
}
