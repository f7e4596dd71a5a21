package verify

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestGate(t *testing.T) {
	var g gate
	var in, most atomic.Int64
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			leave, err := g.enter(context.Background(), "k", 2)
			if err != nil {
				t.Error(err)
				return
			}
			n := in.Add(1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(2 * time.Millisecond)
			in.Add(-1)
			leave()
		})
	}
	wg.Wait()
	if most.Load() != 2 {
		t.Fatalf("at most %d inside, want 2", most.Load())
	}
	// A waiter whose context ends leaves the queue; the tickets stay right.
	l1, _ := g.enter(context.Background(), "k", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := g.enter(ctx, "k", 1); err == nil {
		t.Fatal("entered a full gate")
	}
	l1()
	l2, err := g.enter(context.Background(), "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	l2()
	if len(g.entries) != 0 {
		t.Fatalf("entries left: %v", g.entries)
	}
}
