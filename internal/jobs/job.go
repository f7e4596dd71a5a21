// Package jobs is the job engine every bulk family shares: company
// enrichment, email lookup and email verification.
//
// A submission is classified and deduplicated by its family into a Builder:
// every submitted row points at one distinct input (or carries the reason it
// is invalid), and the distinct inputs are split into shards. Submit charges
// the account, stores the job in Redis and hands it to an Executor. A shard
// processor (in-process for `bulkd serve`, a Kubernetes pod in operator mode)
// answers a shard's distinct inputs and records each answer exactly once;
// results are read back in submission order through the row map, so
// duplicates cost no work and pending rows keep their place.
package jobs

import (
	"errors"
	"strconv"
	"time"

	"github.com/bulkd/bulkd/internal/credits"
)

// Job statuses.
const (
	StatusRunning = "running"
	// StatusRetrying: every distinct input has a first answer, and some of
	// those answers are provisional, waiting for a retry (an address whose
	// mail server greylisted us). Results may be read; the job completes
	// when the last provisional answer is replaced by a final one.
	StatusRetrying  = "retrying"
	StatusCompleted = "completed"

	// statusSettling is stored while a job whose last input was answered
	// settles what it owes outside its own keys (Store.settle); it reads
	// as running, with Settling set.
	statusSettling = "settling"
)

// Outcome names shared by the families. A family may add its own.
const (
	OutcomeFound    = "found"
	OutcomeNotFound = "not_found"
	OutcomeError    = "error"
)

// ErrJobNotFound is returned for unknown or expired jobs.
var ErrJobNotFound = errors.New("job not found")

// ErrUnknownFamily is a job of a family this build of bulkd has no answerer
// for (a newer apiserver's family, say): retrying the same build cannot
// help, a build that knows the family can.
var ErrUnknownFamily = errors.New("unknown job family")

// Job is a job's metadata (the jobs hash in Redis).
type Job struct {
	ID        string
	Family    string
	AccountID string
	KeyID     string
	Status    string

	TotalRows    int64 // rows submitted, duplicates and invalid rows included
	TotalInvalid int64 // rows skipped as invalid
	Distinct     int64 // distinct valid inputs

	RowsProcessed     int64 // rows answered so far (invalid rows count as answered at once)
	DistinctProcessed int64
	Outcomes          map[string]int64 // rows per outcome (invalid rows under the family's invalid outcome)
	// Retrying is the number of distinct inputs whose answer is provisional
	// (waiting for a retry); NextRetryAt is when the earliest is due (zero
	// when none is; read only for a job whose status is retrying).
	Retrying    int64
	NextRetryAt time.Time

	Shards     int
	ShardSize  int
	ShardsDone int64

	Charge credits.Amount // credits taken upfront
	Price  credits.Amount // per distinct input (with RefundOutcome)
	// RefundOutcome is the outcome refunded at completion (Metering);
	// Refunded is what was refunded then.
	RefundOutcome string
	Refunded      credits.Amount
	QuotaUnits    int64  // quota units taken upfront (unlimited plans)
	QuotaWindow   string // which quota

	// Settling: every input is answered and the job is being completed
	// (Status reads running until it is).
	Settling bool

	CreatedAt   time.Time
	CompletedAt time.Time // zero while running
	ExpiresAt   time.Time

	// WebhookURL is where the job's transitions are announced (empty:
	// nowhere); WebhookRetryingAt is when it first entered the retrying
	// state (zero: never), WebhookRetryingSent whether that event is
	// enqueued (internal/webhook).
	WebhookURL          string
	WebhookRetryingAt   time.Time
	WebhookRetryingSent bool
	// Erased counts the erasures that changed the job (redact.go): its
	// rendered rows are not cached from the first on.
	Erased int64
}

// Pending is the number of rows not answered yet.
func (j *Job) Pending() int64 { return j.TotalRows - j.RowsProcessed }

// Key layout. Every key of a job carries its id as a hash tag so the
// scripts that touch several of them are valid on Redis Cluster.
const prefix = "bulkd:"

func metaKey(id string) string   { return prefix + "job:{" + id + "}" }
func rowsKey(id string) string   { return prefix + "job:{" + id + "}:rows" }
func inputsKey(id string) string { return prefix + "job:{" + id + "}:in" }
func answersKey(id string) string {
	return prefix + "job:{" + id + "}:ans"
}
func shardsDoneKey(id string) string { return prefix + "job:{" + id + "}:sdone" }

// retryKey is the zset of provisional answers waiting for a retry: member
// the distinct index, score when it is due (ms). triesKey counts the
// attempts made per distinct index beyond the first.
func retryKey(id string) string { return prefix + "job:{" + id + "}:retry" }
func triesKey(id string) string { return prefix + "job:{" + id + "}:tries" }
func leaseKey(id string, shard int) string {
	return prefix + "job:{" + id + "}:lease:" + strconv.Itoa(shard)
}

// dataKeys are the keys every job with answers has.
func dataKeys(id string) []string {
	return []string{metaKey(id), rowsKey(id), inputsKey(id), answersKey(id), shardsDoneKey(id)}
}

// jobKeys are all keys of a job, for deletion: its data and, when some of
// its answers were provisional, its retry keys.
func jobKeys(id string) []string {
	return append(dataKeys(id), retryKey(id), triesKey(id))
}

// The engine's own sets. The pending and reclaiming sets share a hash tag
// because one script moves marks from one to the other (Redis Cluster runs
// a script only on keys of one slot); the others are only ever touched one
// command at a time.
const (
	activeKey     = prefix + "jobs:active"       // set of running job ids (for resume)
	pendingKey    = prefix + "{jobs}:pending"    // zset of submissions not yet committed: "job|account" by start time (ms)
	reclaimingKey = prefix + "{jobs}:reclaiming" // zset of abandoned submissions being rolled back
	retryingKey   = prefix + "jobs:retrying"     // zset of jobs with provisional answers, by earliest due retry (ms)

	// Where the pending and reclaiming sets were before they shared a hash
	// tag: the janitor moves what an older version left there.
	legacyPendingKey    = prefix + "jobs:pending"
	legacyReclaimingKey = prefix + "jobs:reclaiming"
)

// RowChunk is how many rows one field of the row map holds: a results page
// (at most 500 rows) touches at most two fields.
const RowChunk = 500
