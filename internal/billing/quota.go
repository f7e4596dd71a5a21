package billing

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
)

// Window is a quota period: its counter key suffix and when it resets.
type Window struct {
	Name  string // e.g. bulk_searches, single_lookups: also the ledger unit
	ID    string // distinguishes one period from the next
	Reset time.Time
	// Label is how a refusal names the quota, in the words of the family
	// whose mount draws on it (family.Words); "" names it by Name.
	Label string
}

// DailyWindow is the UTC day containing now: quotas on it reset at the next
// UTC midnight (SPEC section 8, quota rule 1).
func DailyWindow(name string, now time.Time) Window {
	d := now.UTC()
	day := time.Date(d.Year(), d.Month(), d.Day(), 0, 0, 0, 0, time.UTC)
	return Window{Name: name, ID: day.Format("20060102"), Reset: day.AddDate(0, 0, 1)}
}

// PeriodWindow is a billing period that ends at end.
func PeriodWindow(name string, end time.Time) Window {
	return Window{Name: name, ID: "p" + strconv.FormatInt(end.Unix(), 10), Reset: end.UTC()}
}

func (w Window) key(account string) string { return accounts.QuotaKey(account, w.Name+":"+w.ID) }

// Consumption is a use of n units of a quota.
type Consumption struct {
	AccountID string
	KeyID     string
	ChargeID  string // job id, or a request id for single lookups
	Window    Window
	N         int64
	Limit     int64
}

// consumeScript: KEYS = quota counter, charge record, ledger.
// ARGV = n, limit, counter ttl s, key id, charge id, now ms, unit, charge ttl s.
// Returns {status, used}: 0 ok, -1 over the limit, -3 duplicate charge id.
var consumeScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[2]) == 1 then return {-3, 0} end
local n = tonumber(ARGV[1])
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
if used + n > tonumber(ARGV[2]) then return {-1, used} end
used = redis.call('INCRBY', KEYS[1], n)
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('HSET', KEYS[2], 'unit', ARGV[7], 'amount', n, 'key', ARGV[4], 'refunded', 0, 'at', ARGV[6], 'quota_key', KEYS[1])
redis.call('EXPIRE', KEYS[2], ARGV[8])
redis.call('XADD', KEYS[3], '*', 'ts', ARGV[6], 'kind', 'quota_consume', 'key', ARGV[4], 'job', ARGV[5],
  'unit', ARGV[7], 'amount', n, 'after', used, 'note', '')
return {0, used}
`)

// Consume takes c.N units from a quota window if they fit under c.Limit, in
// one round trip; otherwise it consumes nothing and returns *QuotaError.
func (b *Billing) Consume(ctx context.Context, c Consumption) (used int64, err error) {
	if c.N <= 0 {
		return 0, errors.New("consume: n must be positive")
	}
	now := b.now()
	// Keep the counter a day past its reset so a release that arrives just
	// after midnight still finds it (and finds nothing to give back into the
	// new window's counter, which is a different key).
	ttl := int64(c.Window.Reset.Sub(now)/time.Second) + 86400
	if ttl < 60 {
		ttl = 60
	}
	keys := []string{c.Window.key(c.AccountID), accounts.ChargeKey(c.AccountID, c.ChargeID), accounts.LedgerKey(c.AccountID)}
	res, err := consumeScript.Run(ctx, b.rdb, keys, c.N, c.Limit, ttl, c.KeyID, c.ChargeID, now.UnixMilli(),
		c.Window.Name, int64(b.ChargeTTL/time.Second)).Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("consume %s: %w", c.Window.Name, err)
	}
	switch res[0] {
	case 0:
		return res[1], nil
	case -1:
		return res[1], &QuotaError{Window: c.Window, Used: res[1], Limit: c.Limit, Requested: c.N, RetryAfter: c.Window.Reset.Sub(now)}
	default:
		return 0, ErrDuplicateCharge
	}
}

// Used reads how much of a quota window an account has used.
func (b *Billing) Used(ctx context.Context, accountID string, w Window) (int64, error) {
	v, err := b.UsedIn(ctx, accountID, w)
	if err != nil {
		return 0, err
	}
	return v[0], nil
}

// UsedIn reads the use of several quota windows of one account in one
// round trip (the keys share the account's hash tag, so one MGET serves
// on Redis Cluster too).
func (b *Billing) UsedIn(ctx context.Context, accountID string, ws ...Window) ([]int64, error) {
	keys := make([]string, len(ws))
	for i, w := range ws {
		keys[i] = w.key(accountID)
	}
	vals, err := b.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("quota use: %w", err)
	}
	out := make([]int64, len(ws))
	for i, v := range vals {
		str, ok := v.(string)
		if !ok {
			continue // never used: no key
		}
		if out[i], err = strconv.ParseInt(str, 10, 64); err != nil {
			return nil, fmt.Errorf("quota use %s: %w", keys[i], err)
		}
	}
	return out, nil
}

// RetryAfterSeconds rounds a wait up to whole seconds, at least 1.
func RetryAfterSeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}
