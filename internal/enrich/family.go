package enrich

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/company/normalize"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/family/form"
	"github.com/bulkd/bulkd/internal/jobs"
)

// Company enrichment limits (SPEC 2.1, 4.1, section 8).
const (
	MaxRows           = 100_000
	MaxValueLen       = 2048
	maxReportedErrors = 50
)

// Price is 1 credit per distinct input.
var Price = credits.Whole(1)

// CompanyFamily is the company-enrichment family behind family.Family.
type CompanyFamily struct {
	*Answerer
	Normalizer *normalize.Normalizer
	price      string
}

var _ family.Family = (*CompanyFamily)(nil)

// NewFamily returns the family answering with a.
func NewFamily(n *normalize.Normalizer, a *Answerer) *CompanyFamily {
	return &CompanyFamily{Answerer: a, Normalizer: n, price: Price.String()}
}

// Name implements family.Family.
func (f *CompanyFamily) Name() string { return Family }

// MaxRows implements family.Family.
func (f *CompanyFamily) MaxRows() int { return MaxRows }

// Metering implements family.Family: Price per distinct input, nothing
// refunded.
func (f *CompanyFamily) Metering() family.Metering { return family.Metering{Price: Price} }

// Form implements family.Family.
func (f *CompanyFamily) Form() form.Form { return form.Company }

// Profile implements family.Family: the processor's defaults.
func (f *CompanyFamily) Profile() family.Profile { return family.Profile{} }

// BadJobID implements family.Family: "invalid parameters give 422" (SPEC 4.1).
// CSVColumns implements family.Family: the row's own fields, then the
// company data's, in the order the JSON rows carry them.
func (f *CompanyFamily) CSVColumns() []string { return companyCSVColumns }

var companyCSVColumns = func() []string {
	cols := []string{"result", "input", "input_url", "credits_consumed", "reason"}
	dec := json.NewDecoder(strings.NewReader(emptyData))
	_, _ = dec.Token() // {
	for dec.More() {
		k, _ := dec.Token()
		cols = append(cols, k.(string))
		var skip json.RawMessage
		_ = dec.Decode(&skip)
	}
	return cols
}()

func (f *CompanyFamily) BadJobID() *apierr.Error {
	return apierr.Unprocessable(apierr.Item{Loc: "path.job_id", Type: apierr.TypeUUIDParsing, Msg: "Input should be a valid UUID"})
}

// ResultsReady implements family.Family: results may be read while the job
// runs (pending rows keep their place).
func (f *CompanyFamily) ResultsReady(*jobs.Job) *apierr.Error { return nil }

// RenderRow implements family.Family.
func (f *CompanyFamily) RenderRow(buf *bytes.Buffer, row jobs.Row, ans *jobs.StoredAnswer) {
	RenderRow(buf, row, ans, f.price)
}

// SubmitResponse is SPEC 2.2.
type SubmitResponse struct {
	JobID           string         `json:"job_id"`
	Status          string         `json:"status"`
	TotalRows       int64          `json:"total_rows"`
	TotalInvalid    int64          `json:"total_invalid"`
	CreditsConsumed credits.Amount `json:"credits_consumed"`
}

// Submitted implements family.Family.
func (f *CompanyFamily) Submitted(j *jobs.Job) any {
	return SubmitResponse{JobID: j.ID, Status: "submitted", TotalRows: j.TotalRows, TotalInvalid: j.TotalInvalid, CreditsConsumed: j.Charge}
}

// StatusResponse is the company job status (SPEC leaves its fields to us;
// docs/api.md).
type StatusResponse struct {
	JobID           string           `json:"job_id"`
	Status          string           `json:"status"`
	TotalRows       int64            `json:"total_rows"`
	TotalProcessed  int64            `json:"total_processed"`
	TotalInvalid    int64            `json:"total_invalid"`
	TotalDistinct   int64            `json:"total_distinct"`
	CreditsConsumed credits.Amount   `json:"credits_consumed"`
	Summary         map[string]int64 `json:"summary"`
	CreatedAt       time.Time        `json:"created_at"`
	CompletedAt     *time.Time       `json:"completed_at"`
}

// Status implements family.Family.
func (f *CompanyFamily) Status(j *jobs.Job) any {
	st := StatusResponse{JobID: j.ID, Status: j.Status, TotalRows: j.TotalRows, TotalProcessed: j.RowsProcessed,
		TotalInvalid: j.TotalInvalid, TotalDistinct: j.Distinct, CreditsConsumed: j.Charge, CreatedAt: j.CreatedAt,
		Summary: map[string]int64{
			"total_found":       j.Outcomes[jobs.OutcomeFound],
			"total_not_found":   j.Outcomes[jobs.OutcomeNotFound],
			"total_error":       j.Outcomes[jobs.OutcomeError],
			"total_invalid_url": j.TotalInvalid,
			"total_pending":     j.Pending(),
		}}
	if !j.CompletedAt.IsZero() {
		c := j.CompletedAt
		st.CompletedAt = &c
	}
	return st
}

// Decode implements family.Family: {"input": [{network_url, domain}, ...]}
// read row by row, each classified as it arrives. It returns a 422 only in
// the cases SPEC 4.1 lists (and for JSON of the wrong shape); invalid rows
// are added to b as skipped.
func (f *CompanyFamily) Decode(r io.Reader, b *jobs.Builder) *apierr.Error {
	b.EchoTag = 1 // Echo's field tag: the engine caps only the value after it
	var v apierr.Validation
	tooMany := func() *apierr.Error {
		return apierr.Unprocessable(apierr.Item{Loc: "body.input", Type: apierr.TypeTooLong,
			Msg: fmt.Sprintf("List should have at most %d items", MaxRows)})
	}
	if e := apierr.ListBody(r, "input", MaxRows, tooMany, func(dec *json.Decoder, i int) *apierr.Error {
		return f.decodeRow(dec, i, b, &v)
	}); e != nil {
		return e
	}
	if !v.Empty() {
		return v.Err()
	}
	if b.Rows() == 0 {
		return apierr.Unprocessable(apierr.Item{Loc: "body.input", Type: apierr.TypeTooShort, Msg: "List should have at least 1 item after validation, not 0"})
	}
	if b.Distinct() == 0 {
		return apierr.Unprocessable(apierr.Item{Loc: "body.input", Type: apierr.TypeValueError,
			Msg: fmt.Sprintf("No valid row: all %d rows are invalid", b.Rows())})
	}
	return nil
}

type companyRow struct {
	NetworkURL *string `json:"network_url"`
	Domain     *string `json:"domain"`
}

func (f *CompanyFamily) decodeRow(dec *json.Decoder, i int, b *jobs.Builder, v *apierr.Validation) *apierr.Error {
	// One typed decode per row: the decoder scans the row once. A value of
	// the wrong type comes back as an UnmarshalTypeError naming the field
	// (or none when the row is not an object), and the decoder has moved
	// past the row either way.
	var row companyRow
	if ok, e := apierr.DecodeItem(dec, &row, v, maxReportedErrors, "body", "input", i); !ok {
		return e
	}
	ok1 := checkLength(row.NetworkURL, i, "network_url", v)
	ok2 := checkLength(row.Domain, i, "domain", v)
	if ok1 && ok2 && v.Empty() {
		echo, in, reason := Classify(f.Normalizer, row.NetworkURL, row.Domain)
		if reason != "" {
			b.AddInvalid(echo, reason)
		} else {
			b.AddValid(echo, in.Key, in.Key)
		}
	}
	return nil
}

// checkLength records a value over the length limit; the location is
// only built when there is a problem to report.
func checkLength(val *string, row int, field string, v *apierr.Validation) bool {
	if val == nil || !family.OverChars(*val, MaxValueLen) {
		return true
	}
	if len(v.Items) < maxReportedErrors {
		v.Add(apierr.Loc("body", "input", row, field), apierr.TypeStringTooLong,
			fmt.Sprintf("String should have at most %d characters", MaxValueLen))
	}
	return false
}
