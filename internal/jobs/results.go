package jobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/bulkd/bulkd/internal/rowcache"
)

// RenderRow writes one results row as a JSON object: the family's row shape
// for row and its answer (nil while pending or for an invalid row).
type RenderRow func(buf *bytes.Buffer, row Row, ans *StoredAnswer)

// Results is a window of a job's rows rendered as JSON objects: the parts,
// joined with commas, are the contents of the page's results array.
type Results struct {
	Job   *Job
	Parts [][]byte
	// Cached says the rows came from (or went into) the row cache.
	Cached  bool
	release func()
}

// Len is the size of the rendered rows with their separators.
func (r *Results) Len() int {
	n := 0
	for i, p := range r.Parts {
		if i > 0 {
			n++
		}
		n += len(p)
	}
	return n
}

// WriteTo writes the rows, comma-separated.
func (r *Results) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for i, p := range r.Parts {
		if i > 0 {
			m, err := w.Write(comma)
			n += int64(m)
			if err != nil {
				return n, err
			}
		}
		m, err := w.Write(p)
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

var comma = []byte{','}

// Release gives back the buffer a live (not cached) window was rendered
// into; the parts must not be used afterwards.
func (r *Results) Release() {
	if r.release != nil {
		r.release()
		r.release = nil
	}
}

// Renderer renders the results rows of one family's jobs (a
// family.Family is one).
type Renderer interface {
	// Name is the family's name: the Family of the jobs it renders.
	Name() string
	RenderRow(buf *bytes.Buffer, row Row, ans *StoredAnswer)
}

// Results reads rows [offset, offset+limit) of a job keyID owns and renders
// them with f, which must be the job's family: a job of another family is
// ErrJobNotFound, checked before anything is rendered or cached (a
// company job's id asked through the verification mount must not leave
// verification-shaped rows behind for the company mount to serve).
//
// A completed job never changes, so with a RowCache its rows are rendered
// once per row chunk and kept: a page then costs one metadata read (which
// also proves the job still exists and is keyID's) and no answer traffic.
// A running job is read and rendered for each request, pending rows in
// place.
func (e *Engine) Results(ctx context.Context, keyID, jobID string, offset, limit int, f Renderer) (*Results, error) {
	ck := cacheKey(f.Name(), jobID)
	if parts, ok := e.cachedWindow(ck, offset, limit); ok {
		j, err := e.Store.Get(ctx, jobID)
		if errors.Is(err, ErrJobNotFound) {
			e.RowCache.DropJob(ck) // deleted or expired: stop holding it
		}
		if err != nil {
			return nil, err
		}
		if j.KeyID != keyID || j.Family != f.Name() {
			return nil, ErrJobNotFound
		}
		if j.Erased == 0 {
			return &Results{Job: j, Parts: parts, Cached: true}, nil
		}
		// A person was erased from it (redact.go) after its rows were
		// cached: the cache holds what was erased. Drop it, and render
		// from Redis from now on.
		e.RowCache.DropJob(ck)
	}
	p, err := e.Page(ctx, keyID, jobID, offset, limit)
	if err != nil {
		return nil, err
	}
	if p.Job.Family != f.Name() {
		return nil, ErrJobNotFound
	}
	render := f.RenderRow
	if e.RowCache != nil && p.Job.Status == StatusCompleted && p.Job.Erased == 0 && len(p.Rows) > 0 {
		parts, err := e.fillWindow(ctx, p, ck, offset, render)
		if err == nil {
			return &Results{Job: p.Job, Parts: parts, Cached: true}, nil
		}
		if !errors.Is(err, errIncomplete) {
			return nil, err
		}
		e.Log.Warn("completed job has unanswered rows; not caching it", "job", jobID)
	}
	buf := pageBuffers.Get().(*bytes.Buffer)
	// Rows are their answer's data plus a few hundred bytes of row fields.
	buf.Grow(p.AnswerBytes + len(p.Rows)*700)
	renderRows(buf, p, 0, len(p.Rows), render, nil)
	return &Results{Job: p.Job, Parts: [][]byte{buf.Bytes()}, release: func() { putPageBuffer(buf) }}, nil
}

// cacheKey is what a job's chunks are cached under: its id and the
// family they were rendered for. The family is checked before a chunk is
// rendered; keying by it as well means rows of one shape can never be
// served for another, whatever a caller passes.
func cacheKey(family, jobID string) string { return jobID + "/" + family }

// cachedWindow assembles the window from cached chunks alone (ck is the
// job's cacheKey).
func (e *Engine) cachedWindow(ck string, offset, limit int) ([][]byte, bool) {
	if e.RowCache == nil {
		return nil, false
	}
	first := offset / RowChunk
	ch, ok := e.RowCache.Get(ck, first)
	if !ok {
		return nil, false
	}
	end := min(int64(offset)+int64(limit), ch.Total)
	if int64(offset) >= end {
		return nil, false // past the end: the live path answers that cheaply
	}
	last := int((end - 1) / RowChunk)
	parts := make([][]byte, 0, last-first+1)
	for c := first; c <= last; c++ {
		if c != first {
			if ch, ok = e.RowCache.Get(ck, c); !ok {
				return nil, false
			}
		}
		lo, hi := max(offset-c*RowChunk, 0), min(int(end)-c*RowChunk, ch.Rows())
		if lo < hi {
			parts = append(parts, ch.Slice(lo, hi))
		}
	}
	return parts, true
}

// chunkFillTimeout bounds the read of one row chunk for the cache.
const chunkFillTimeout = 10 * time.Second

// fillWindow renders the row chunks a window of a completed job touches
// into the cache and returns the window from them. A chunk the window covers
// whole is rendered from the page already read; a partly covered one is read
// whole first (once per chunk, whoever asks). ck is the job's cacheKey.
func (e *Engine) fillWindow(ctx context.Context, p *Page, ck string, offset int, render RenderRow) ([][]byte, error) {
	id, total := p.Job.ID, p.Job.TotalRows
	end := offset + len(p.Rows)
	first, last := offset/RowChunk, (end-1)/RowChunk
	parts := make([][]byte, 0, last-first+1)
	for c := first; c <= last; c++ {
		cStart, cEnd := c*RowChunk, min((c+1)*RowChunk, int(total))
		ch, err := e.RowCache.Load(ck, c, func() (*rowcache.Chunk, error) {
			src, lo := p, cStart-offset
			if cStart < offset || cEnd > end {
				// Other readers may be waiting on this fill: it must not
				// fail because the reader that started it went away.
				fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), chunkFillTimeout)
				defer cancel()
				whole, err := e.Store.ReadPage(fctx, id, cStart, RowChunk)
				if err != nil {
					return nil, err
				}
				if len(whole.Rows) != cEnd-cStart {
					return nil, fmt.Errorf("job %s: row chunk %d has %d rows, want %d", id, c, len(whole.Rows), cEnd-cStart)
				}
				src, lo = whole, 0
			}
			return renderChunk(src, lo, lo+cEnd-cStart, total, render)
		})
		if err != nil {
			return nil, err
		}
		lo, hi := max(offset-cStart, 0), min(end-cStart, ch.Rows())
		if lo < hi {
			parts = append(parts, ch.Slice(lo, hi))
		}
	}
	return parts, nil
}

// errIncomplete: a chunk of a completed job has a row without its answer.
// That cannot happen (the last answer and the completion are one script),
// but a chunk rendered with a pending row would be served forever, so it is
// checked rather than assumed.
var errIncomplete = errors.New("completed job with unanswered rows")

func renderChunk(p *Page, lo, hi int, total int64, render RenderRow) (*rowcache.Chunk, error) {
	for _, row := range p.Rows[lo:hi] {
		if _, ok := p.Answers[row.Index]; row.Index >= 0 && !ok {
			return nil, errIncomplete
		}
	}
	// Render into a pooled buffer and keep an exact-size copy: the cache
	// then holds no spare capacity, and a chunk costs one allocation.
	buf := pageBuffers.Get().(*bytes.Buffer)
	defer putPageBuffer(buf)
	ends := make([]int32, 0, hi-lo)
	renderRows(buf, p, lo, hi, render, &ends)
	data := bytes.Clone(buf.Bytes())
	return &rowcache.Chunk{Data: data, Ends: ends, Total: total}, nil
}

// renderRows writes rows [lo, hi) of p, comma-separated, and notes where
// each ends when ends is not nil.
func renderRows(buf *bytes.Buffer, p *Page, lo, hi int, render RenderRow, ends *[]int32) {
	start := buf.Len()
	for i := lo; i < hi; i++ {
		if i > lo {
			buf.WriteByte(',')
		}
		row := p.Rows[i]
		var ans *StoredAnswer
		if a, ok := p.Answers[row.Index]; ok && row.Index >= 0 {
			ans = &a
		}
		render(buf, row, ans)
		if ends != nil {
			*ends = append(*ends, int32(buf.Len()-start))
		}
	}
}

// pageBuffers recycles the buffers live pages are rendered into: a 500-row
// page is up to about a megabyte, and allocating (and zeroing) one per
// request was the largest cost of serving it.
var pageBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

func putPageBuffer(b *bytes.Buffer) {
	if b.Cap() > 8<<20 { // do not pin memory for freak pages
		return
	}
	b.Reset()
	pageBuffers.Put(b)
}
