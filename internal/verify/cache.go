package verify

import (
	"sync"
	"time"
)

// ttlCache is a bounded map of values that expire. When full it first drops
// expired entries and then, if still full, an arbitrary eighth of the rest
// (Go's map order is random): cheaper than LRU bookkeeping on every hit, and
// good enough for caches whose entries are cheap to recompute.
type ttlCache[K comparable, V any] struct {
	mu  sync.Mutex
	max int
	m   map[K]ttlEntry[V]
}

type ttlEntry[V any] struct {
	v   V
	exp time.Time
}

func newTTLCache[K comparable, V any](max int) *ttlCache[K, V] {
	return &ttlCache[K, V]{max: max, m: make(map[K]ttlEntry[V])}
}

func (c *ttlCache[K, V]) get(k K, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok || !now.Before(e.exp) {
		var zero V
		return zero, false
	}
	return e.v, true
}

func (c *ttlCache[K, V]) put(k K, v V, exp time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
		now := time.Now()
		for kk, e := range c.m {
			if !now.Before(e.exp) {
				delete(c.m, kk)
			}
		}
		if drop := len(c.m) - c.max + max(c.max/8, 1); drop > 0 && len(c.m) >= c.max {
			for kk := range c.m {
				delete(c.m, kk)
				if drop--; drop == 0 {
					break
				}
			}
		}
	}
	c.m[k] = ttlEntry[V]{v: v, exp: exp}
}

func (c *ttlCache[K, V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
