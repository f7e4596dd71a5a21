package verify

import (
	"context"
	"sync"
)

// gate bounds, per key, how many goroutines of this process may hold or
// ask Redis for a slot at once. A process can never hold more than a
// key's cap, so further waiters need not poll Redis: they wait here, in
// FIFO order, and each release hands its ticket to the next. With a
// thousand tenants' MX names on one provider's servers in a batch, this
// keeps Redis traffic at the cap's few pollers per server instead of one
// poller per waiting session.
type gate struct {
	mu      sync.Mutex
	entries map[string]*gateEntry
}

type gateEntry struct {
	n       int             // tickets out
	waiters []chan struct{} // closed when handed a ticket
}

// enter takes a ticket of key (at most limit out), waiting until one is
// free or ctx ends. The returned leave gives it back; call it once.
func (g *gate) enter(ctx context.Context, key string, limit int) (leave func(), err error) {
	g.mu.Lock()
	if g.entries == nil {
		g.entries = map[string]*gateEntry{}
	}
	e := g.entries[key]
	if e == nil {
		e = &gateEntry{}
		g.entries[key] = e
	}
	leave = func() { g.leave(key) }
	if e.n < max(limit, 1) {
		e.n++
		g.mu.Unlock()
		return leave, nil
	}
	ch := make(chan struct{})
	e.waiters = append(e.waiters, ch)
	g.mu.Unlock()
	select {
	case <-ch:
		return leave, nil
	case <-ctx.Done():
		g.mu.Lock()
		for i, w := range e.waiters {
			if w == ch {
				e.waiters = append(e.waiters[:i], e.waiters[i+1:]...)
				g.mu.Unlock()
				return nil, ctx.Err()
			}
		}
		g.mu.Unlock()
		// Handed a ticket meanwhile: pass it on.
		g.leave(key)
		return nil, ctx.Err()
	}
}

func (g *gate) leave(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e := g.entries[key]
	if e == nil {
		return
	}
	if len(e.waiters) > 0 {
		close(e.waiters[0])
		e.waiters = e.waiters[1:]
		return // the ticket passes on: n is unchanged
	}
	e.n--
	if e.n <= 0 {
		delete(g.entries, key)
	}
}
