package family

import (
	"context"
	"net/url"
	"time"

	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/credits"
)

// Single is a family's synchronous request for one input (GET
// /v1/company-enrichment, GET /v1/verify, POST /v1/email-lookup). The
// family validates the request and answers it; the API's one handler does
// the rest, the same for every family: the Idempotency-Key, the charge (the
// price in credits, or a unit of a quota), the call within its deadline,
// the refund of every answer that is not kept (an error, a panic, a 502),
// and writing the answer.
type Single interface {
	// Name is the family's name (the charge's note: "<name> single").
	Name() string
	// SinglePrice is what one answered request costs on a credit-metered
	// key.
	SinglePrice() credits.Amount
	// ParseSingle validates a request; a returned error is the 4xx to
	// answer, and nothing has been charged.
	ParseSingle(req SingleRequest) (SingleCall, *apierr.Error)
}

// SingleRequest is what the API gives ParseSingle.
type SingleRequest struct {
	Query url.Values
	// DecodeBody reads the request's JSON body into v, at most the
	// mount's body limit (the API's own errors: 400 malformed or empty,
	// 413, 422 wrong type).
	DecodeBody func(v any) *apierr.Error
}

// SingleCall is a validated single request.
type SingleCall struct {
	// Free: the input is answered without a charge and without work
	// (company enrichment: an input that is neither a network URL nor a
	// domain is answered invalid_url for nothing).
	Free bool
	// Timeout bounds Answer's context; 0: only the request's own.
	Timeout time.Duration
	// Answer answers the input within ctx. charged is what the request
	// cost in credits (the price on a credit-metered key; 0 when free or
	// paid with a quota unit): the answer's credits_consumed when kept. An
	// error is a 500 and the charge is refunded (SPEC 2.10).
	Answer func(ctx context.Context, charged credits.Amount) (SingleAnswer, error)
	// Subjects are the canonical subjects (EmailSubject, PersonSubject)
	// the input names. When one is on the suppression list (a person
	// erased on their request, docs/privacy.md) the API answers
	// Suppressed instead: nothing is charged and Answer is never called,
	// so no DNS query and no SMTP session.
	Subjects []string
	// Suppressed is the 200 answer for a suppressed input (the family's
	// outcome "suppressed", naming no one).
	Suppressed any
}

// SingleAnswer is a single request's answer.
type SingleAnswer struct {
	// Body is the 200 answer, written as JSON (a json.RawMessage as it is).
	Body any
	// Keep: the charge is kept. Otherwise it is refunded (email
	// verification never charges an unknown verdict).
	Keep bool
	// Failure, when set, is answered instead of Body, and the charge is
	// refunded: no answer could be given (502, the mail host did not
	// answer in time).
	Failure *apierr.Error
}
