// Package fourthfamily is a fourth job family that lives only here: a toy
// phone lookup (a number in, its carrier and line type out, from a fixed
// directory). It is the proof of the family contract (internal/family):
// everything bulkd does with a family (bulk submission and results over
// the HTTP API, its single request, BulkJobs on Kubernetes, webhooks, the
// dashboard's new-job form) works for it with nothing edited outside this
// directory; its registration is the one Extra below, which for a family
// of bulkd itself is one entry in internal/serve's buildFamilies.
//
// Tests only.
package fourthfamily

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/bulkd/bulkd/apiserver"
	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/family/form"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/jsonbody"
	"github.com/bulkd/bulkd/internal/serve"
)

// Name is the family's name (the BulkJob's spec.family).
const Name = "phone_lookup"

// Limits and price.
const (
	MaxRows   = 1_000
	MaxPhone  = 32
	OutFound  = "found"
	OutAbsent = "not_found"
	// OutUnverified is the error outcome of a failed shard's rows: a
	// name no built-in family uses, so a test can tell it came from here.
	OutUnverified = "unverified"
)

// Price is half a credit per distinct number.
var Price = credits.Amount(credits.Scale / 2)

// Line is a directory entry.
type Line struct {
	Carrier  string `json:"carrier"`
	LineType string `json:"line_type"`
}

// Directory is the toy data: numbers (digits only) and their lines.
var Directory = map[string]Line{
	"15550100": {Carrier: "Acme Mobile", LineType: "mobile"},
	"15550101": {Carrier: "Initech Telecom", LineType: "landline"},
	"15550102": {Carrier: "Acme Mobile", LineType: "voip"},
}

// Family is the phone lookup family.
type Family struct {
	// Fail, when set, makes Answer fail for a number (a shard whose
	// processor keeps failing).
	Fail func(number string) bool
}

var (
	_ family.Family = (*Family)(nil)
	_ family.Single = (*Family)(nil)
)

// Extra is the family's registration: the family (the API mounts the bulk
// endpoint its Form lists) and its single request, as
// serve.Options.Families (and serve.NewProcessor) take it.
func Extra(f *Family) serve.Extra {
	return serve.Extra{Family: f,
		Singles: []apiserver.Single{{Method: http.MethodGet, Path: "/phone-lookup", Family: f, Keys: apiserver.Metered, ChargePrefix: "phone-"}},
	}
}

// Form is the family's form: the dashboard's new-job page offers it, and
// the API mounts the bulk endpoint it lists.
var Form = form.Form{
	Label: "Phone lookup",
	Hint:  "Carrier and line type of phone numbers. 0.5 credits per distinct number.",
	Fields: []form.Field{{Name: "phone", Label: "Phone number", MaxLen: MaxPhone,
		Aliases: []string{"phone", "phonenumber", "mobile", "tel", "telephone"}}},
	ListField:  "input",
	Bulk:       []form.Mount{{Name: "phone", Path: "/v1/phone-lookup/bulk"}},
	MaxRows:    MaxRows,
	Dedupe:     true,
	TotalField: "total_rows",
	Final:      "completed",
	TooMany:    form.Refusal{Msg: "Too many numbers: at most {max}."},
	Empty:      form.Refusal{Msg: "The input list is empty."},
}

func (f *Family) Name() string            { return Name }
func (f *Family) Form() form.Form         { return Form }
func (f *Family) Profile() family.Profile { return family.Profile{} }
func (f *Family) Metering() family.Metering {
	return family.Metering{Price: Price}
}
func (f *Family) CSVColumns() []string { return []string{"phone", "status", "carrier", "line_type"} }
func (f *Family) BadJobID() *apierr.Error {
	return apierr.New(http.StatusBadRequest, "job_id is not a valid UUID.")
}
func (f *Family) ResultsReady(*jobs.Job) *apierr.Error { return nil }

// Digits is a number's dedupe key: its digits.
func Digits(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsDigit(r) {
			return r
		}
		return -1
	}, s)
}

// Rows implements family.Family: one {"phone": "..."} of {"input": [...]}
// (its Form says the rest), deduplicated on its digits.
func (f *Family) Rows() jsonbody.RowFunc {
	return func(vals []*string) jsonbody.Row {
		if vals[0] == nil || Digits(*vals[0]) == "" {
			return jsonbody.Row{Problem: &jsonbody.Problem{Field: "phone", Type: apierr.TypeMissing, Msg: "A phone number is required"}}
		}
		d := Digits(*vals[0])
		return jsonbody.Row{Echo: *vals[0], Key: d, Payload: d}
	}
}

// Answer implements jobs.Answerer.
func (f *Family) Answer(_ context.Context, payloads []string) ([]jobs.Answer, error) {
	out := make([]jobs.Answer, len(payloads))
	for i, p := range payloads {
		if f.Fail != nil && f.Fail(p) {
			return nil, fmt.Errorf("phone lookup: %s fails", p)
		}
		out[i] = answer(p)
	}
	return out, nil
}

func answer(number string) jobs.Answer {
	l, ok := Directory[number]
	if !ok {
		return jobs.Answer{Outcome: OutAbsent, Data: []byte(`{}`)}
	}
	data, _ := json.Marshal(l)
	return jobs.Answer{Outcome: OutFound, Data: data}
}

// ErrorAnswer implements jobs.Answerer.
func (f *Family) ErrorAnswer() jobs.Answer {
	return jobs.Answer{Outcome: OutUnverified, Data: []byte(`{}`)}
}

// Row is a results row.
type Row struct {
	Phone    string `json:"phone"`
	Status   string `json:"status"`
	Carrier  string `json:"carrier,omitempty"`
	LineType string `json:"line_type,omitempty"`
}

// RenderRow implements family.Family.
func (f *Family) RenderRow(buf *bytes.Buffer, row jobs.Row, ans *jobs.StoredAnswer) {
	out := Row{Phone: row.Echo, Status: "pending"}
	if ans != nil {
		var l Line
		_ = json.Unmarshal([]byte(ans.Data), &l)
		out.Status, out.Carrier, out.LineType = ans.Outcome, l.Carrier, l.LineType
	}
	b, _ := json.Marshal(out)
	buf.Write(b)
}

// Status is the job status answer.
type Status struct {
	JobID     string           `json:"job_id"`
	Status    string           `json:"status"`
	TotalRows int64            `json:"total_rows"`
	Processed int64            `json:"total_processed"`
	Summary   map[string]int64 `json:"summary"`
	Charged   credits.Amount   `json:"credits_consumed"`
	CreatedAt time.Time        `json:"created_at"`
}

func (f *Family) Submitted(j *jobs.Job) any {
	return map[string]any{"job_id": j.ID, "status": "submitted", "total_rows": j.TotalRows, "credits_consumed": j.Charge}
}

func (f *Family) Status(j *jobs.Job) any {
	return Status{JobID: j.ID, Status: j.Status, TotalRows: j.TotalRows, Processed: j.RowsProcessed, Charged: j.Charge, CreatedAt: j.CreatedAt,
		Summary: map[string]int64{OutFound: j.Outcomes[OutFound], OutAbsent: j.Outcomes[OutAbsent], OutUnverified: j.Outcomes[OutUnverified]}}
}

// SinglePrice implements family.Single.
func (f *Family) SinglePrice() credits.Amount { return Price }

// ParseSingle implements family.Single: GET /v1/phone-lookup?phone=.
func (f *Family) ParseSingle(req family.SingleRequest) (family.SingleCall, *apierr.Error) {
	phone := req.Query.Get("phone")
	if Digits(phone) == "" || jsonbody.OverChars(phone, MaxPhone) {
		return family.SingleCall{}, apierr.Unprocessable(apierr.Item{Loc: "query.phone", Type: apierr.TypeValueError, Msg: "A phone number is required"})
	}
	return family.SingleCall{Timeout: 5 * time.Second, Answer: func(ctx context.Context, charged credits.Amount) (family.SingleAnswer, error) {
		a := answer(Digits(phone))
		var l Line
		_ = json.Unmarshal(a.Data, &l)
		if a.Outcome != OutFound {
			// Not found is not charged (the toy's rule, to exercise the
			// refund of an answer that is not kept).
			charged = 0
		}
		return family.SingleAnswer{Keep: a.Outcome == OutFound, Body: map[string]any{"phone": phone, "status": a.Outcome,
			"carrier": l.Carrier, "line_type": l.LineType, "credits_consumed": charged}}, nil
	}}, nil
}
