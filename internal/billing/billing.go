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
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/credits"
)

// Ledger entry kinds that Go code reads back (the scripts below write
// them, and also "adjust" and "quota_release", which no code tells apart:
// an export shows them as they are).
const (
	KindCharge       = "charge"
	KindRefund       = "refund"
	KindQuotaConsume = "quota_consume"
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
// KEYS = account hash, charge record, ledger, and for a quota consumption
// the quota counter it took from (read from the record beforehand: a
// script may only touch the keys it declares, which is what lets it run on
// Redis Cluster; all of them carry the account's hash tag).
// ARGV = now ms, note, charge id, charge ttl s.
// Returns {status, amount, unit}: 1 reversed, 0 already reversed, -1 no
// such charge (a tombstone is left), -4 the record names another quota
// counter than KEYS[4] (it was written after the caller read it: read
// again).
//
// A charge whose reply was lost (a timeout) may still be on its way to
// Redis when the caller reverses it. Finding no record, the script leaves
// a tombstone in its place, a record already marked refunded, so the late
// charge finds its id taken and changes nothing.
//
// A credit charge whose job already had its uncharged outcomes refunded
// (part_refunded, RefundPart) gives back only the rest.
var reverseScript = redis.NewScript(`
local c = redis.call('HMGET', KEYS[2], 'unit', 'amount', 'key', 'refunded', 'quota_key', 'part_refunded')
if not c[1] then
  if redis.call('EXISTS', KEYS[2]) == 0 then
    redis.call('HSET', KEYS[2], 'refunded', 1, 'tombstone', 1, 'at', ARGV[1])
    redis.call('EXPIRE', KEYS[2], ARGV[4])
  end
  return {-1, 0, ''}
end
if c[4] == '1' then return {0, tonumber(c[2]), c[1]} end
if (c[5] or '') ~= (KEYS[4] or '') then return {-4, 0, ''} end
local amt = tonumber(c[2])
local after
if c[1] == 'credits' then
  amt = amt - tonumber(c[6] or '0')
  after = redis.call('HINCRBY', KEYS[1], 'balance', amt)
  redis.call('XADD', KEYS[3], '*', 'ts', ARGV[1], 'kind', 'refund', 'key', c[3], 'job', ARGV[3],
    'unit', 'credits', 'amount', amt, 'after', after, 'note', ARGV[2])
else
  local used = tonumber(redis.call('GET', KEYS[4]) or '0')
  local back = math.min(used, amt)
  if back > 0 then after = redis.call('DECRBY', KEYS[4], back) else after = used end
  redis.call('XADD', KEYS[3], '*', 'ts', ARGV[1], 'kind', 'quota_release', 'key', c[3], 'job', ARGV[3],
    'unit', c[1], 'amount', -back, 'after', after, 'note', ARGV[2])
end
redis.call('HSET', KEYS[2], 'refunded', 1)
return {1, amt, c[1]}
`)

// Reverse refunds a credit charge or releases a quota consumption recorded
// under chargeID. It is idempotent: the second call reverses nothing and
// reports false. A charge id with no record yet is ErrChargeNotFound, and
// stays reversed: a charge that arrives later under it (a charge whose
// reply was lost, run by Redis after this) is refused as a duplicate and
// takes nothing.
func (b *Billing) Reverse(ctx context.Context, accountID, chargeID, note string) (bool, error) {
	ck := accounts.ChargeKey(accountID, chargeID)
	// Two tries: the record can only change from absent to present (a
	// charge landing between the read and the script), and never again.
	for try := 0; try < 2; try++ {
		qk, err := b.rdb.HGet(ctx, ck, "quota_key").Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return false, fmt.Errorf("reverse %s: read charge: %w", chargeID, err)
		}
		keys := []string{accounts.AccountKey(accountID), ck, accounts.LedgerKey(accountID)}
		if qk != "" {
			if !strings.HasPrefix(qk, accounts.QuotaKey(accountID, "")) {
				return false, fmt.Errorf("reverse %s: charge record names quota key %q of another account", chargeID, qk)
			}
			keys = append(keys, qk)
		}
		res, err := reverseScript.Run(ctx, b.rdb, keys, b.now().UnixMilli(), note, chargeID, int64(b.ChargeTTL/time.Second)).Slice()
		if err != nil {
			return false, fmt.Errorf("reverse %s: %w", chargeID, err)
		}
		switch res[0].(int64) {
		case 1:
			return true, nil
		case 0:
			return false, nil
		case -1:
			return false, ErrChargeNotFound
		}
	}
	return false, fmt.Errorf("reverse %s: the charge record keeps changing", chargeID)
}

// refundPartScript gives back part of a credit charge once: what a job's
// uncharged outcomes cost, when the job completes (email verification does
// not charge unknown results). KEYS = account hash, charge record, ledger.
// ARGV = amount, now ms, note, job id, key id, charge ttl s.
// Returns {status, amount}: 1 refunded amount now; 0 refunded amount
// before (0 when the whole charge was reversed instead); -2 no account.
var refundPartScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return {-2, 0} end
local c = redis.call('HMGET', KEYS[2], 'refunded', 'part_refunded')
if c[2] then return {0, tonumber(c[2])} end
if c[1] == '1' then return {0, 0} end
local amt = tonumber(ARGV[1])
local after = redis.call('HINCRBY', KEYS[1], 'balance', amt)
redis.call('HSET', KEYS[2], 'part_refunded', amt)
if redis.call('TTL', KEYS[2]) < 0 then redis.call('EXPIRE', KEYS[2], ARGV[6]) end
redis.call('XADD', KEYS[3], '*', 'ts', ARGV[2], 'kind', 'refund', 'key', ARGV[5], 'job', ARGV[4],
  'unit', 'credits', 'amount', amt, 'after', after, 'note', ARGV[3])
return {1, amt}
`)

// RefundPart refunds amount of the credit charge chargeID with its ledger
// entry, at most once per charge, unless the whole charge was reversed. It
// returns what was part-refunded for the charge, now or by an earlier call
// (whose amount wins), and 0 when the charge was reversed whole.
func (b *Billing) RefundPart(ctx context.Context, accountID, keyID, chargeID string, amount credits.Amount, note string) (credits.Amount, error) {
	if amount <= 0 {
		return 0, nil
	}
	keys := []string{accounts.AccountKey(accountID), accounts.ChargeKey(accountID, chargeID), accounts.LedgerKey(accountID)}
	res, err := refundPartScript.Run(ctx, b.rdb, keys, int64(amount), b.now().UnixMilli(), note, chargeID, keyID,
		int64(b.ChargeTTL/time.Second)).Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("refund part of %s: %w", chargeID, err)
	}
	if res[0] == -2 {
		return 0, ErrAccountNotFound
	}
	return credits.Amount(res[1]), nil
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
		out = append(out, entryOf(m))
	}
	return out, nil
}

// entryOf reads one ledger stream message.
func entryOf(m redis.XMessage) Entry {
	s := func(k string) string { v, _ := m.Values[k].(string); return v }
	ms, _ := strconv.ParseInt(s("ts"), 10, 64)
	e := Entry{ID: m.ID, Time: time.UnixMilli(ms).UTC(), Kind: s("kind"), KeyID: s("key"), JobID: s("job"),
		Unit: s("unit"), Amount: s("amount"), After: s("after"), Note: s("note")}
	if e.Unit == "credits" {
		e.Amount = milliString(e.Amount)
		e.After = milliString(e.After)
	}
	return e
}

// EntriesBefore returns up to limit ledger entries of an account, newest
// first, starting before the entry id `before` ("" for the newest): the
// account dashboard's ledger pages.
func (b *Billing) EntriesBefore(ctx context.Context, accountID, before string, limit int64) ([]Entry, error) {
	end := "+"
	if before != "" {
		end = "(" + before
	}
	msgs, err := b.rdb.XRevRangeN(ctx, accounts.LedgerKey(accountID), end, "-", limit).Result()
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	out := make([]Entry, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, entryOf(m))
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
