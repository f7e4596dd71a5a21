// Package family is the contract between a bulk job family (company
// enrichment, email verification, email lookup) and the rest of bulkd. A
// family is one package behind one interface: its input, declared once
// (its form: what a submission body holds, how its rows are gathered from
// a table) with one function reading each row, what a distinct input
// costs, how inputs are answered, how a job's status and result rows are
// shown, what a failed shard's rows are answered as, and, optionally, its
// provisional answers, its single-input request and its own count of
// processed rows (optional.go, single.go). The engine, the HTTP handlers,
// the dashboard, the BulkJob resource and the controller know families
// only through it, never by name.
package family

import (
	"regexp"

	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/family/form"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/jsonbody"
)

// Family is one kind of bulk job. The whole contract reads here: the
// parts the engine and the processor also use (Answerer, Renderer,
// Retrier, Streamer, Closer, Metering) are declared in package jobs, which
// cannot import this one, and named here under the same names.
type Family interface {
	// Renderer: Name is the engine's name of the family's jobs (the
	// BulkJob's spec.family, the bulkd.io/family label); RenderRow writes
	// one results row as a JSON object, ans nil while the row is pending
	// (and for a row skipped as invalid).
	Renderer
	// Answerer answers the family's distinct inputs (the shard
	// processor). Its ErrorAnswer is the family's error outcome for failed
	// shards: what the processor records for every input a shard that
	// failed for good left unanswered (company enrichment: "error", email
	// lookup: "not_found", email verification: "unknown"). Its Outcome is
	// also what the controller's ShardsFailed condition and event name
	// (ErrorOutcome): one declaration, so the text cannot drift from the
	// rows.
	Answerer

	// Rows is the family's one function per row of a submission body: it
	// reads a row into its echo, its distinct input, or why it is invalid
	// or refused. Everything else about the body (its list field, row
	// limit, dedupe, lengths, webhook_url and refusals) is the Form's,
	// read by the one decoder of every family (jsonbody.Decode), which
	// calls the function with the values of each row that passed the
	// Form's checks. Rows is called once per body, so the function may
	// keep what it learns across the body's rows (email verification: the
	// domains' IDNA mappings).
	Rows() jsonbody.RowFunc
	// Metering is what the family charges on credit-metered keys: its
	// Price per distinct input, and the RefundOutcome refunded when a job
	// completes (unlimited-plan mounts pay with quota instead: the API
	// sets Quota).
	Metering() Metering
	// Form is the one declaration of the family's input: how the API
	// decodes and limits its submission bodies (jsonbody.Decode with
	// ReadRow), and how the dashboard and bulkctl gather its rows from a
	// table and build them (internal/family/form). Its MaxRows is the most
	// rows a submission may hold; results offsets past it all read the
	// same empty page.
	Form() form.Form

	// Submitted is the answer to an accepted submission.
	Submitted(j *jobs.Job) any
	// Status is the answer of GET .../{job_id}.
	Status(j *jobs.Job) any
	// ResultsReady says whether a job's results may be read now: nil, or
	// the error to answer instead (email verification answers 409 before
	// its job is complete).
	ResultsReady(j *jobs.Job) *apierr.Error
	// CSVColumns names the columns of the results as CSV (format=csv), in
	// order: each is a top-level field of the rows RenderRow writes.
	CSVColumns() []string
	// BadJobID is the error for a job_id path parameter that is not a uuid
	// (SPEC: 422 for the families that say so, 400 for verification).
	BadJobID() *apierr.Error
	// Profile is how the family's shards are processed.
	Profile() Profile
}

// The contract's parts declared in package jobs (the engine and the
// processor use them; jobs cannot import this package), under the same
// names: one type each.
type (
	// Answerer answers distinct inputs: one Answer per input, in order;
	// ErrorAnswer is what a failed shard's unanswered inputs get.
	Answerer = jobs.Answerer
	// Renderer is a family's name and how it renders a results row.
	Renderer = jobs.Renderer
	// Streamer is a family that hands out answers as they come
	// (AnswerEach): optional.
	Streamer = jobs.Streamer
	// Closer is a family holding something a process gives back before
	// it exits (parked SMTP sessions): optional.
	Closer = jobs.Closer
	// Metering is what a submission is charged: the family's Price per
	// distinct input and RefundOutcome, or a plan Quota the API sets for
	// unlimited-plan mounts. The engine's and the family's are one type.
	Metering = jobs.Metering
)

// Profile is a family's processor settings.
type Profile struct {
	// BatchSize is how many distinct inputs one Answer call gets (0: the
	// processor's --batch-size). Email verification answers a whole shard
	// at once so that one SMTP session covers a domain's addresses.
	BatchSize int
}

// Registry is every family of a process, by name.
type Registry struct {
	byName map[string]Family
	order  []Family
}

// NamePattern is the form of a family name: what the BulkJob CRD's
// spec.family accepts (v1alpha1.FamilyPattern; the CRD names no family, so
// adding one needs no CRD upgrade) and a valid label value (bulkd.io/family).
const NamePattern = `^[a-z][a-z0-9_]{0,62}$`

var validName = regexp.MustCompile(NamePattern)

// NewRegistry registers families; a name given twice, or one the BulkJob
// CRD would refuse (NamePattern), panics (a wiring bug).
func NewRegistry(fams ...Family) *Registry {
	r := &Registry{byName: map[string]Family{}}
	for _, f := range fams {
		if !validName.MatchString(f.Name()) {
			panic("family: " + f.Name() + " is not a family name (" + NamePattern + ")")
		}
		if _, dup := r.byName[f.Name()]; dup {
			panic("family: " + f.Name() + " registered twice")
		}
		r.byName[f.Name()] = f
		r.order = append(r.order, f)
	}
	return r
}

// Get returns a family by name.
func (r *Registry) Get(name string) (Family, bool) {
	f, ok := r.byName[name]
	return f, ok
}

// All lists the families in registration order.
func (r *Registry) All() []Family { return r.order }

// ErrorOutcome is the outcome family's failed shards answer their
// unanswered rows as (its ErrorAnswer); false for a family not registered.
func (r *Registry) ErrorOutcome(name string) (string, bool) {
	f, ok := r.byName[name]
	if !ok {
		return "", false
	}
	return f.ErrorAnswer().Outcome, true
}

// Names lists the registered families' names in registration order.
func (r *Registry) Names() []string {
	out := make([]string, len(r.order))
	for i, f := range r.order {
		out[i] = f.Name()
	}
	return out
}

// Answerers are the families' answerers by name, for the shard processor.
func (r *Registry) Answerers() map[string]Answerer {
	m := make(map[string]Answerer, len(r.order))
	for _, f := range r.order {
		m[f.Name()] = f
	}
	return m
}

// BatchSizes are the families' own batch sizes by name (families without
// one are absent).
func (r *Registry) BatchSizes() map[string]int {
	m := map[string]int{}
	for _, f := range r.order {
		if n := f.Profile().BatchSize; n > 0 {
			m[f.Name()] = n
		}
	}
	return m
}
