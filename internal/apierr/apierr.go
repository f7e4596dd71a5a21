// Package apierr is the error model of the HTTP API (SPEC 2.10 and section
// 7): every non-2xx answer is an *Error written as
// {"detail": ..., "code": ..., "errors": [...]}, with code present only
// where it adds a distinction the status does not carry and errors present
// only on 422.
package apierr

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Stable machine-readable codes (SPEC section 7).
const (
	CodeWrongKeyPlan         = "wrong_key_plan"
	CodeSubscriptionInactive = "subscription_inactive"
	CodeRateLimited          = "rate_limited"
	CodeDailyQuotaExceeded   = "daily_quota_exceeded"
	CodeMonthlyQuotaExceeded = "monthly_quota_exceeded"
	CodeBulkSearchesLimited  = "bulk_searches_limited"
	CodeEngineUnavailable    = "engine_unavailable"
	// CodeServerBusy: 503, the server is decoding as many request bodies
	// as its memory bound allows; nothing was read or charged, retry after
	// Retry-After (our addition: SPEC 7's only 503 is engine_unavailable).
	CodeServerBusy = "server_busy"
	// Per-account limits (docs/security.md; our additions, 429 like the
	// spec's bulk_searches_limited: nothing was charged or stored, and
	// Retry-After says when the same request may fit). The account's
	// request-rate ceiling answers the spec's rate_limited.
	CodeActiveJobsLimited  = "active_jobs_limited"
	CodeStoredBytesLimited = "stored_bytes_limited"
	CodeDraftsLimited      = "drafts_limited"
	CodeKeysLimited        = "keys_limited"
)

// Validation item types (the type field of errors[]).
const (
	TypeMissing          = "missing"
	TypeLessThanEqual    = "less_than_equal"
	TypeGreaterThanEqual = "greater_than_equal"
	TypeStringTooLong    = "string_too_long"
	TypeStringTooShort   = "string_too_short"
	TypeTooShort         = "too_short"
	TypeTooLong          = "too_long"
	TypeIntParsing       = "int_parsing"
	TypeStringType       = "string_type"
	TypeListType         = "list_type"
	TypeObjectType       = "dict_type"
	TypeValueError       = "value_error"
	TypeUUIDParsing      = "uuid_parsing"
	TypeLiteralError     = "literal_error"
)

// Item is one validation problem.
type Item struct {
	Loc  string `json:"loc"`
	Msg  string `json:"msg"`
	Type string `json:"type"`
}

// Error is an API error answer.
type Error struct {
	Status     int    `json:"-"`
	Detail     string `json:"detail"`
	Code       string `json:"code,omitempty"`
	Errors     []Item `json:"errors,omitempty"`
	RetryAfter int    `json:"-"` // seconds; sets Retry-After when > 0
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s", e.Status, e.Detail) }

// New builds an error with a status and detail.
func New(status int, detail string) *Error { return &Error{Status: status, Detail: detail} }

// WithCode builds an error with a stable code.
func WithCode(status int, code, detail string) *Error {
	return &Error{Status: status, Code: code, Detail: detail}
}

// Common answers.
var (
	ErrAPIKeyRequired = New(http.StatusUnauthorized, "An API key is required in the X-API-Key header.")
	ErrJobNotFound    = New(http.StatusNotFound, "Job not found")
	ErrNotFound       = New(http.StatusNotFound, "Not found")
	ErrInternal       = New(http.StatusInternalServerError, "Internal server error. Any credits deducted for this request have been refunded.")
)

// Validation collects 422 items.
type Validation struct{ Items []Item }

// Add records one problem.
func (v *Validation) Add(loc, typ, msg string) {
	v.Items = append(v.Items, Item{Loc: loc, Msg: msg, Type: typ})
}

// Empty reports whether nothing was recorded.
func (v *Validation) Empty() bool { return len(v.Items) == 0 }

// Err returns the 422 error, or nil when there is nothing to report. With a
// single problem the detail is that problem's message (SPEC 2.10).
func (v *Validation) Err() *Error {
	if len(v.Items) == 0 {
		return nil
	}
	return Unprocessable(v.Items...)
}

// Unprocessable builds a 422 from items.
func Unprocessable(items ...Item) *Error {
	detail := fmt.Sprintf("Request validation failed: %d problems", len(items))
	if len(items) == 1 {
		detail = items[0].Msg
	}
	return &Error{Status: http.StatusUnprocessableEntity, Detail: detail, Errors: items}
}

// Loc joins path parts into a dot-separated location: Loc("body","input",3,"domain").
func Loc(parts ...any) string {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('.')
		}
		switch v := p.(type) {
		case string:
			b.WriteString(v)
		case int:
			b.WriteString(strconv.Itoa(v))
		default:
			fmt.Fprint(&b, v)
		}
	}
	return b.String()
}

// Write sends e as the response.
func Write(w http.ResponseWriter, e *Error) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(e)
}
