// Package lookupapi is the email-lookup API as the test suites see it
// (test/e2e standalone, test/kube on envtest, test/cluster on a real
// cluster): the submitted row, the results row and the status answer.
package lookupapi

import (
	"time"

	"github.com/bulkd/bulkd/internal/credits"
)

// In is one submitted row.
type In struct {
	FirstName string `json:"first_name"`
	LastName  string `json:"last_name"`
	Domain    string `json:"domain"`
}

// Row is a results row; a single lookup's answer adds CreditsConsumed.
type Row struct {
	Status          string          `json:"status"`
	Substatus       string          `json:"substatus"`
	Email           *string         `json:"email"`
	EmailProvider   *string         `json:"email_provider"`
	MXRecord        *string         `json:"mx_record"`
	IsCatchAll      *bool           `json:"is_catch_all"`
	IsRole          *bool           `json:"is_role"`
	IsFree          *bool           `json:"is_free"`
	IsDisposable    *bool           `json:"is_disposable"`
	Confidence      *int            `json:"confidence"`
	FirstName       string          `json:"first_name"`
	LastName        string          `json:"last_name"`
	Domain          string          `json:"domain"`
	CreditsConsumed *credits.Amount `json:"credits_consumed"`
}

// Status is GET /v1/bulk-lookup/{job_id} (and its unlimited twin).
type Status struct {
	JobID           string           `json:"job_id"`
	Status          string           `json:"status"`
	TotalRows       int64            `json:"total_rows"`
	TotalProcessed  int64            `json:"total_processed"`
	Summary         map[string]int64 `json:"summary"`
	CreditsConsumed credits.Amount   `json:"credits_consumed"`
	CreatedAt       time.Time        `json:"created_at"`
	CompletedAt     *time.Time       `json:"completed_at"`
}
