package jobs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/rowcache"
)

// renderer is a Renderer made of a family name and a row function.
type renderer struct {
	name string
	row  RenderRow
}

func (r renderer) Name() string { return r.name }
func (r renderer) RenderRow(buf *bytes.Buffer, row Row, ans *StoredAnswer) {
	r.row(buf, row, ans)
}

// renderTest renders the test family's rows.
var renderTest = renderer{testFamily, renderTestRow}

// renderTestRow is the test family's row shape: enough of the row and its
// answer that any mix-up (wrong row, wrong answer, lost duplicate flag)
// shows in the bytes.
func renderTestRow(buf *bytes.Buffer, row Row, ans *StoredAnswer) {
	v := map[string]any{"index": row.Index, "echo": row.Echo, "first": row.First, "reason": row.Reason}
	if ans != nil {
		v["outcome"], v["data"] = ans.Outcome, ans.Data
	} else if row.Index >= 0 {
		v["outcome"] = "pending"
	}
	b, _ := json.Marshal(v)
	buf.Write(b)
}

func joined(t *testing.T, r *Results) string {
	t.Helper()
	var b bytes.Buffer
	n, err := r.WriteTo(&b)
	if err != nil || int(n) != r.Len() || b.Len() != r.Len() {
		t.Fatalf("WriteTo wrote %d (%v), Len says %d", n, err, r.Len())
	}
	return b.String()
}

// completedJob submits total rows over total/3 distinct inputs (so most
// rows are duplicates) with an invalid row every 97, and answers them all.
func completedJob(t *testing.T, e *env, total int) *Job {
	t.Helper()
	b := NewBuilder(testFamily, 0)
	for i := 0; i < total; i++ {
		if i%97 == 13 {
			addSlug(b, fmt.Sprintf("!bad %d", i))
		} else {
			addSlug(b, fmt.Sprintf("co-%d", i%max(total/3, 1)))
		}
	}
	j := e.submit(b)
	var recs []Recorded
	for i := 0; i < b.Distinct(); i++ {
		recs = append(recs, rec(i, b.inputs[i].Rows, OutcomeFound, fmt.Sprintf(`{"i":%d}`, i)))
	}
	if _, err := e.st.Record(e.ctx, j, time.Now(), recs); err != nil {
		t.Fatal(err)
	}
	if got := e.get(j.ID); got.Status != StatusCompleted {
		t.Fatalf("job not completed: %+v", got)
	}
	return j
}

// Pages of a completed job served from the row cache are byte for byte the
// pages rendered live from Redis, for every kind of window: inside one
// chunk, across two, the last partial chunk, past the end.
func TestResultsCachedEqualsLive(t *testing.T) {
	windows := []struct{ offset, limit int }{
		{0, 50}, {0, 500}, {450, 100}, {499, 2}, {250, 500}, {500, 500}, {999, 2}, {700, 500},
		{1000, 500}, {1150, 500}, {1202, 1}, {1200, 50}, {1203, 50}, {5000, 10}, {998, 500},
	}
	for _, total := range []int{1203, 1000, 7} {
		t.Run(fmt.Sprint(total), func(t *testing.T) {
			e := newEnv(t)
			j := completedJob(t, e, total)
			live := *e.eng
			live.RowCache = nil
			e.eng.RowCache = rowcache.New(64 << 20)
			for pass := 0; pass < 2; pass++ { // the first pass fills, the second reads the cache
				for _, w := range windows {
					want, err := live.Results(e.ctx, e.p.Key.ID, j.ID, w.offset, w.limit, renderTest)
					if err != nil {
						t.Fatal(err)
					}
					got, err := e.eng.Results(e.ctx, e.p.Key.ID, j.ID, w.offset, w.limit, renderTest)
					if err != nil {
						t.Fatal(err)
					}
					if g, w2 := joined(t, got), joined(t, want); g != w2 {
						t.Fatalf("pass %d window %d+%d: cached\n%.300s\nlive\n%.300s", pass, w.offset, w.limit, g, w2)
					}
					inWindow := w.offset < total
					if got.Cached != inWindow {
						t.Errorf("pass %d window %d+%d: cached=%v", pass, w.offset, w.limit, got.Cached)
					}
					if got.Job.RowsProcessed != int64(total) || got.Job.TotalRows != int64(total) {
						t.Errorf("page job %+v", got.Job)
					}
					got.Release()
					want.Release()
				}
			}
			s := e.eng.RowCache.Stats()
			if chunks := int64((total + RowChunk - 1) / RowChunk); s.Chunks != chunks || s.Misses != chunks {
				t.Errorf("cache holds %d chunks after %d fills, want %d", s.Chunks, s.Misses, chunks)
			}
		})
	}
}

// Once a completed job's chunks are cached, a page reads only the job's
// metadata: it still proves the job exists and belongs to the key.
func TestResultsCacheStillChecksTheJob(t *testing.T) {
	e := newEnv(t)
	j := completedJob(t, e, 1203)
	e.eng.RowCache = rowcache.New(64 << 20)
	read := func(keyID string) (string, error) {
		r, err := e.eng.Results(e.ctx, keyID, j.ID, 300, 500, renderTest)
		if err != nil {
			return "", err
		}
		defer r.Release()
		return joined(t, r), nil
	}
	first, err := read(e.p.Key.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The answers are no longer needed: removing them changes nothing.
	e.rdb.Del(e.ctx, answersKey(j.ID), rowsKey(j.ID))
	if again, err := read(e.p.Key.ID); err != nil || again != first {
		t.Fatalf("cached page changed or failed: %v", err)
	}
	if _, err := read("another-key"); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("another key read a cached page: %v", err)
	}
	// A deleted (or expired) job is gone at once, and its chunks with it.
	if err := e.st.Delete(e.ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := read(e.p.Key.ID); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("deleted job: %v", err)
	}
	if s := e.eng.RowCache.Stats(); s.Chunks != 0 || s.Bytes != 0 {
		t.Errorf("deleted job still cached: %+v", s)
	}
}

// A job asked for with another family's renderer is not found, and
// nothing is rendered for it or cached (issue 18: a company job's id sent
// to the verification mount filled the cache with verification-shaped
// rows that the company mount then served). Also when the job's own
// family has filled the cache first.
func TestResultsOfAnotherFamily(t *testing.T) {
	e := newEnv(t)
	j := completedJob(t, e, 1203)
	e.eng.RowCache = rowcache.New(64 << 20)
	rendered := 0
	other := renderer{"another_family", func(buf *bytes.Buffer, row Row, ans *StoredAnswer) {
		rendered++
		buf.WriteString(`{"shape":"wrong"}`)
	}}
	for pass := 0; pass < 2; pass++ {
		if r, err := e.eng.Results(e.ctx, e.p.Key.ID, j.ID, 0, 500, other); !errors.Is(err, ErrJobNotFound) {
			t.Fatalf("pass %d: another family's read: %v %+v", pass, err, r)
		}
		if rendered != 0 {
			t.Fatalf("pass %d: %d rows rendered for another family", pass, rendered)
		}
		r, err := e.eng.Results(e.ctx, e.p.Key.ID, j.ID, 0, 500, renderTest)
		if err != nil {
			t.Fatal(err)
		}
		if got := joined(t, r); bytes.Contains([]byte(got), []byte("wrong")) || !r.Cached {
			t.Fatalf("pass %d: the family's own read (cached=%v): %.200s", pass, r.Cached, got)
		}
		r.Release()
	}
	if s := e.eng.RowCache.Stats(); s.Chunks != 1 {
		t.Errorf("cache holds %d chunks, want the one of the job's own family", s.Chunks)
	}
}

// A running job is never cached: its pending rows change.
func TestResultsRunningJobIsLive(t *testing.T) {
	e := newEnv(t)
	j, _ := pageJob(t, e) // odd inputs pending
	e.eng.RowCache = rowcache.New(64 << 20)
	r, err := e.eng.Results(e.ctx, e.p.Key.ID, j.ID, 0, 500, renderTest)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	if r.Cached || !bytes.Contains([]byte(joined(t, r)), []byte(`"outcome":"pending"`)) {
		t.Errorf("running job page cached=%v or without pending rows", r.Cached)
	}
	if s := e.eng.RowCache.Stats(); s.Chunks != 0 || s.Misses != 0 {
		t.Errorf("running job touched the cache: %+v", s)
	}
}

// Random windows read concurrently through a cache that holds only about
// two chunks (so chunks are evicted and refilled all the time) are always
// the live pages.
func TestResultsCacheUnderEviction(t *testing.T) {
	e := newEnv(t)
	const total = 2*RowChunk + 317
	j := completedJob(t, e, total)
	live := *e.eng
	live.RowCache = nil
	want := map[[2]int]string{}
	type window struct{ offset, limit int }
	rnd := rand.New(rand.NewPCG(1, 2))
	var windows []window
	for range 60 {
		w := window{rnd.IntN(total + 20), 1 + rnd.IntN(500)}
		windows = append(windows, w)
		r, err := live.Results(e.ctx, e.p.Key.ID, j.ID, w.offset, w.limit, renderTest)
		if err != nil {
			t.Fatal(err)
		}
		want[[2]int{w.offset, w.limit}] = joined(t, r)
		r.Release()
	}
	// One rendered chunk of this job is about 60 KB.
	e.eng.RowCache = rowcache.New(130 << 10)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				w := windows[(g*7+i*13)%len(windows)]
				r, err := e.eng.Results(e.ctx, e.p.Key.ID, j.ID, w.offset, w.limit, renderTest)
				if err != nil {
					t.Error(err)
					return
				}
				var b bytes.Buffer
				_, _ = r.WriteTo(&b)
				r.Release()
				if b.String() != want[[2]int{w.offset, w.limit}] {
					t.Errorf("window %d+%d differs from the live page", w.offset, w.limit)
					return
				}
			}
		}()
	}
	wg.Wait()
	s := e.eng.RowCache.Stats()
	if s.Bytes > s.MaxBytes || s.Evictions == 0 {
		t.Errorf("cache %+v: over its bound, or never evicted (the test needs evictions)", s)
	}
}
