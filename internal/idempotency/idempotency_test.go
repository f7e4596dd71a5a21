package idempotency_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/idempotency"
	"github.com/bulkd/bulkd/internal/testredis"
)

// TestMain stops the shared Redis Cluster of BULKD_TEST_REDIS=cluster runs.
func TestMain(m *testing.M) { testredis.Main(m) }

// clock is a settable clock: the store judges TTL and lease by it.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type env struct {
	t   *testing.T
	ctx context.Context
	rdb redis.UniversalClient
	clk *clock
	st  *idempotency.Store
}

// newEnv is a store on a private Redis (or the shared cluster), with a
// 30 s lease and a 24 h TTL, on a clock the test moves.
func newEnv(t *testing.T) *env {
	rdb := testredis.Universal(t)
	clk := &clock{t: time.Now().Truncate(time.Millisecond)}
	return &env{t: t, ctx: context.Background(), rdb: rdb, clk: clk,
		st: idempotency.New(rdb, idempotency.Options{}, clk.Now)}
}

func (e *env) claim(rk, owner string) idempotency.Claimed {
	e.t.Helper()
	c, err := e.st.Claim(e.ctx, rk, owner)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *env) ttl(rk string) time.Duration {
	e.t.Helper()
	d, err := e.rdb.PTTL(e.ctx, rk).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

func TestDefaults(t *testing.T) {
	o := idempotency.Options{}.WithDefaults()
	if o.TTL != 24*time.Hour || o.Lease != 30*time.Second {
		t.Fatalf("defaults %+v", o)
	}
	if o := (idempotency.Options{TTL: time.Hour, Lease: time.Second}).WithDefaults(); o.TTL != time.Hour || o.Lease != time.Second {
		t.Fatalf("set options changed: %+v", o)
	}
}

// A key's record is hash-tagged with the API key id (all of one API key's
// records on one slot) and names the client's value only by its hash.
func TestKey(t *testing.T) {
	k := idempotency.Key("key1", "some value\x00 {with} braces")
	if !strings.HasPrefix(k, "bulkd:idem:{key1}:") || len(k) != len("bulkd:idem:{key1}:")+64 || strings.Contains(k, "value") {
		t.Fatalf("key %q", k)
	}
	if idempotency.Key("key1", "a") == idempotency.Key("key1", "b") || idempotency.Key("key1", "a") == idempotency.Key("key2", "a") {
		t.Fatal("distinct (API key, Idempotency-Key) pairs share a record")
	}
}

// One claim at a time: a second owner is told the key runs; after the
// answer is stored it is told the answer, until the TTL (by the store's
// clock, not only Redis expiry) has passed.
func TestClaimSaveReplayExpire(t *testing.T) {
	e := newEnv(t)
	rk := idempotency.Key("k", "idem-1")
	if c := e.claim(rk, "a"); c.State != idempotency.StateNew || c.PriorJob != "" || c.PriorCharge != "" {
		t.Fatalf("first claim %+v", c)
	}
	if d := e.ttl(rk); d <= 0 || d > 30*time.Second {
		t.Errorf("running claim expires in %v, want its 30 s lease", d)
	}
	if c := e.claim(rk, "b"); c.State != idempotency.StateRun {
		t.Fatalf("second claim %+v, want run", c)
	}
	if ok, err := e.st.Save(e.ctx, "acct", rk, "b", "fp", 200, "x/y", []byte("no")); err != nil || ok {
		t.Fatalf("a non-owner stored an answer: %v %v", ok, err)
	}
	if ok, err := e.st.Save(e.ctx, "acct", rk, "a", "fp1", 201, "application/json", []byte(`{"ok":true}`)); err != nil || !ok {
		t.Fatalf("save: %v %v", ok, err)
	}
	if d := e.ttl(rk); d < 23*time.Hour || d > 24*time.Hour {
		t.Errorf("stored answer expires in %v, want about 24 h", d)
	}
	want := idempotency.Claimed{State: idempotency.StateDone, FP: "fp1", Code: "201", ContentType: "application/json", Body: `{"ok":true}`}
	if c := e.claim(rk, "b"); c != want {
		t.Fatalf("replayed %+v, want %+v", c, want)
	}
	e.clk.Add(24 * time.Hour)
	if c := e.claim(rk, "b"); c.State != idempotency.StateNew {
		t.Fatalf("after the TTL: %+v, want a new claim", c)
	}
}

// A claim whose owner died frees itself when its lease ends (by the
// store's clock); renewing moves the lease on, and only its owner can.
func TestLeaseRenewAndExpiry(t *testing.T) {
	e := newEnv(t)
	rk := idempotency.Key("k", "idem-2")
	e.claim(rk, "a")
	e.clk.Add(20 * time.Second)
	if ok, err := e.st.Renew(e.ctx, rk, "b"); err != nil || ok {
		t.Fatalf("a non-owner renewed: %v %v", ok, err)
	}
	if ok, err := e.st.Renew(e.ctx, rk, "a"); err != nil || !ok {
		t.Fatalf("renew: %v %v", ok, err)
	}
	e.clk.Add(20 * time.Second) // 40 s after the claim, 20 s after the renewal
	if c := e.claim(rk, "b"); c.State != idempotency.StateRun {
		t.Fatalf("renewed claim taken over: %+v", c)
	}
	e.clk.Add(11 * time.Second)
	if c := e.claim(rk, "b"); c.State != idempotency.StateNew {
		t.Fatalf("after the lease: %+v, want a new claim", c)
	}
	if ok, err := e.st.Renew(e.ctx, rk, "a"); err != nil || ok {
		t.Fatalf("the dead owner renewed a claim it lost: %v %v", ok, err)
	}
}

// What a request records before it takes it (a job and its fingerprint, or
// a charge) outlives a dead owner's lease and is handed to the claim that
// takes over; renewals do not shorten such a record back to the lease.
func TestRecordHandedOverToRetry(t *testing.T) {
	e := newEnv(t)
	rk := idempotency.Key("k", "idem-3")
	e.claim(rk, "a")
	if ok, err := e.st.Record(e.ctx, rk, "b", "job", "j0"); err != nil || ok {
		t.Fatalf("a non-owner recorded: %v %v", ok, err)
	}
	if ok, err := e.st.Record(e.ctx, rk, "a", "job", "j1", "fp", "fp1"); err != nil || !ok {
		t.Fatalf("record: %v %v", ok, err)
	}
	if ok, err := e.st.Renew(e.ctx, rk, "a"); err != nil || !ok {
		t.Fatalf("renew: %v %v", ok, err)
	}
	if d := e.ttl(rk); d < 23*time.Hour {
		t.Errorf("record with a job expires in %v after a renewal, want the 24 h TTL", d)
	}
	e.clk.Add(31 * time.Second) // "a" died
	c := e.claim(rk, "b")
	if c.State != idempotency.StateNew || c.PriorJob != "j1" || c.PriorFP != "fp1" || c.PriorCharge != "" {
		t.Fatalf("takeover %+v, want the dead request's job", c)
	}
	// "b" answers before settling it (a 422, say) and keeps it for the
	// next retry: the lease ends, the job stays.
	if err := e.st.Release(e.ctx, rk, "b", true); err != nil {
		t.Fatal(err)
	}
	c = e.claim(rk, "c")
	if c.State != idempotency.StateNew || c.PriorJob != "j1" {
		t.Fatalf("after a keeping release: %+v", c)
	}
	// "c" settles it and records a charge of its own, then dies too.
	if ok, err := e.st.Record(e.ctx, rk, "c", "charge", "ch1"); err != nil || !ok {
		t.Fatalf("record: %v %v", ok, err)
	}
	e.clk.Add(31 * time.Second)
	if c := e.claim(rk, "d"); c.PriorCharge != "ch1" {
		t.Fatalf("takeover %+v, want the dead request's charge", c)
	}
}

// A plain release drops the claim: the next request with the key runs anew
// at once. Only the owner can release.
func TestRelease(t *testing.T) {
	e := newEnv(t)
	rk := idempotency.Key("k", "idem-4")
	e.claim(rk, "a")
	if err := e.st.Release(e.ctx, rk, "b", false); err != nil {
		t.Fatal(err)
	}
	if c := e.claim(rk, "b"); c.State != idempotency.StateRun {
		t.Fatalf("a non-owner released the claim: %+v", c)
	}
	if err := e.st.Release(e.ctx, rk, "a", false); err != nil {
		t.Fatal(err)
	}
	if n := e.rdb.Exists(e.ctx, rk).Val(); n != 0 {
		t.Fatalf("released record still there")
	}
	if c := e.claim(rk, "b"); c.State != idempotency.StateNew || c.PriorJob != "" {
		t.Fatalf("after release: %+v", c)
	}
}

// Two owners racing for one key: exactly one gets it.
func TestConcurrentClaims(t *testing.T) {
	e := newEnv(t)
	rk := idempotency.Key("k", "idem-5")
	const n = 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := e.st.Claim(e.ctx, rk, string(rune('a'+i)))
			if err != nil {
				t.Error(err)
				return
			}
			if c.State == idempotency.StateNew {
				mu.Lock()
				won++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d owners claimed the key, want 1", won)
	}
}
