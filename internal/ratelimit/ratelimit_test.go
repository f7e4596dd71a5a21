package ratelimit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/testredis"
)

func TestBurstOfHundredLetsTwentyThrough(t *testing.T) {
	rdb, _ := testredis.Client(t)
	l := New(rdb, 20)
	ctx := context.Background()
	_ = rdb.Ping(ctx) // warm the pool so the burst is not spread by dialing
	var mu sync.Mutex
	allowed, fives := 0, 0
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := l.Allow(ctx, "key1")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if r.Allowed {
				allowed++
			} else if r.RetryAfter == 5 {
				fives++
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	// GCRA refills one request every 50 ms; the burst must finish inside
	// that for "exactly 20" to be the right expectation.
	if elapsed < 50*time.Millisecond && allowed != 20 {
		t.Fatalf("allowed %d of 100 in %v, want 20", allowed, elapsed)
	}
	if allowed < 20 || allowed > 20+int(elapsed/(50*time.Millisecond)) {
		t.Fatalf("allowed %d of 100 in %v", allowed, elapsed)
	}
	if fives == 0 {
		t.Fatalf("no Retry-After 5 although the limit was exceeded 5x")
	}
	// Another key has its own budget.
	if r, _ := l.Allow(ctx, "key2"); !r.Allowed || r.Remaining != 19 {
		t.Fatalf("key2: %+v", r)
	}
}

func TestRetryAfterOneWhenSlightlyOver(t *testing.T) {
	rdb, _ := testredis.Client(t)
	l := New(rdb, 20)
	ctx := context.Background()
	var last Result
	for i := 0; i < 25; i++ {
		last, _ = l.Allow(ctx, "k")
	}
	if last.Allowed || last.RetryAfter != 1 {
		t.Fatalf("25th request: %+v", last)
	}
	if last.Reset.Before(time.Now()) || last.Reset.After(time.Now().Add(3*time.Second)) {
		t.Fatalf("reset %v", last.Reset)
	}
}
