package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/testredis"
)

// testFamily is the family name of the small directory family these tests
// run jobs of: an input is a company slug, answered found when the directory
// knows it.
const testFamily = "test_directory"

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// dirAnswer is the answer data of the test family.
type dirAnswer struct {
	Slug string  `json:"slug"`
	Name *string `json:"name"`
	By   string  `json:"by,omitempty"` // which answerer produced it
}

// mapAnswerer answers from a map of known slugs. It counts how many times
// each payload was answered (a successful Answer call that returned it).
type mapAnswerer struct {
	known map[string]string
	tag   string        // recorded in each answer's data
	delay time.Duration // per Answer call; honours ctx
	// gate, when set, is called at the start of each Answer call.
	gate func(ctx context.Context, payloads []string) error

	mu    sync.Mutex
	calls map[string]int
	batch int
}

func newMapAnswerer(known map[string]string) *mapAnswerer {
	return &mapAnswerer{known: known, calls: map[string]int{}}
}

func (a *mapAnswerer) Answer(ctx context.Context, payloads []string) ([]Answer, error) {
	if a.gate != nil {
		if err := a.gate(ctx, payloads); err != nil {
			return nil, err
		}
	}
	if a.delay > 0 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(a.delay):
		}
	}
	out := make([]Answer, len(payloads))
	for i, p := range payloads {
		d := dirAnswer{Slug: p, By: a.tag}
		o := OutcomeNotFound
		if name, ok := a.known[p]; ok {
			d.Name, o = &name, OutcomeFound
		}
		b, _ := json.Marshal(d)
		out[i] = Answer{Outcome: o, Data: b}
	}
	a.mu.Lock()
	a.batch++
	for _, p := range payloads {
		a.calls[p]++
	}
	a.mu.Unlock()
	return out, nil
}

var errorData = []byte(`{"slug":"","name":null}`)

func (a *mapAnswerer) ErrorAnswer() Answer { return Answer{Outcome: OutcomeError, Data: errorData} }

func (a *mapAnswerer) callsOf(p string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls[p]
}

func (a *mapAnswerer) answered() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := make(map[string]int, len(a.calls))
	for k, v := range a.calls {
		m[k] = v
	}
	return m
}

var errUpstream = errors.New("directory upstream unavailable")

// flakyAnswerer fails its first failures calls (the directory is down),
// then answers like its mapAnswerer.
type flakyAnswerer struct {
	*mapAnswerer
	failures int

	fmu      sync.Mutex
	attempts []time.Time
}

func (f *flakyAnswerer) Answer(ctx context.Context, payloads []string) ([]Answer, error) {
	f.fmu.Lock()
	f.attempts = append(f.attempts, time.Now())
	n := len(f.attempts)
	f.fmu.Unlock()
	if n <= f.failures {
		return nil, errUpstream
	}
	return f.mapAnswerer.Answer(ctx, payloads)
}

func (f *flakyAnswerer) attemptTimes() []time.Time {
	f.fmu.Lock()
	defer f.fmu.Unlock()
	return append([]time.Time(nil), f.attempts...)
}

// failingAnswerer never answers a batch holding a "poison" input, and
// answers other batches like its mapAnswerer; with poison "" it always fails.
type failingAnswerer struct {
	*mapAnswerer
	poison string

	fmu   sync.Mutex
	fails int
}

func (f *failingAnswerer) Answer(ctx context.Context, payloads []string) ([]Answer, error) {
	for _, p := range payloads {
		if f.poison == "" || strings.HasPrefix(p, f.poison) {
			f.fmu.Lock()
			f.fails++
			f.fmu.Unlock()
			return nil, errUpstream
		}
	}
	return f.mapAnswerer.Answer(ctx, payloads)
}

func (f *failingAnswerer) failures() int {
	f.fmu.Lock()
	defer f.fmu.Unlock()
	return f.fails
}

// recExecutor records what the engine hands it and runs nothing.
type recExecutor struct {
	mu       sync.Mutex
	enqueued []string
	canceled []string
}

func (r *recExecutor) Enqueue(ctx context.Context, j *Job) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.enqueued = append(r.enqueued, j.ID)
	return nil
}

func (r *recExecutor) Cancel(ctx context.Context, jobID string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.canceled = append(r.canceled, jobID)
	return nil
}

// env is an engine on a private Redis with one funded account.
type env struct {
	t       *testing.T
	ctx     context.Context
	rdb     redis.UniversalClient
	st      *Store
	bl      *billing.Billing
	eng     *Engine
	exec    *recExecutor
	p       *accounts.Principal
	balance credits.Amount
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvOn(t, testredis.Universal(t))
}

// processor returns a processor of the test family with small batches, so
// a shard takes several Answer calls.
func (e *env) processor(owner string, fam Answerer) *Processor {
	p := NewProcessor(e.st, map[string]Answerer{testFamily: fam}, discard)
	p.Owner = owner
	p.BatchSize = 4
	return p
}

// slugs builds a submission: each value is a row; a value starting with "!"
// is an invalid row (its reason is the rest). Valid values are deduplicated
// case- and space-insensitively, like the real families do with their
// normalizers: "Acme", " acme " and "ACME" are one input "acme".
func slugs(values ...string) *Builder {
	b := NewBuilder(testFamily, len(values))
	for _, v := range values {
		addSlug(b, v)
	}
	return b
}

func addSlug(b *Builder, v string) {
	if reason, ok := strings.CutPrefix(v, "!"); ok {
		b.AddInvalid(v, reason)
		return
	}
	key := strings.ToLower(strings.TrimSpace(v))
	b.AddValid(v, key, key)
}

func (e *env) submit(b *Builder) *Job {
	e.t.Helper()
	j, err := e.eng.Submit(e.ctx, e.p, b, Metering{Price: credits.Whole(1)})
	if err != nil {
		e.t.Fatalf("submit: %v", err)
	}
	return j
}

func (e *env) get(id string) *Job {
	e.t.Helper()
	j, err := e.st.Get(e.ctx, id)
	if err != nil {
		e.t.Fatalf("get %s: %v", id, err)
	}
	return j
}

func (e *env) active(id string) bool {
	e.t.Helper()
	ok, err := e.rdb.SIsMember(e.ctx, activeKey, id).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return ok
}

// answers reads a job's stored answers by distinct index.
func (e *env) answers(id string) map[int]Answer {
	e.t.Helper()
	m, err := e.rdb.HGetAll(e.ctx, answersKey(id)).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	out := make(map[int]Answer, len(m))
	for k, v := range m {
		var i int
		if err := json.Unmarshal([]byte(k), &i); err != nil {
			e.t.Fatalf("answer field %q: %v", k, err)
		}
		o, d, _ := strings.Cut(v, "\n")
		out[i] = Answer{Outcome: o, Data: []byte(d)}
	}
	return out
}

// jobKeysLeft lists every key of a job still in Redis, leases included.
func (e *env) jobKeysLeft(id string) []string {
	e.t.Helper()
	return e.keys(prefix + "job:{" + id + "}*")
}

// keys lists the keys matching pattern on every master (KEYS on a
// cluster client asks one node only).
func (e *env) keys(pattern string) []string {
	e.t.Helper()
	var mu sync.Mutex
	var out []string
	scan := func(ctx context.Context, c *redis.Client) error {
		ks, err := c.Keys(ctx, pattern).Result()
		mu.Lock()
		out = append(out, ks...)
		mu.Unlock()
		return err
	}
	var err error
	if cc, ok := e.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(e.ctx, scan)
	} else {
		err = scan(e.ctx, e.rdb.(*redis.Client))
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// TestMain stops the shared Redis Cluster of BULKD_TEST_REDIS=cluster runs.
func TestMain(m *testing.M) { testredis.Main(m) }

// expectCounts checks a job's counters against what its builder implies
// when every distinct input has been answered with outcome(index).
func expectCounts(t *testing.T, j *Job, b *Builder, outcome func(i int) string) {
	t.Helper()
	want := map[string]int64{}
	for i, in := range b.inputs {
		want[outcome(i)] += in.Rows
	}
	if j.RowsProcessed != j.TotalRows || j.Pending() != 0 {
		t.Errorf("rows_processed %d, total_rows %d, pending %d", j.RowsProcessed, j.TotalRows, j.Pending())
	}
	if j.DistinctProcessed != j.Distinct {
		t.Errorf("distinct_processed %d, distinct %d", j.DistinctProcessed, j.Distinct)
	}
	var sum int64
	for o, n := range j.Outcomes {
		sum += n
		if want[o] != n {
			t.Errorf("outcome %s: %d rows, want %d", o, n, want[o])
		}
	}
	for o, n := range want {
		if j.Outcomes[o] != n {
			t.Errorf("outcome %s: %d rows, want %d", o, j.Outcomes[o], n)
		}
	}
	if sum+j.TotalInvalid != j.TotalRows {
		t.Errorf("outcomes sum %d + invalid %d != total rows %d", sum, j.TotalInvalid, j.TotalRows)
	}
	if j.Status != StatusCompleted || j.CompletedAt.IsZero() {
		t.Errorf("status %q completed_at %v, want completed", j.Status, j.CompletedAt)
	}
}

// waitJob polls until the job completes or d passes.
func (e *env) waitJob(id string, d time.Duration) *Job {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for {
		j := e.get(id)
		if j.Status == StatusCompleted {
			return j
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("job %s not completed after %v: %d/%d rows, %d/%d distinct, %d/%d shards", id, d,
				j.RowsProcessed, j.TotalRows, j.DistinctProcessed, j.Distinct, j.ShardsDone, j.Shards)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
