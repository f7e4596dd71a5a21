// Package lookup is the email-lookup family of the job engine (SPEC 2.7,
// 4.2, 4.3): POST /v1/bulk-lookup and its unlimited-plan twin take
// (first_name, last_name, domain) rows, deduplicate them case-insensitively,
// and answer each with the finder (internal/finder), which checks candidate
// addresses with the SMTP verifier. Rows whose answer is temporary (a
// greylisting mail server) are retried later like verification's.
package lookup

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/family/form"
	"github.com/bulkd/bulkd/internal/finder"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/jsonbody"
)

// Name is the engine's name for lookup jobs.
const Name = "email_lookup"

// Limits (SPEC 2.7, section 8): its Form's (form.Lookup), which the
// single lookup shares.
var (
	MaxRows     = form.Lookup.MaxRows
	MaxFieldLen = form.Lookup.Fields[0].MaxLen
)

// Price is 1 credit per unique row on pay-as-you-go keys.
var Price = credits.Whole(1)

// Outcomes: found and not_found are the spec's buckets; a row waiting for
// a retry is "retrying" until its final answer.
const (
	OutcomeFound    = "found"
	OutcomeNotFound = "not_found"
	OutcomeRetrying = "retrying"
)

// A row without its final answer is rendered with status pending and
// substatus queued (not looked up yet) or retrying (the mail server
// greylisted us; the retry is scheduled).
const (
	StatusPending = "pending"
	SubQueued     = "queued"
	SubRetrying   = "retrying"
)

// Finder is what answering needs of internal/finder.
type Finder interface {
	Find(ctx context.Context, people []finder.Person) []finder.Result
}

// Family implements family.Family for email lookup. The pay-as-you-go and
// unlimited-plan mounts share it: they differ only in metering, which is
// the mount's.
type Family struct {
	Finder      Finder
	RetryDelays []time.Duration
	Now         func() time.Time
}

var _ family.Family = (*Family)(nil)

// Close gives back what the family's finder holds (jobs.Closer): the
// parked SMTP sessions of its verifier, whose politeness slots are shared
// with other pods through Redis. A lookup processor pod builds no other
// family, so without it the slots stayed taken until they expired and the
// next lookup job's shards waited for them.
func (f *Family) Close() {
	if c, ok := f.Finder.(interface{ Close() }); ok {
		c.Close()
	}
}

// New returns the family answering with f.
func New(f Finder, retryDelays []time.Duration) *Family {
	return &Family{Finder: f, RetryDelays: retryDelays, Now: time.Now}
}

// Name implements family.Family.
func (f *Family) Name() string { return Name }

// Metering implements family.Family: Price per unique row, nothing
// refunded (a row is answered found or not_found, both charged).
func (f *Family) Metering() family.Metering { return family.Metering{Price: Price} }

// Form implements family.Family.
func (f *Family) Form() form.Form { return form.Lookup }

// Words implements family.Worded: the quotas its unlimited-plan mounts
// draw on, in SPEC section 8's words.
func (f *Family) Words() family.Words { return words }

var words = family.Words{BulkQuota: "bulk search quota", SingleQuota: "single-lookup cap"}

// Profile implements family.Family: a whole shard per batch, so a domain's
// people are resolved and probed together.
func (f *Family) Profile() family.Profile { return family.Profile{BatchSize: MaxRows} }

// BadJobID implements family.Family: a job_id that is not a uuid is 400
// (SPEC section 7's table; only company enrichment has its own rule that
// invalid parameters are 422).
// CSVColumns implements family.Family: the echoed person first, then the
// single-lookup shape.
func (f *Family) CSVColumns() []string {
	return []string{"first_name", "last_name", "domain", "status", "substatus", "email", "email_provider",
		"mx_record", "is_catch_all", "is_role", "is_free", "is_disposable", "confidence"}
}

func (f *Family) BadJobID() *apierr.Error {
	return apierr.New(http.StatusBadRequest, "job_id is not a valid UUID.")
}

// ResultsReady implements family.Family: results may be read while the job
// runs (SPEC 4.2 rule 4).
func (f *Family) ResultsReady(*jobs.Job) *apierr.Error { return nil }

// Row is one submitted tuple.
type Row struct {
	FirstName *string `json:"first_name"`
	LastName  *string `json:"last_name"`
	Domain    *string `json:"domain"`
}

// Validate records the row's problems in v (at most max in all) under
// loc: every field required, a string (the JSON decoder checks that) of at
// most 255 characters. It reports whether the row is valid.
func (row Row) Validate(v *apierr.Validation, max int, loc ...any) bool {
	ok := true
	for _, fld := range []struct {
		name string
		val  *string
	}{{"first_name", row.FirstName}, {"last_name", row.LastName}, {"domain", row.Domain}} {
		var typ, msg string
		switch {
		case fld.val == nil:
			typ, msg = apierr.TypeMissing, "Field required"
		case jsonbody.OverChars(*fld.val, MaxFieldLen):
			typ, msg = apierr.TypeStringTooLong, fmt.Sprintf("String should have at most %d characters", MaxFieldLen)
		default:
			continue
		}
		ok = false
		if len(v.Items) < max {
			v.Add(apierr.Loc(append(loc, fld.name)...), typ, msg)
		}
	}
	return ok
}

// Person is the valid row as the finder takes it: every field trimmed.
func (row Row) Person() finder.Person {
	return finder.Person{FirstName: strings.TrimSpace(*row.FirstName), LastName: strings.TrimSpace(*row.LastName),
		Domain: strings.TrimSpace(*row.Domain)}
}

// Rows implements family.Family: one {first_name, last_name, domain} of
// {"input": [...]} (its Form, form.Lookup, says the rest: 1 to 10,000
// rows, every field a string of at most 255 characters, else 422 at
// body.input.N.field). Rows are deduplicated on the trimmed, case-folded
// three fields; the rows kept are the unique ones, in order of first
// appearance, grouped by domain for the shards.
func (f *Family) Rows() jsonbody.RowFunc {
	return func(vals []*string) jsonbody.Row {
		row := Row{FirstName: vals[0], LastName: vals[1], Domain: vals[2]}
		p := row.Person()
		echo, _ := json.Marshal([3]string{*row.FirstName, *row.LastName, *row.Domain})
		payload, _ := json.Marshal(p)
		domain := strings.ToLower(p.Domain)
		key := strings.ToLower(p.FirstName) + "\x00" + strings.ToLower(p.LastName) + "\x00" + domain
		return jsonbody.Row{Echo: string(echo), Key: key, Payload: string(payload), Group: domain}
	}
}

// SubmitResponse is SPEC 2.7's submission response. total_rows is the
// unique rows (as SPEC 4.2 rule 1 says), the same number the status and
// results answers give.
type SubmitResponse struct {
	JobID           string         `json:"job_id"`
	Status          string         `json:"status"`
	TotalRows       int64          `json:"total_rows"`
	CreditsConsumed credits.Amount `json:"credits_consumed"`
}

// Submitted implements family.Family.
func (f *Family) Submitted(j *jobs.Job) any {
	return SubmitResponse{JobID: j.ID, Status: "submitted", TotalRows: j.TotalRows, CreditsConsumed: j.Charge}
}

// StatusResponse is SPEC 2.7's status response. The timestamps have the
// names company enrichment's status uses (docs/api.md): created_at is the
// submission, completed_at the moment the last row got its final answer
// (null while running).
type StatusResponse struct {
	JobID           string           `json:"job_id"`
	Status          string           `json:"status"`
	TotalRows       int64            `json:"total_rows"`
	TotalProcessed  int64            `json:"total_processed"`
	Summary         map[string]int64 `json:"summary"`
	CreditsConsumed credits.Amount   `json:"credits_consumed"`
	CreatedAt       time.Time        `json:"created_at"`
	CompletedAt     *time.Time       `json:"completed_at"`
}

// Processed is total_processed in the status and results answers: rows
// with their final answer (a row waiting for a retry is not processed).
func (f *Family) Processed(j *jobs.Job) int64 {
	return j.Outcomes[OutcomeFound] + j.Outcomes[OutcomeNotFound]
}

// Status implements family.Family: running until every row has its final
// answer (a row waiting for a retry is not processed yet), then completed.
// total_rows is the unique rows, as in the submission response.
func (f *Family) Status(j *jobs.Job) any {
	found, notFound, retrying := j.Outcomes[OutcomeFound], j.Outcomes[OutcomeNotFound], j.Outcomes[OutcomeRetrying]
	// Suppressed rows (a person erased on their request, docs/privacy.md)
	// are neither processed (SPEC 2.7: found + not_found is
	// total_processed, each charged) nor pending.
	suppressed := j.Outcomes[family.OutcomeSuppressed]
	st := StatusResponse{JobID: j.ID, Status: "running", TotalRows: j.TotalRows, TotalProcessed: f.Processed(j),
		CreditsConsumed: j.Charge, CreatedAt: j.CreatedAt,
		Summary: map[string]int64{"total_found": found, "total_not_found": notFound, "total_suppressed": suppressed,
			"total_retrying": retrying, "total_pending": j.TotalRows - found - notFound - retrying - suppressed}}
	if j.Status == jobs.StatusCompleted {
		st.Status = "completed"
		c := j.CompletedAt
		st.CompletedAt = &c
	}
	return st
}

// Answer implements jobs.Answerer: the first attempt.
func (f *Family) Answer(ctx context.Context, payloads []string) ([]jobs.Answer, error) {
	return f.Retry(ctx, payloads, nil)
}

// Retry implements jobs.Retrier: a temporary answer before the last attempt
// is provisional (outcome retrying); at the last attempt it is final.
func (f *Family) Retry(ctx context.Context, payloads []string, attempts []int) ([]jobs.Answer, error) {
	people := make([]finder.Person, len(payloads))
	for i, p := range payloads {
		if err := json.Unmarshal([]byte(p), &people[i]); err != nil {
			return nil, fmt.Errorf("lookup: payload %d: %w", i, err)
		}
	}
	res := f.Finder.Find(ctx, people)
	if err := ctx.Err(); err != nil {
		return nil, err // cut short by our own deadline: the batch is retried whole
	}
	sched := family.RetrySchedule{Delays: f.RetryDelays, Now: f.Now}
	return sched.Answers(len(payloads), attempts, func(i int) bool { return res[i].Temporary },
		func(i int, a family.Attempt) (jobs.Answer, error) {
			outcome := res[i].Status
			if a.Provisional() {
				outcome = OutcomeRetrying
			}
			data, err := json.Marshal(res[i])
			if err != nil {
				return jobs.Answer{}, fmt.Errorf("lookup: encode answer: %w", err)
			}
			return jobs.Answer{Outcome: outcome, Data: data}, nil
		})
}

// Subjects implements family.Subjects: the person a row names.
func (f *Family) Subjects(payload string) []string {
	var p finder.Person
	if json.Unmarshal([]byte(payload), &p) != nil {
		return nil
	}
	return []string{family.PersonSubject(p.FirstName, p.LastName, p.Domain)}
}

// SuppressedAnswer implements family.Subjects: status and substatus
// suppressed, every other field null.
func (f *Family) SuppressedAnswer() jobs.Answer {
	data, _ := json.Marshal(finder.Result{Status: family.OutcomeSuppressed, Substatus: family.OutcomeSuppressed})
	return jobs.Answer{Outcome: family.OutcomeSuppressed, Data: data}
}

// ErrorAnswer implements jobs.Answerer: a row bulkd could not answer at all
// is not_found with substatus processing_error.
func (f *Family) ErrorAnswer() jobs.Answer {
	data, _ := json.Marshal(finder.Result{Status: OutcomeNotFound, Substatus: "processing_error"})
	return jobs.Answer{Outcome: OutcomeNotFound, Data: data}
}

// RenderRow implements family.Family: the single-lookup shape (the
// finder's result) with the submitted first_name, last_name and domain; a
// row not answered yet (or waiting for a retry) is status "pending", so
// pages never shift while the job runs.
func (f *Family) RenderRow(buf *bytes.Buffer, row jobs.Row, ans *jobs.StoredAnswer) {
	var echo [3]string
	_ = json.Unmarshal([]byte(row.Echo), &echo)
	var r finder.Result
	switch {
	case ans == nil:
		r = finder.Result{Status: StatusPending, Substatus: SubQueued}
	case ans.Outcome == OutcomeRetrying:
		r = finder.Result{Status: StatusPending, Substatus: SubRetrying}
	default:
		_ = json.Unmarshal([]byte(ans.Data), &r)
	}
	writeRow(buf, r, echo[0], echo[1], echo[2])
}

// Response is the shape of a results row and of the single lookup's
// answer (which adds credits_consumed).
type Response struct {
	finder.Result
	FirstName string `json:"first_name"`
	LastName  string `json:"last_name"`
	Domain    string `json:"domain"`
}

// Undetermined reports whether r is not an answer at all: the finder could
// not tell (greylisting, a mail host or DNS that did not answer, the call's
// deadline). A single lookup answers it with 502 and charges nothing; a
// bulk row keeps it as not_found/unknown after its last retry.
func Undetermined(r finder.Result) bool {
	return r.Status == finder.StatusNotFound && r.Substatus == finder.SubUnknown
}

func writeRow(buf *bytes.Buffer, r finder.Result, first, last, domain string) {
	b, _ := json.Marshal(Response{Result: r, FirstName: first, LastName: last, Domain: domain})
	buf.Write(b)
}
