package idempotency_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/idempotency"
)

// store saves an answer of n body bytes under a new key of API key kid.
func (e *env) store(st *idempotency.Store, acct, kid, key string, n int) {
	e.t.Helper()
	rk := idempotency.Key(kid, key)
	if c, err := st.Claim(e.ctx, rk, "o"); err != nil || c.State != idempotency.StateNew {
		e.t.Fatalf("claim %s: %+v %v", key, c, err)
	}
	if ok, err := st.Save(e.ctx, acct, rk, "o", "fp", 200, "application/json", make([]byte, n)); err != nil || !ok {
		e.t.Fatalf("save %s: %v %v", key, ok, err)
	}
}

func (e *env) usage(st *idempotency.Store, acct string) (int64, int64) {
	e.t.Helper()
	b, n, err := st.Usage(e.ctx, acct)
	if err != nil {
		e.t.Fatal(err)
	}
	return b, n
}

// An account's stored answers are counted (every API key of it together)
// until they expire by the store's clock; past the limit Admit refuses,
// saying when the oldest expires; other accounts are not affected; an
// expired answer frees its bytes; Forget frees a deleted record's.
func TestAccountLimit(t *testing.T) {
	e := newEnv(t)
	const one = 1000 + 16 + idempotency.RecordOverhead // a 1,000-byte JSON answer
	const limit = 10 * one
	st := idempotency.New(e.rdb, idempotency.Options{MaxAccountBytes: limit}, e.clk.Now)
	if f, err := st.Admit(e.ctx, "a1"); err != nil || f != nil {
		t.Fatalf("empty account refused: %+v %v", f, err)
	}
	for i := range 10 {
		kid := []string{"k1", "k2"}[i%2]
		if f, err := st.Admit(e.ctx, "a1"); err != nil || f != nil {
			t.Fatalf("answer %d refused: %+v %v", i, f, err)
		}
		e.store(st, "a1", kid, fmt.Sprint("x", i), 1000)
		e.clk.Add(time.Minute)
	}
	if b, n := e.usage(st, "a1"); b != limit || n != 10 {
		t.Fatalf("usage %d bytes, %d records; want %d, 10", b, n, limit)
	}
	f, err := st.Admit(e.ctx, "a1")
	if err != nil || f == nil {
		t.Fatalf("full account admitted: %v", err)
	}
	if f.Used != limit || f.Max != limit || f.RetryAfter != 24*time.Hour-10*time.Minute {
		t.Fatalf("refusal %+v", f)
	}
	if f, err := st.Admit(e.ctx, "a2"); err != nil || f != nil {
		t.Fatalf("another account refused: %+v %v", f, err)
	}
	// Saving the same key again (after it expired) recounts it, not twice.
	// Forget frees a deleted record.
	rk := idempotency.Key("k1", "x0")
	if b, err := idempotency.Forget(e.ctx, e.rdb, "a1", rk); err != nil || b != one {
		t.Fatalf("forget: %d %v", b, err)
	}
	if f, _ := st.Admit(e.ctx, "a1"); f != nil {
		t.Fatalf("refused after a record was forgotten: %+v", f)
	}
	if b, n := e.usage(st, "a1"); b != limit-one || n != 9 {
		t.Fatalf("after forget: %d bytes, %d records", b, n)
	}
	// The oldest answers expire one a minute: all nine gone after 24 h.
	e.clk.Add(24*time.Hour - 9*time.Minute)
	if b, n := e.usage(st, "a1"); n != 8 || b != 8*one {
		t.Fatalf("after the first expiry: %d bytes, %d records", b, n)
	}
	e.clk.Add(10 * time.Minute)
	if b, n := e.usage(st, "a1"); b != 0 || n != 0 {
		t.Fatalf("after every expiry: %d bytes, %d records", b, n)
	}
	// The usage keys expire with the records.
	if d := e.ttl("bulkd:acct:{a1}:idem:size"); d <= 0 || d > 25*time.Hour {
		t.Fatalf("usage key expires in %v", d)
	}
}

// With no limit nothing is refused, and answers are still counted.
func TestAccountNoLimit(t *testing.T) {
	e := newEnv(t)
	for i := range 5 {
		if f, err := e.st.Admit(e.ctx, "a"); err != nil || f != nil {
			t.Fatal(f, err)
		}
		e.store(e.st, "a", "k", fmt.Sprint(i), 100)
	}
	if b, n := e.usage(e.st, "a"); n != 5 || b != 5*(116+idempotency.RecordOverhead) {
		t.Fatalf("usage %d %d", b, n)
	}
}

// An account's own limit (the field limit:idempotency_bytes of its hash,
// as `bulkd admin account limits --idempotency-bytes` sets it) takes the
// place of the default for that account only: it raises, lowers or (0)
// lifts the cap, and dropping it brings the default back. With no default
// an override still sets a cap.
func TestAccountLimitOverride(t *testing.T) {
	e := newEnv(t)
	const one = 1000 + 16 + idempotency.RecordOverhead
	setOverride := func(acct string, v int64) {
		t.Helper()
		if err := e.rdb.HSet(e.ctx, accounts.AccountKey(acct), accounts.LimitField(accounts.LimitIdempotencyBytes), v).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// fill stores answers until Admit refuses (at most 20); it returns how
	// many were admitted and the refusal.
	fill := func(st *idempotency.Store, acct string) (int, *idempotency.Full) {
		t.Helper()
		for i := range 20 {
			f, err := st.Admit(e.ctx, acct)
			if err != nil {
				t.Fatal(err)
			}
			if f != nil {
				return i, f
			}
			e.store(st, acct, "k-"+acct, fmt.Sprint("x", i), 1000)
		}
		return 20, nil
	}
	st := idempotency.New(e.rdb, idempotency.Options{MaxAccountBytes: 4 * one}, e.clk.Now)
	setOverride("raised", 8*one)
	setOverride("lowered", 2*one)
	setOverride("unlimited", 0)
	for _, tc := range []struct {
		acct string
		n    int
		max  int64
	}{{"default", 4, 4 * one}, {"raised", 8, 8 * one}, {"lowered", 2, 2 * one}, {"unlimited", 20, 0}} {
		n, f := fill(st, tc.acct)
		if n != tc.n || (f == nil) != (tc.max == 0) || (f != nil && (f.Max != tc.max || f.Used != tc.max)) {
			t.Fatalf("%s: %d answers admitted, refusal %+v; want %d, limit %d", tc.acct, n, f, tc.n, tc.max)
		}
	}
	// Dropping the override: the default again (the account holds 8, past it).
	if err := e.rdb.HDel(e.ctx, accounts.AccountKey("raised"), accounts.LimitField(accounts.LimitIdempotencyBytes)).Err(); err != nil {
		t.Fatal(err)
	}
	if f, err := st.Admit(e.ctx, "raised"); err != nil || f == nil || f.Max != 4*one || f.Used != 8*one {
		t.Fatalf("after the override was dropped: %+v %v", f, err)
	}
	// No default: only the account with an override is capped.
	free := idempotency.New(e.rdb, idempotency.Options{}, e.clk.Now)
	if n, f := fill(free, "default2"); n != 20 || f != nil {
		t.Fatalf("no default: %d admitted, %+v", n, f)
	}
	setOverride("capped", 3*one)
	if n, f := fill(free, "capped"); n != 3 || f == nil || f.Max != 3*one {
		t.Fatalf("no default, override 3 answers: %d admitted, %+v", n, f)
	}
	// AccountUsage (what `bulkd admin account limits` shows) is Usage.
	if b, n, err := idempotency.AccountUsage(e.ctx, e.rdb, "capped", e.clk.Now()); err != nil || b != 3*one || n != 3 {
		t.Fatalf("AccountUsage: %d bytes, %d records, %v", b, n, err)
	}
}
