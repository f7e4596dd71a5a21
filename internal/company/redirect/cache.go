package redirect

import (
	"container/list"
	"sync"
	"time"
)

// cache is a bounded LRU of results with a fixed time to live. A nil *cache
// is a disabled cache: get misses, put does nothing.
type cache struct {
	mu   sync.Mutex
	size int
	ttl  time.Duration
	now  func() time.Time
	ll   *list.List               // front = most recently used
	m    map[string]*list.Element // value: *cacheEntry
}

type cacheEntry struct {
	key     string
	r       Result
	expires time.Time
}

func newCache(size int, ttl time.Duration, now func() time.Time) *cache {
	return &cache{size: size, ttl: ttl, now: now, ll: list.New(), m: make(map[string]*list.Element)}
}

func (c *cache) get(key string) (Result, bool) {
	if c == nil {
		return Result{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.m[key]
	if !ok {
		return Result{}, false
	}
	e := el.Value.(*cacheEntry)
	if !c.now().Before(e.expires) {
		c.ll.Remove(el)
		delete(c.m, key)
		return Result{}, false
	}
	c.ll.MoveToFront(el)
	return e.r, true
}

func (c *cache) put(key string, r Result) {
	if c != nil {
		c.putFor(key, r, c.ttl)
	}
}

// putFor stores r for ttl instead of the cache's own time to live; a ttl of
// zero or less stores nothing.
func (c *cache) putFor(key string, r Result, ttl time.Duration) {
	if c == nil || ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	exp := c.now().Add(ttl)
	if el, ok := c.m[key]; ok {
		e := el.Value.(*cacheEntry)
		e.r, e.expires = r, exp
		c.ll.MoveToFront(el)
		return
	}
	c.m[key] = c.ll.PushFront(&cacheEntry{key: key, r: r, expires: exp})
	for c.ll.Len() > c.size {
		oldest := c.ll.Back()
		c.ll.Remove(oldest)
		delete(c.m, oldest.Value.(*cacheEntry).key)
	}
}

func (c *cache) len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}
