// Package verification is the email-verification family of the job engine
// (SPEC 2.8, 4.4): POST /v1/bulk takes {"emails": [...]}, deduplicates the
// addresses, charges 0.2 credits per unique address upfront, and answers
// each with the SMTP verifier (internal/verify). Addresses a mail server
// greylisted get a provisional answer and are retried later without holding
// a worker; the job is then partial_complete_retrying until the last retry.
package verification

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
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/jsonbody"
	"github.com/bulkd/bulkd/internal/verify"
)

// Name is the engine's name for verification jobs.
const Name = "email_verification"

// Limits (SPEC 2.8, section 8): its Form's (form.Verification), which
// GET /v1/verify shares.
var (
	MaxEmails      = form.Verification.MaxRows
	MinLen, MaxLen = form.Verification.Fields[0].MinLen, form.Verification.Fields[0].MaxLen
)

// Price is 0.2 credits per unique address.
var Price = credits.Amount(credits.Scale / 5)

// Wire statuses of a verification job (SPEC 3).
const (
	StatusInProgress = "in_progress"
	StatusRetrying   = "partial_complete_retrying"
	StatusComplete   = "complete"
)

// Verifier is what answering needs of internal/verify.
type Verifier interface {
	Verify(ctx context.Context, emails []string) []verify.Result
}

// Family implements family.Family.
type Family struct {
	Verifier Verifier
	// RetryDelays is the wait before each retry of a temporary answer
	// (greylisting, other 4xx): len(RetryDelays) retries, after the last
	// the answer is final (unknown, with its reason).
	RetryDelays []time.Duration
	Now         func() time.Time
	// Single answers GET /v1/verify (nil: Verifier); it may wait out a
	// short greylist within the request.
	Single Verifier
	// Teacher, when set, is given every batch of bulk answers (the first
	// attempt and the retries, never GET /v1/verify): the finder learns
	// address shapes from the deliverable ones (finder.VerificationTeacher;
	// --finder-learn-from-verification).
	Teacher Teacher
	price   string
}

// Teacher learns from a batch of verification answers. It must be quick
// and bounded (it runs in the shard's answering path) and may drop what it
// cannot store.
type Teacher interface {
	Teach(ctx context.Context, res []verify.Result)
}

var _ family.Family = (*Family)(nil)

// Close ends the verifiers' parked SMTP sessions (jobs.Closer): their
// politeness slots are shared with other pods through Redis.
func (f *Family) Close() {
	for _, v := range []Verifier{f.Verifier, f.Single} {
		if c, ok := v.(interface{ Close() }); ok {
			c.Close()
		}
	}
}

// New returns the family answering with v.
func New(v Verifier, retryDelays []time.Duration) *Family {
	return &Family{Verifier: v, RetryDelays: retryDelays, Now: time.Now, price: Price.String()}
}

// SingleVerifier is the verifier of GET /v1/verify.
func (f *Family) SingleVerifier() Verifier {
	if f.Single != nil {
		return f.Single
	}
	return f.Verifier
}

// Name implements family.Family.
func (f *Family) Name() string { return Name }

// Metering implements family.Family: Price per unique address upfront,
// the unknown ones refunded when the job completes (unknown is never
// charged).
func (f *Family) Metering() family.Metering {
	return family.Metering{Price: Price, RefundOutcome: verify.StatusUnknown}
}

// Words implements family.Worded: the dashboard's note on the refund of
// RefundOutcome.
func (f *Family) Words() family.Words {
	return family.Words{RefundSentence: "Addresses whose result is unknown are refunded when the job completes."}
}

// Form implements family.Family.
func (f *Family) Form() form.Form { return form.Verification }

// Profile implements family.Family: a whole shard per Answer call, so one
// SMTP session covers all of a mail host's addresses in the shard.
func (f *Family) Profile() family.Profile { return family.Profile{BatchSize: 100_000} }

// BadJobID implements family.Family: SPEC 4.4 rule 3 says 400.
// CSVColumns implements family.Family: the row's own fields, then the
// verdict's (docs/api.md, "The verdict").
func (f *Family) CSVColumns() []string {
	return []string{"input", "credits_consumed", "email", "status", "reason", "retrying", "attempts",
		"is_valid_syntax", "domain", "mx_host", "provider", "is_catch_all", "is_disposable", "is_role",
		"is_free", "is_disabled", "has_full_inbox", "suggestion", "score", "smtp_code", "checked_at"}
}

func (f *Family) BadJobID() *apierr.Error {
	return apierr.New(http.StatusBadRequest, "job_id is not a valid UUID.")
}

// WireStatus maps the engine's job status to the verification statuses.
func WireStatus(j *jobs.Job) string {
	switch j.Status {
	case jobs.StatusCompleted:
		return StatusComplete
	case jobs.StatusRetrying:
		return StatusRetrying
	}
	return StatusInProgress
}

// ResultsReady implements family.Family: SPEC 4.4 rule 2, 409 before the job
// is complete, except that partial results may be read while it is
// partial_complete_retrying.
func (f *Family) ResultsReady(j *jobs.Job) *apierr.Error {
	if st := WireStatus(j); st == StatusInProgress {
		return apierr.New(http.StatusConflict, fmt.Sprintf("Job is not complete yet (status: %s; %d of %d emails verified). "+
			"Results are available when the status is complete or partial_complete_retrying.", st, j.RowsProcessed, j.TotalRows))
	}
	return nil
}

// SubmitResponse is the SPEC 2.8 response. estimated_cost is the charge
// rounded up to whole credits (the spec shows it integer-looking);
// credits_consumed is the exact charge.
type SubmitResponse struct {
	JobID           string         `json:"job_id"`
	Status          string         `json:"status"`
	TotalEmails     int64          `json:"total_emails"`
	EstimatedCost   int64          `json:"estimated_cost"`
	CreditsConsumed credits.Amount `json:"credits_consumed"`
}

// EstimatedCost rounds a charge up to whole credits.
func EstimatedCost(a credits.Amount) int64 { return (int64(a) + credits.Scale - 1) / credits.Scale }

// Submitted implements family.Family.
func (f *Family) Submitted(j *jobs.Job) any {
	return SubmitResponse{JobID: j.ID, Status: "submitted", TotalEmails: j.Distinct, EstimatedCost: EstimatedCost(j.Charge), CreditsConsumed: j.Charge}
}

// StatusResponse is GET /v1/bulk/{job_id} (its fields are ours; docs/api.md).
type StatusResponse struct {
	JobID           string           `json:"job_id"`
	Status          string           `json:"status"`
	TotalEmails     int64            `json:"total_emails"`
	TotalProcessed  int64            `json:"total_processed"`
	TotalRetrying   int64            `json:"total_retrying"`
	Summary         map[string]int64 `json:"summary"`
	CreditsConsumed credits.Amount   `json:"credits_consumed"`
	CreditsRefunded credits.Amount   `json:"credits_refunded"`
	CreatedAt       time.Time        `json:"created_at"`
	NextRetryAt     *time.Time       `json:"next_retry_at"`
	CompletedAt     *time.Time       `json:"completed_at"`
}

// Status implements family.Family.
func (f *Family) Status(j *jobs.Job) any {
	st := StatusResponse{JobID: j.ID, Status: WireStatus(j), TotalEmails: j.Distinct, TotalProcessed: j.RowsProcessed,
		TotalRetrying: j.Retrying, CreditsConsumed: j.Charge - j.Refunded, CreditsRefunded: j.Refunded, CreatedAt: j.CreatedAt, Summary: map[string]int64{}}
	for _, s := range []string{verify.StatusDeliverable, verify.StatusUndeliverable, verify.StatusRisky, verify.StatusUnknown, family.OutcomeSuppressed} {
		st.Summary[s] = j.Outcomes[s]
	}
	st.Summary["pending"] = j.Pending()
	if !j.NextRetryAt.IsZero() && j.Status == jobs.StatusRetrying {
		t := j.NextRetryAt
		st.NextRetryAt = &t
	}
	if !j.CompletedAt.IsZero() {
		c := j.CompletedAt
		st.CompletedAt = &c
	}
	return st
}

// Rows implements family.Family: one address of {"emails": [...]}
// (its Form, form.Verification, says the rest: 1 to 100,000 strings of 3
// to 320 characters, the list's refusals 400 as SPEC 4.4 rule 3 says).
// Addresses are deduplicated on their normalized form (verify.Normalize:
// trimmed, domain lowercased and IDNA-encoded, local part lowercased
// unless quoted); a string that is not an address at all is still one
// input (answered undeliverable/invalid_syntax), deduplicated on its
// trimmed, lowercased form. The inputs are grouped by mail domain.
func (f *Family) Rows() jsonbody.RowFunc {
	var norm verify.Normalizer
	return func(vals []*string) jsonbody.Row {
		key := keyWith(&norm, *vals[0])
		return jsonbody.Row{Echo: *vals[0], Key: key, Payload: key, Group: domainOf(key)}
	}
}

// Key is an address's dedupe key and the input the verifier is given.
func Key(s string) string { return keyWith(nil, s) }

// keyWith is Key with a Normalizer that remembers domains (nil: none).
func keyWith(n *verify.Normalizer, s string) string {
	var a verify.Address
	var err error
	if n != nil {
		a, err = n.Normalize(s)
	} else {
		a, err = verify.Normalize(s)
	}
	if err == nil {
		return a.String()
	}
	return strings.ToLower(strings.TrimSpace(s))
}

func domainOf(key string) string {
	if i := strings.LastIndexByte(key, '@'); i >= 0 {
		return key[i+1:]
	}
	return ""
}

// stored is an answer as recorded: the verifier's result and whether it
// waits for a retry.
type stored struct {
	verify.Result
	Retrying bool `json:"retrying"`
	Attempts int  `json:"attempts"`
}

// Answer implements jobs.Answerer: the first attempt.
func (f *Family) Answer(ctx context.Context, payloads []string) ([]jobs.Answer, error) {
	return f.Retry(ctx, payloads, nil)
}

// Retry implements jobs.Retrier. A temporary answer before the last
// attempt is provisional (retried after the attempt's delay); at the last
// attempt it is final.
func (f *Family) Retry(ctx context.Context, payloads []string, attempts []int) ([]jobs.Answer, error) {
	res := f.Verifier.Verify(ctx, payloads)
	if err := ctx.Err(); err != nil {
		// Answers cut short by our own deadline are not the mail world's
		// verdict: the batch is retried as a whole.
		return nil, err
	}
	if f.Teacher != nil {
		f.Teacher.Teach(ctx, res)
	}
	sched := family.RetrySchedule{Delays: f.RetryDelays, Now: f.Now}
	return sched.Answers(len(payloads), attempts, func(i int) bool { return res[i].Temporary },
		func(i int, a family.Attempt) (jobs.Answer, error) { return f.encode(res[i], a) })
}

// EachVerifier is a Verifier that also hands over each answer as soon as
// it is known (*verify.Verifier).
type EachVerifier interface {
	VerifyEach(ctx context.Context, emails []string, each func(idxs []int, r verify.Result)) []verify.Result
}

var (
	_ jobs.Streamer = (*Family)(nil)
	_ EachVerifier  = (*verify.Verifier)(nil) // the production verifier streams
)

// AnswerEach implements jobs.Streamer: each address's answer is handed to
// emit as soon as its mail server has answered, so a slow server holds back
// only its own addresses (issue 25); attempts as for Retry (nil: the first
// attempt). A Verifier without VerifyEach answers the batch at once.
func (f *Family) AnswerEach(ctx context.Context, payloads []string, attempts []int, emit func(i int, a jobs.Answer)) error {
	ev, ok := f.Verifier.(EachVerifier)
	if !ok {
		answers, err := f.Retry(ctx, payloads, attempts)
		if err != nil {
			return err
		}
		for i, a := range answers {
			emit(i, a)
		}
		return nil
	}
	sched := family.RetrySchedule{Delays: f.RetryDelays, Now: f.Now}
	var encErr error
	res := ev.VerifyEach(ctx, payloads, func(idxs []int, r verify.Result) {
		for _, i := range idxs {
			a, err := f.encode(r, sched.Attempt(i, attempts, r.Temporary))
			if err != nil {
				encErr = err
				continue
			}
			emit(i, a)
		}
	})
	if err := ctx.Err(); err != nil {
		return err // what was emitted stands; the rest is answered again
	}
	if encErr != nil {
		return encErr
	}
	if f.Teacher != nil {
		f.Teacher.Teach(ctx, res)
	}
	return nil
}

// encode is one address's recorded answer for its attempt.
func (f *Family) encode(r verify.Result, a family.Attempt) (jobs.Answer, error) {
	data, err := json.Marshal(stored{Result: r, Attempts: a.N, Retrying: a.Provisional()})
	if err != nil {
		return jobs.Answer{}, fmt.Errorf("verification: encode answer: %w", err)
	}
	return jobs.Answer{Outcome: r.Status, Data: data, RetryAt: a.RetryAt}, nil
}

// ErrorAnswer implements jobs.Answerer: an address whose shard failed for
// good is unknown (it is never reported as anything we did not see).
func (f *Family) ErrorAnswer() jobs.Answer {
	data, _ := json.Marshal(stored{Result: verify.Result{Status: verify.StatusUnknown, Reason: ReasonProcessingError}})
	return jobs.Answer{Outcome: verify.StatusUnknown, Data: data}
}

// Subjects implements family.Subjects: the address (the payload is its
// normalized form).
func (f *Family) Subjects(payload string) []string { return []string{family.EmailSubject(payload)} }

// SuppressedAnswer implements family.Subjects: status and reason
// suppressed, no address, nothing checked; checked_at is when the
// suppression list answered for it.
func (f *Family) SuppressedAnswer() jobs.Answer {
	data, _ := json.Marshal(stored{Result: verify.Result{Status: family.OutcomeSuppressed, Reason: family.OutcomeSuppressed, CheckedAt: time.Now().UTC()}})
	return jobs.Answer{Outcome: family.OutcomeSuppressed, Data: data}
}

// ReasonProcessingError is the reason of an address bulkd could not check
// at all (its shard failed for good).
const ReasonProcessingError = "processing_error"

// RenderRow implements family.Family: the stored result with the address
// as submitted (input), its charge, and, while a row is not answered yet,
// status "pending".
func (f *Family) RenderRow(buf *bytes.Buffer, row jobs.Row, ans *jobs.StoredAnswer) {
	buf.WriteString(`{"input":`)
	in, _ := json.Marshal(row.Echo)
	buf.Write(in)
	buf.WriteString(`,"credits_consumed":`)
	// Unknown is not charged: its 0.2 is refunded when the job completes;
	// suppressed never was.
	if row.First && (ans == nil || (ans.Outcome != verify.StatusUnknown && ans.Outcome != family.OutcomeSuppressed)) {
		buf.WriteString(f.price)
	} else {
		buf.WriteString("0")
	}
	if ans == nil {
		buf.WriteString(`,"email":`)
		k, _ := json.Marshal(Key(row.Echo))
		buf.Write(k)
		buf.WriteString(`,"status":"pending","reason":null,"retrying":false}`)
		return
	}
	buf.WriteByte(',')
	buf.WriteString(ans.Data[1:]) // the stored object without its opening brace
}
