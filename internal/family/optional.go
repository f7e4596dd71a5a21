package family

import (
	"strings"
	"time"

	"github.com/bulkd/bulkd/internal/jobs"
)

// The optional parts of the contract: a family has them or not, and every
// part of bulkd that cares asks through these declarations.

// Retrier is a family whose answers may be provisional (an Answer with
// RetryAt set, a greylisting mail server say): the processor answers those
// inputs again when they are due. It is jobs.Retrier, named here because
// it is part of the contract (the processor, which cannot import this
// package, asserts the same interface).
type Retrier = jobs.Retrier

// ProcessedCounter is a family whose total_processed is not the engine's
// rows with an answer (email lookup: rows with their final answer, a row
// waiting for a retry is not processed), so that the status and results
// answers agree.
type ProcessedCounter interface {
	Processed(j *jobs.Job) int64
}

// RetryingAnnouncer is a family whose jobs announce entering the retrying
// state (every input answered, some answers provisional), with the status
// its status endpoint shows then (email verification:
// partial_complete_retrying): a webhook hears of it as well as of
// completion. Families without it (lookup shows such a job as running)
// announce only completion.
type RetryingAnnouncer interface {
	RetryingStatus() string
}

// Processed is j's total_processed as f counts it (ProcessedCounter), or
// the engine's rows with an answer.
func Processed(f Family, j *jobs.Job) int64 {
	if pc, ok := f.(ProcessedCounter); ok {
		return pc.Processed(j)
	}
	return j.RowsProcessed
}

// RetryingStatus is the status f's jobs announce on entering the retrying
// state; false when f announces none.
func RetryingStatus(f Family) (string, bool) {
	if ra, ok := f.(RetryingAnnouncer); ok {
		return ra.RetryingStatus(), true
	}
	return "", false
}

// RetrySchedule is when a Retrier family answers again an input whose
// answer was temporary: the provisional-retry rule every such family
// shares (email verification, email lookup).
type RetrySchedule struct {
	// Delays is the wait before each retry: len(Delays) retries, after the
	// last the answer is final. The operator's schedule, not the remote
	// server's guess.
	Delays []time.Duration
	Now    func() time.Time // nil: time.Now
}

// Attempt is one input's attempt in a batch.
type Attempt struct {
	N int // 1 for the first answer
	// RetryAt is when the input is answered again; zero when this answer
	// is final.
	RetryAt time.Time
}

// Attempt is input i's attempt (attempts as for Answers) when its answer
// comes now, one input at a time (a family answering as answers arrive).
func (s RetrySchedule) Attempt(i int, attempts []int, temporary bool) Attempt {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	return s.attempt(now(), i, attempts, temporary)
}

func (s RetrySchedule) attempt(at time.Time, i int, attempts []int, temporary bool) Attempt {
	a := Attempt{N: 1}
	if attempts != nil {
		a.N = max(attempts[i], 1)
	}
	if temporary && a.N <= len(s.Delays) {
		a.RetryAt = at.Add(s.Delays[a.N-1])
	}
	return a
}

// Provisional reports whether the answer of this attempt will be retried.
func (a Attempt) Provisional() bool { return !a.RetryAt.IsZero() }

// Answers builds a batch's n answers: input i's attempt is attempts[i] (1
// for all when attempts is nil, a first answer); when temporary(i) and
// retries are left, the attempt is provisional and its answer is retried
// after the attempt's delay. answer makes input i's answer for its attempt
// (its RetryAt is set from the attempt).
func (s RetrySchedule) Answers(n int, attempts []int, temporary func(i int) bool,
	answer func(i int, a Attempt) (jobs.Answer, error)) ([]jobs.Answer, error) {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	at := now()
	out := make([]jobs.Answer, n)
	for i := range out {
		a := s.attempt(at, i, attempts, temporary(i))
		ans, err := answer(i, a)
		if err != nil {
			return nil, err
		}
		ans.RetryAt = a.RetryAt
		out[i] = ans
	}
	return out, nil
}

// Subjects is a family whose inputs name people (docs/privacy.md): email
// verification (an address) and email lookup (a person at a domain). An
// erasure (`bulkd admin erase`) finds a person's rows through it, and a
// submission naming a suppressed person answers those rows
// OutcomeSuppressed, uncharged and unprocessed. A family without it
// (company enrichment: companies, not people) is neither searched nor
// suppressed.
type Subjects interface {
	// Subjects are the canonical subjects (EmailSubject, PersonSubject)
	// that an input payload names.
	Subjects(payload string) []string
	// SuppressedAnswer is the answer recorded for an input naming a
	// suppressed or erased subject: outcome OutcomeSuppressed, and no
	// personal data in it.
	SuppressedAnswer() jobs.Answer
}

// OutcomeSuppressed is the outcome of an input that names a person on the
// suppression list (erased on their request): not processed, not charged,
// its input not stored (docs/privacy.md).
const OutcomeSuppressed = "suppressed"

// EmailSubject is the canonical subject of an email address: what the
// suppression list's keyed hash is taken of.
func EmailSubject(address string) string {
	return "email:" + strings.ToLower(strings.TrimSpace(address))
}

// PersonSubject is the canonical subject of a person at a domain (email
// lookup's input), the fields trimmed and case-folded as lookup
// deduplicates them.
func PersonSubject(first, last, domain string) string {
	f := func(s string) string { return strings.ToLower(strings.TrimSpace(s)) }
	return "person:" + f(first) + "\x00" + f(last) + "\x00" + f(domain)
}

// Worded is a family (or a family's Single) with words of its own on the
// shared paths: the API's quota refusals and the dashboard's notes. Shared
// code holds no family's words (TestSharedPathsHoldNoFamilyWords); a
// family without Words is named there by its name alone.
type Worded interface {
	Words() Words
}

// Words are what a family says through shared code.
type Words struct {
	// RefundSentence tells a customer, before a credit-paid submission,
	// which rows are refunded (Metering.RefundOutcome; email verification:
	// addresses whose result is unknown). The dashboard shows it; "" says
	// nothing.
	RefundSentence string
	// BulkQuota and SingleQuota name the plan quotas the family's
	// unlimited-plan bulk and single mounts draw on, as a 429 names them
	// ("Daily <BulkQuota> exceeded", "Monthly <SingleQuota> reached").
	// Empty for a family without unlimited-plan mounts.
	BulkQuota, SingleQuota string
}

// WordsOf is v's Words (a Family or a Single), or none.
func WordsOf(v any) Words {
	if w, ok := v.(Worded); ok {
		return w.Words()
	}
	return Words{}
}
