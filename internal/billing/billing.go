// Package billing moves money and quota: charges and refunds of credits,
// consumption and release of plan quotas, and the ledger that records every
// one of them.
//
// Each movement is one Lua script, named for what it does, that checks and
// changes the balance (or quota counter), records the charge so it can be
// reversed exactly once, and appends to the account's ledger stream, all in
// one atomic step and one round trip. Concurrent submissions therefore
// cannot overdraw an account, and there is no window in which money moved
// without a ledger entry.
package billing

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/credits"
)

// Ledger entry kinds.
const (
	KindCharge       = "charge"
	KindRefund       = "refund"
	KindAdjust       = "adjust"
	KindQuotaConsume = "quota_consume"
	KindQuotaRelease = "quota_release"
)

// InsufficientError is a charge refused for lack of credits.
type InsufficientError struct {
	Balance, Required credits.Amount
}

func (e *InsufficientError) Error() string {
	return fmt.Sprintf("Insufficient credits: balance is %s, %s required", e.Balance, e.Required)
}

// QuotaError is a quota consumption refused because it would exceed the limit.
type QuotaError struct {
	Window     Window
	Used       int64
	Limit      int64
	Requested  int64
	RetryAfter time.Duration // until the window resets
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("%s quota exceeded: %d of %d used, %d requested", e.Window.Name, e.Used, e.Limit, e.Requested)
}

// Errors.
var (
	ErrAccountNotFound = errors.New("account not found")
	ErrDuplicateCharge = errors.New("a charge with this id already exists")
	ErrChargeNotFound  = errors.New("charge not found")
)

// Billing is bound to one Redis and one clock.
type Billing struct {
	rdb redis.UniversalClient
	now func() time.Time
	// ChargeTTL is how long a charge record stays reversible; it should
	// outlive the job it paid for.
	ChargeTTL time.Duration
}

// New returns a Billing; now may be nil for time.Now.
func New(rdb redis.UniversalClient, now func() time.Time) *Billing {
	if now == nil {
		now = time.Now
	}
	return &Billing{rdb: rdb, now: now, ChargeTTL: 31 * 24 * time.Hour}
}

// Now is the billing clock (injected in tests).
func (b *Billing) Now() time.Time { return b.now() }

// Charge is one upfront debit.
type Charge struct {
	AccountID string
	KeyID     string
	ChargeID  string // the job id; a charge id is used once
	Amount    credits.Amount
	Note      string
}

// chargeScript: KEYS = account hash, charge record, ledger.
// ARGV = amount, key id, charge id, now ms, ttl s, note.
// Returns {status, balance}: 0 ok, -1 insufficient, -2 no account, -3 duplicate.
var chargeScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return {-2, 0} end
if redis.call('EXISTS', KEYS[2]) == 1 then return {-3, 0} end
local amt = tonumber(ARGV[1])
local bal = tonumber(redis.call('HGET', KEYS[1], 'balance') or '0')
if bal < amt then return {-1, bal} end
bal = redis.call('HINCRBY', KEYS[1], 'balance', -amt)
redis.call('HSET', KEYS[2], 'unit', 'credits', 'amount', amt, 'key', ARGV[2], 'refunded', 0, 'at', ARGV[4])
redis.call('EXPIRE', KEYS[2], ARGV[5])
redis.call('XADD', KEYS[3], '*', 'ts', ARGV[4], 'kind', 'charge', 'key', ARGV[2], 'job', ARGV[3],
  'unit', 'credits', 'amount', -amt, 'after', bal, 'note', ARGV[6])
return {0, bal}
`)

// Charge debits c.Amount if the balance covers it, in one round trip. It
// returns the balance after the charge, or *InsufficientError.
func (b *Billing) Charge(ctx context.Context, c Charge) (credits.Amount, error) {
	if c.Amount < 0 {
		return 0, errors.New("charge: negative amount")
	}
	if c.ChargeID == "" {
		return 0, errors.New("charge: empty charge id")
	}
	keys := []string{accounts.AccountKey(c.AccountID), accounts.ChargeKey(c.AccountID, c.ChargeID), accounts.LedgerKey(c.AccountID)}
	res, err := chargeScript.Run(ctx, b.rdb, keys, int64(c.Amount), c.KeyID, c.ChargeID, b.now().UnixMilli(),
		int64(b.ChargeTTL/time.Second), c.Note).Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("charge %s: %w", c.ChargeID, err)
	}
	switch res[0] {
	case 0:
		return credits.Amount(res[1]), nil
	case -1:
		return credits.Amount(res[1]), &InsufficientError{Balance: credits.Amount(res[1]), Required: c.Amount}
	case -2:
		return 0, ErrAccountNotFound
	default:
		return 0, ErrDuplicateCharge
	}
}

// reverseScript undoes a charge or a quota consumption once.
// KEYS = account hash, charge record, ledger. ARGV = now ms, note, charge id.
// Returns {status, amount, unit}: 1 reversed, 0 already reversed, -1 unknown.
var reverseScript = redis.NewScript(`
local c = redis.call('HMGET', KEYS[2], 'unit', 'amount', 'key', 'refunded', 'quota_key')
if not c[1] then return {-1, 0, ''} end
if c[4] == '1' then return {0, tonumber(c[2]), c[1]} end
local amt = tonumber(c[2])
local after
if c[1] == 'credits' then
  after = redis.call('HINCRBY', KEYS[1], 'balance', amt)
  redis.call('XADD', KEYS[3], '*', 'ts', ARGV[1], 'kind', 'refund', 'key', c[3], 'job', ARGV[3],
    'unit', 'credits', 'amount', amt, 'after', after, 'note', ARGV[2])
else
  local used = tonumber(redis.call('GET', c[5]) or '0')
  local back = math.min(used, amt)
  if back > 0 then after = redis.call('DECRBY', c[5], back) else after = used end
  redis.call('XADD', KEYS[3], '*', 'ts', ARGV[1], 'kind', 'quota_release', 'key', c[3], 'job', ARGV[3],
    'unit', c[1], 'amount', -back, 'after', after, 'note', ARGV[2])
end
redis.call('HSET', KEYS[2], 'refunded', 1)
return {1, amt, c[1]}
`)

// Reverse refunds a credit charge or releases a quota consumption recorded
// under chargeID. It is idempotent: the second call reverses nothing and
// reports false.
func (b *Billing) Reverse(ctx context.Context, accountID, chargeID, note string) (bool, error) {
	keys := []string{accounts.AccountKey(accountID), accounts.ChargeKey(accountID, chargeID), accounts.LedgerKey(accountID)}
	res, err := reverseScript.Run(ctx, b.rdb, keys, b.now().UnixMilli(), note, chargeID).Slice()
	if err != nil {
		return false, fmt.Errorf("reverse %s: %w", chargeID, err)
	}
	switch res[0].(int64) {
	case 1:
		return true, nil
	case 0:
		return false, nil
	default:
		return false, ErrChargeNotFound
	}
}

// adjustScript: KEYS = account hash, ledger. ARGV = delta, now ms, note.
var adjustScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return {-2, 0} end
local d = tonumber(ARGV[1])
local bal = tonumber(redis.call('HGET', KEYS[1], 'balance') or '0')
if bal + d < 0 then return {-1, bal} end
bal = redis.call('HINCRBY', KEYS[1], 'balance', d)
redis.call('XADD', KEYS[2], '*', 'ts', ARGV[2], 'kind', 'adjust', 'key', '', 'job', '',
  'unit', 'credits', 'amount', d, 'after', bal, 'note', ARGV[3])
return {0, bal}
`)

// Adjust adds (or, with a negative delta, removes) credits by hand. It never
// takes a balance below zero.
func (b *Billing) Adjust(ctx context.Context, accountID string, delta credits.Amount, note string) (credits.Amount, error) {
	keys := []string{accounts.AccountKey(accountID), accounts.LedgerKey(accountID)}
	res, err := adjustScript.Run(ctx, b.rdb, keys, int64(delta), b.now().UnixMilli(), note).Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("adjust: %w", err)
	}
	switch res[0] {
	case 0:
		return credits.Amount(res[1]), nil
	case -1:
		return credits.Amount(res[1]), &InsufficientError{Balance: credits.Amount(res[1]), Required: -delta}
	default:
		return 0, ErrAccountNotFound
	}
}

// Balance reads an account's balance.
func (b *Billing) Balance(ctx context.Context, accountID string) (credits.Amount, error) {
	v, err := b.rdb.HGet(ctx, accounts.AccountKey(accountID), "balance").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, ErrAccountNotFound
	}
	if err != nil {
		return 0, fmt.Errorf("balance: %w", err)
	}
	return credits.Amount(v), nil
}

// Entry is one ledger line.
type Entry struct {
	ID     string    `json:"id"`
	Time   time.Time `json:"time"`
	Kind   string    `json:"kind"`
	KeyID  string    `json:"key_id,omitempty"`
	JobID  string    `json:"job_id,omitempty"`
	Unit   string    `json:"unit"`   // credits, bulk_searches or single_lookups
	Amount string    `json:"amount"` // signed change of the balance or quota use; credits as a decimal, quota units as an integer
	After  string    `json:"after"`  // balance or quota use after the movement
	Note   string    `json:"note,omitempty"`
}

// Entries returns up to limit ledger entries of an account, oldest first,
// starting after the entry id `after` ("" for the beginning).
func (b *Billing) Entries(ctx context.Context, accountID, after string, limit int64) ([]Entry, error) {
	start := "-"
	if after != "" {
		start = "(" + after
	}
	msgs, err := b.rdb.XRangeN(ctx, accounts.LedgerKey(accountID), start, "+", limit).Result()
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	out := make([]Entry, 0, len(msgs))
	for _, m := range msgs {
		s := func(k string) string { v, _ := m.Values[k].(string); return v }
		ms, _ := strconv.ParseInt(s("ts"), 10, 64)
		e := Entry{ID: m.ID, Time: time.UnixMilli(ms).UTC(), Kind: s("kind"), KeyID: s("key"), JobID: s("job"),
			Unit: s("unit"), Amount: s("amount"), After: s("after"), Note: s("note")}
		if e.Unit == "credits" {
			e.Amount = milliString(e.Amount)
			e.After = milliString(e.After)
		}
		out = append(out, e)
	}
	return out, nil
}

func milliString(s string) string {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return s
	}
	return credits.Amount(v).String()
}
