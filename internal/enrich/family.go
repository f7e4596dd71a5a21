package enrich

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"

	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/company/normalize"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/family/form"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/jsonbody"
)

// Company enrichment limits (SPEC 2.1, 4.1, section 8): its Form's
// (form.Company), which the single request shares.
var (
	MaxRows     = form.Company.MaxRows
	MaxValueLen = form.Company.Fields[0].MaxLen
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

// Rows implements family.Family: one {network_url, domain} of {"input":
// [...]} (its Form, form.Company, says the rest: 1 to 100,000 rows, each
// value a string of at most 2,048 characters, 422 only in the cases SPEC
// 4.1 lists), classified as it arrives. An invalid row is kept, answered
// invalid_url at no cost; its echo's first byte tags which field it came
// from.
func (f *CompanyFamily) Rows() jsonbody.RowFunc {
	return func(vals []*string) jsonbody.Row {
		echo, in, reason := Classify(f.Normalizer, vals[0], vals[1])
		if reason != "" {
			return jsonbody.Row{Echo: echo, Invalid: reason, EchoTag: 1}
		}
		return jsonbody.Row{Echo: echo, Key: in.Key, Payload: in.Key, EchoTag: 1}
	}
}
