package jobs

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts/accountstest"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/testredis"
)

// newEnvOn is newEnv on a Redis the test controls (one it restarts).
func newEnvOn(t *testing.T, rdb redis.UniversalClient) *env {
	t.Helper()
	ctx := context.Background()
	bl := billing.New(rdb, nil)
	st := NewStore(rdb, bl)
	ex := &recExecutor{}
	eng := NewEngine(st, bl, ex, discard)
	eng.ShardSize = 10
	bal := credits.Whole(100_000)
	p := accountstest.PayAsYouGo(t, rdb, nil, "jobs test", bal)
	return &env{t: t, ctx: ctx, rdb: rdb, st: st, bl: bl, eng: eng, exec: ex, p: p, balance: bal}
}

// Redis stops (SIGKILL) while shards are being answered and stays away
// far longer than a shard's attempts last, then comes back on the same
// port and data. Nothing is given up: no row is answered as an error, no
// input is answered twice (the answers in hand when Redis went away are
// recorded once it is back), and the job completes on its own: the
// executor waits for Redis instead of spending the shards' attempts.
func TestLocalWaitsOutRedisRestart(t *testing.T) {
	d := testredis.StartDurable(t)
	rdb := redis.NewClient(&redis.Options{Addr: d.Addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1,
		ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	e := newEnvOn(t, rdb)
	j, b, known := directoryJob(t, e, 50, 30) // 3 shards of 10, batches of 4

	// The third Answer call (answers are recorded already, two shards are
	// under way) kills Redis while it "works".
	ans := newMapAnswerer(known)
	var once sync.Once
	var mu sync.Mutex
	calls := 0
	killed := make(chan struct{})
	ans.gate = func(ctx context.Context, payloads []string) error {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n != 3 {
			return nil
		}
		once.Do(func() {
			time.Sleep(1100 * time.Millisecond) // appendfsync everysec
			if err := d.Kill(); err != nil {
				t.Error(err)
			}
			close(killed)
		})
		return nil
	}
	l := e.local("w1", ans, 2)
	l.Attempts = 3
	l.Backoff = 20 * time.Millisecond
	l.ResumeEvery = time.Hour // no resume pass may rescue a shard given up on
	start(t, l)
	if err := l.Enqueue(e.ctx, j); err != nil {
		t.Fatal(err)
	}
	select {
	case <-killed:
	case <-time.After(10 * time.Second):
		t.Fatal("the third batch never started")
	}
	time.Sleep(3 * time.Second) // many times what three attempts take
	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	g := e.waitJob(j.ID, 15*time.Second)
	t.Logf("completed %v after Redis came back", time.Since(back).Round(time.Millisecond))
	expectCounts(t, g, b, outcomeOf(b, known)) // no error rows
	checkAnsweredOnce(t, b, ans)
	e.waitShardsDone(j)
}

// A Redis that does not answer is told apart from work that failed: the
// first makes the executor wait, the second uses up an attempt.
func TestStoreUnavailable(t *testing.T) {
	d := testredis.StartDurable(t)
	rdb := redis.NewClient(&redis.Options{Addr: d.Addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	st := NewStore(rdb, billing.New(rdb, nil))
	ctx := context.Background()
	if st.unavailable(ctx, errUpstream) {
		t.Error("an answerer's error with Redis up counted as Redis unavailable")
	}
	if st.unavailable(ctx, nil) || st.unavailable(ctx, ErrJobNotFound) {
		t.Error("nil or job-not-found counted as Redis unavailable")
	}
	if !st.unavailable(ctx, errors.New("LOADING Redis is loading the dataset in memory")) {
		// go-redis types server errors; a plain one with the prefix is
		// what a wrapped reply looks like once stringified.
		t.Log("a plain LOADING error is told by the ping instead")
	}
	if err := d.Kill(); err != nil {
		t.Fatal(err)
	}
	if !st.unavailable(ctx, errUpstream) {
		t.Error("Redis down not noticed")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if st.unavailable(cctx, errUpstream) {
		t.Error("a canceled context counted as Redis unavailable")
	}
	// awaitRedis gives up at its limit, and returns as soon as Redis is back.
	t0 := time.Now()
	if err := st.awaitRedis(ctx, 300*time.Millisecond, discard, "test"); err == nil || time.Since(t0) > 2*time.Second {
		t.Fatalf("await with Redis down: %v after %v", err, time.Since(t0))
	}
	go func() { time.Sleep(500 * time.Millisecond); _ = d.Restart() }()
	if err := st.awaitRedis(ctx, 20*time.Second, discard, "test"); err != nil {
		t.Fatal(err)
	}
}
