// Package rowcache keeps the rendered results rows of completed jobs in
// memory, so that reading a page of a finished job is one metadata read and
// a write of bytes already made.
//
// A completed job's rows never change: the row map is written once at
// submission and every answer once (HSETNX) before the job is marked
// completed in the same script. Its rendered rows can therefore be kept
// without invalidation; only deletion (retention, a deleted BulkJob) ends
// them, and every read checks the job's metadata in Redis first, so a deleted
// job is never served from here (its entries just wait for eviction). The
// cache is bounded in bytes and evicts the least recently used chunk.
package rowcache

import (
	"container/list"
	"errors"
	"sync"
	"sync/atomic"
)

// Chunk is one row-map chunk of a job rendered: each row's JSON object,
// separated by commas, so that any run of consecutive rows is one slice.
type Chunk struct {
	Data  []byte  // row objects separated by ','
	Ends  []int32 // Ends[i] is where row i ends in Data
	Total int64   // the job's total rows (the window arithmetic needs it)
}

// Rows is how many rows the chunk holds.
func (c *Chunk) Rows() int { return len(c.Ends) }

// Slice returns rows [lo, hi) as comma-separated objects (lo < hi).
func (c *Chunk) Slice(lo, hi int) []byte {
	start := 0
	if lo > 0 {
		start = int(c.Ends[lo-1]) + 1 // skip the separating comma
	}
	return c.Data[start:c.Ends[hi-1]]
}

// size is what the chunk costs in memory, roughly: the data, the row ends
// and the bookkeeping around them.
func (c *Chunk) size() int64 { return int64(cap(c.Data)) + 4*int64(cap(c.Ends)) + 160 }

type key struct {
	job   string
	chunk int
}

type entry struct {
	key   key
	chunk *Chunk
}

type call struct {
	done  chan struct{}
	chunk *Chunk
	err   error
}

// Cache is a byte-bounded LRU of rendered chunks. The zero value is not
// usable; New makes one. A nil *Cache is a cache that holds nothing.
type Cache struct {
	max int64

	mu     sync.Mutex
	used   int64
	ll     *list.List // front: most recently used
	items  map[key]*list.Element
	flight map[key]*call

	hits, misses, evictions atomic.Int64
}

// New returns a cache that holds at most maxBytes of rendered rows.
func New(maxBytes int64) *Cache {
	return &Cache{max: maxBytes, ll: list.New(), items: map[key]*list.Element{}, flight: map[key]*call{}}
}

// Get returns a cached chunk. job is whatever names a job's rendering to
// the caller (internal/jobs: the job id with the family it was rendered
// for, so rows of one shape are never served for another).
func (c *Cache) Get(job string, chunk int) (*Chunk, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key{job, chunk}]
	if !ok {
		return nil, false
	}
	c.ll.MoveToFront(el)
	c.hits.Add(1)
	return el.Value.(*entry).chunk, true
}

// Load returns the chunk from the cache or, once for all concurrent callers,
// from fill, and keeps what fill made. A chunk larger than the whole cache is
// returned but not kept. A failed fill is not remembered.
func (c *Cache) Load(job string, chunk int, fill func() (*Chunk, error)) (*Chunk, error) {
	if c == nil {
		return fill()
	}
	k := key{job, chunk}
	c.mu.Lock()
	if el, ok := c.items[k]; ok {
		c.ll.MoveToFront(el)
		c.mu.Unlock()
		c.hits.Add(1)
		return el.Value.(*entry).chunk, nil
	}
	if f, ok := c.flight[k]; ok {
		c.mu.Unlock()
		<-f.done
		c.hits.Add(1)
		return f.chunk, f.err
	}
	f := &call{done: make(chan struct{}), err: errFillPanicked}
	c.flight[k] = f
	c.mu.Unlock()
	c.misses.Add(1)
	// Deferred so that a fill that panics still releases its waiters (with
	// errFillPanicked) and the next reader tries again.
	defer func() {
		c.mu.Lock()
		delete(c.flight, k)
		if f.err == nil {
			c.add(k, f.chunk)
		}
		c.mu.Unlock()
		close(f.done)
	}()
	f.chunk, f.err = fill()
	return f.chunk, f.err
}

// errFillPanicked is what waiters get when the fill they waited on panicked.
var errFillPanicked = errors.New("rowcache: fill panicked")

// add keeps ch under k and evicts from the back until the cache fits.
// Called with mu held.
func (c *Cache) add(k key, ch *Chunk) {
	sz := ch.size()
	if sz > c.max {
		return
	}
	c.items[k] = c.ll.PushFront(&entry{key: k, chunk: ch})
	c.used += sz
	for c.used > c.max {
		c.remove(c.ll.Back())
		c.evictions.Add(1)
	}
}

func (c *Cache) remove(el *list.Element) {
	e := c.ll.Remove(el).(*entry)
	delete(c.items, e.key)
	c.used -= e.chunk.size()
}

// DropJob forgets every chunk of a job (it was found deleted).
func (c *Cache) DropJob(job string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, el := range c.items {
		if k.job == job {
			c.remove(el)
		}
	}
}

// Stats are the cache's counters.
type Stats struct {
	Bytes, MaxBytes, Chunks int64
	Hits, Misses, Evictions int64
}

// Stats returns the counters. Hits count chunk reads served from memory
// (including waiting for another reader's fill); misses count fills.
func (c *Cache) Stats() Stats {
	if c == nil {
		return Stats{}
	}
	c.mu.Lock()
	s := Stats{Bytes: c.used, MaxBytes: c.max, Chunks: int64(len(c.items))}
	c.mu.Unlock()
	s.Hits, s.Misses, s.Evictions = c.hits.Load(), c.misses.Load(), c.evictions.Load()
	return s
}
