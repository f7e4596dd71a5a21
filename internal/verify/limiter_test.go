package verify_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/bulkd/bulkd/internal/verify"
)

// hammer runs workers goroutines that each open sessions to host through
// their limiter (round robin over lims) for d, holding each for hold, and
// returns the highest number of sessions open at once and the start times.
func hammer(t *testing.T, lims []verify.HostLimiter, host string, workers int, d, hold time.Duration) (int64, []time.Time) {
	t.Helper()
	var open, peak atomic.Int64
	var mu sync.Mutex
	var starts []time.Time
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		lim := lims[i%len(lims)]
		wg.Go(func() {
			for ctx.Err() == nil {
				release, err := lim.Acquire(ctx, host)
				if err != nil {
					var we *verify.WaitError
					if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &we) {
						return
					}
					t.Error(err)
					return
				}
				n := open.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				mu.Lock()
				starts = append(starts, time.Now())
				mu.Unlock()
				time.Sleep(hold)
				open.Add(-1)
				release()
			}
		})
	}
	wg.Wait()
	return peak.Load(), starts
}

func TestRedisLimiterCapAcrossProcesses(t *testing.T) {
	srv := testredis.Start(t)
	// Two "processes": separate clients and limiters on one Redis.
	var lims []verify.HostLimiter
	for i := 0; i < 2; i++ {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 32})
		t.Cleanup(func() { _ = rdb.Close() })
		lims = append(lims, verify.NewRedisLimiter(rdb, verify.LimiterOptions{SessionsPerHost: 3, SessionsPerSecond: 1000}))
	}
	peak, starts := hammer(t, lims, "mx.example", 12, 1500*time.Millisecond, 20*time.Millisecond)
	if peak > 3 {
		t.Fatalf("%d sessions open at once, cap 3", peak)
	}
	if peak < 3 || len(starts) < 30 {
		t.Fatalf("limiter too strict: peak %d, %d sessions", peak, len(starts))
	}
	t.Logf("peak %d, %d sessions", peak, len(starts))
}

func TestRedisLimiterRate(t *testing.T) {
	rdb, _ := testredis.Client(t)
	a := verify.NewRedisLimiter(rdb, verify.LimiterOptions{SessionsPerHost: 2, SessionsPerSecond: 10})
	b := verify.NewRedisLimiter(rdb, verify.LimiterOptions{SessionsPerHost: 2, SessionsPerSecond: 10})
	_, starts := hammer(t, []verify.HostLimiter{a, b}, "mx.rate", 6, 1200*time.Millisecond, 0)
	// GCRA at 10/s with a burst of 2: at most 2 + 10*1.2 = 14 starts.
	if n := len(starts); n > 14 || n < 8 {
		t.Fatalf("%d sessions started in 1.2s at 10/s", n)
	}
}

func TestRedisLimiterLeaseExpires(t *testing.T) {
	srv := testredis.Start(t)
	crashed := redis.NewClient(&redis.Options{Addr: srv.Addr})
	opts := verify.LimiterOptions{SessionsPerHost: 1, SessionsPerSecond: 100, LeaseTTL: 400 * time.Millisecond}
	dead := verify.NewRedisLimiter(crashed, opts)
	if _, err := dead.Acquire(context.Background(), "mx.lease"); err != nil {
		t.Fatal(err)
	}
	// The holder's process "crashes": its connection goes, it never
	// releases or renews.
	_ = crashed.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	live := verify.NewRedisLimiter(rdb, opts)
	start := time.Now()
	release, err := live.Acquire(context.Background(), "mx.lease")
	if err != nil {
		t.Fatal(err)
	}
	release()
	if d := time.Since(start); d < 300*time.Millisecond || d > 2*time.Second {
		t.Fatalf("slot freed after %v, want about the 400ms lease", d)
	}

	// A live holder renews past its lease.
	release, err = live.Acquire(context.Background(), "mx.lease")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(900 * time.Millisecond)
	if n, _ := live.Holders(context.Background(), "mx.lease"); n != 1 {
		t.Fatalf("live holder lost its lease: %d holders", n)
	}
	release()
	if n, _ := live.Holders(context.Background(), "mx.lease"); n != 0 {
		t.Fatalf("%d holders after release", n)
	}
}

func testBackoff(t *testing.T, lim verify.BackoffAwareLimiter) {
	ctx := context.Background()
	if err := lim.Backoff(ctx, "mx.busy", 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	rel, left, err := lim.AcquireOrBackoff(ctx, "mx.busy")
	if err != nil || rel != nil || left <= 0 || left > 500*time.Millisecond {
		t.Fatalf("AcquireOrBackoff in back-off: %v %v %v", rel != nil, left, err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	var we *verify.WaitError
	if _, err := lim.Acquire(short, "mx.busy"); !errors.As(err, &we) || we.RetryAfter <= 100*time.Millisecond {
		t.Fatalf("Acquire with a deadline inside the back-off: %v", err)
	}
	start := time.Now()
	rel, err = lim.Acquire(ctx, "mx.busy")
	if err != nil {
		t.Fatal(err)
	}
	rel()
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("Acquire did not wait for the back-off: %v", d)
	}
	// Other hosts are not affected.
	rel, _, err = lim.AcquireOrBackoff(ctx, "mx.other")
	if err != nil || rel == nil {
		t.Fatalf("other host: %v", err)
	}
	rel()
}

func TestRedisLimiterBackoff(t *testing.T) {
	rdb, _ := testredis.Client(t)
	testBackoff(t, verify.NewRedisLimiter(rdb, verify.LimiterOptions{}))
}

func TestLocalLimiter(t *testing.T) {
	testBackoff(t, verify.NewLocalLimiter(verify.LimiterOptions{}))
	lim := verify.NewLocalLimiter(verify.LimiterOptions{SessionsPerHost: 3, SessionsPerSecond: 1000})
	peak, starts := hammer(t, []verify.HostLimiter{lim}, "mx.local", 10, 500*time.Millisecond, 10*time.Millisecond)
	if peak != 3 || len(starts) < 30 {
		t.Fatalf("peak %d, %d sessions", peak, len(starts))
	}
	rate := verify.NewLocalLimiter(verify.LimiterOptions{SessionsPerHost: 2, SessionsPerSecond: 10})
	if _, starts := hammer(t, []verify.HostLimiter{rate}, "mx.rate", 4, time.Second, 0); len(starts) > 12 || len(starts) < 8 {
		t.Fatalf("%d sessions in 1s at 10/s", len(starts))
	}
}

// TestRedisLimiterFallback: with Redis gone the limiter still limits, in
// process.
func TestRedisLimiterFallback(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer rdb.Close()
	lim := verify.NewRedisLimiter(rdb, verify.LimiterOptions{SessionsPerHost: 2, SessionsPerSecond: 1000})
	peak, starts := hammer(t, []verify.HostLimiter{lim}, "mx.down", 6, 500*time.Millisecond, 10*time.Millisecond)
	if peak > 2 || len(starts) == 0 {
		t.Fatalf("fallback: peak %d, %d sessions", peak, len(starts))
	}
}
