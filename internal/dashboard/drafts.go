package dashboard

// The account's drafts (uploads between their steps) under its limits
// (docs/security.md): how many may wait at once and how many bytes they
// may hold, counted in one script on the account's hash slot, so two
// uploads at once cannot both take the last place. Each draft's entry is
// scored by when the draft expires (draftTTL), so an expired draft stops
// counting without anything running at expiry; a submitted draft stops
// counting at once and drops its data (only its job id stays, for the
// redirect, until it expires).

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
)

func draftsKey(accountID string) string     { return "bulkd:acct:{" + accountID + "}:dashdrafts" }     // zset: draft -> expiry ms
func draftBytesKey(accountID string) string { return "bulkd:acct:{" + accountID + "}:dashdraftbytes" } // hash: draft -> bytes, "*" -> total

// draftPrelude drops expired drafts' entries. KEYS[2] zset, KEYS[3] bytes
// hash; now ms in ARGV[2].
var draftPrelude = accounts.PruneExpiredLua(2, 3)

// reserveDraftScript takes a draft's place and bytes, or says which limit
// it would pass. KEYS = account hash, drafts zset, bytes hash, the draft's
// hash. ARGV = draft id, now ms, expires ms, bytes, default count limit,
// default bytes limit, then the draft's field-value pairs, written (with
// its expiry) in the same step.
// Returns {0, drafts, bytes}; {-1, drafts, limit, 0} at the count limit;
// {-2, bytes held, limit, ms when enough expires, or -1} at the bytes limit.
var reserveDraftScript = redis.NewScript(draftPrelude + `
local want = tonumber(ARGV[4])
local cmax = tonumber(redis.call('HGET', KEYS[1], 'limit:drafts') or ARGV[5]) or 0
local bmax = tonumber(redis.call('HGET', KEYS[1], 'limit:draft_bytes') or ARGV[6]) or 0
local n = redis.call('ZCARD', KEYS[2])
if cmax > 0 and n >= cmax then
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  return {-1, n, cmax, tonumber(first[2] or '0')}
end
local used = tonumber(redis.call('HGET', KEYS[3], '*') or '0')
if bmax > 0 and used + want > bmax then` + accounts.FreedAtLua(2, 3) + `
  return {-2, used, bmax, at}
end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], want)
redis.call('HINCRBY', KEYS[3], '*', want)
redis.call('PEXPIREAT', KEYS[2], ARGV[3])
redis.call('PEXPIREAT', KEYS[3], ARGV[3])
redis.call('HSET', KEYS[4], unpack(ARGV, 7))
redis.call('PEXPIREAT', KEYS[4], ARGV[3])
return {0, n + 1, used + want}
`)

// releaseDraftScript ends a submitted draft's place and drops its data.
// KEYS = drafts zset, bytes hash, the draft's hash. ARGV = draft id.
var releaseDraftScript = redis.NewScript(`
redis.call('ZREM', KEYS[1], ARGV[1])
local b = redis.call('HGET', KEYS[2], ARGV[1])
if b then
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('HINCRBY', KEYS[2], '*', -tonumber(b))
end
redis.call('HDEL', KEYS[3], 'data')
return 1
`)

// draftUsageScript reads the account's drafts after dropping expired
// ones. KEYS = account hash, drafts zset, bytes hash. ARGV = "", now ms.
var draftUsageScript = redis.NewScript(draftPrelude + `
return {redis.call('ZCARD', KEYS[2]), tonumber(redis.call('HGET', KEYS[3], '*') or '0')}
`)

// createDraft stores a new draft under the account's draft limits; a
// *accounts.LimitError when it does not fit (nothing stored).
func (d *Dashboard) createDraft(ctx context.Context, accountID string, dr *draft) error {
	now := d.Now()
	exp := now.Add(draftTTL)
	bytes := int64(len(dr.Data) + len(dr.Name))
	lim := d.Limits
	args := []any{dr.ID, now.UnixMilli(), exp.UnixMilli(), bytes, lim.Drafts, lim.DraftBytes}
	args = append(args, draftFields(dr)...)
	res, err := reserveDraftScript.Run(ctx, d.Redis, []string{accounts.AccountKey(accountID), draftsKey(accountID), draftBytesKey(accountID),
		draftKey(accountID, dr.ID)}, args...).Int64Slice()
	if err != nil {
		return fmt.Errorf("save upload: %w", err)
	}
	switch res[0] {
	case 0:
		return nil
	case -1:
		return &accounts.LimitError{Limit: accounts.LimitDrafts, Max: res[2], Used: res[1], Requested: 1, RetryAfter: untilMs(res[3], now)}
	}
	return &accounts.LimitError{Limit: accounts.LimitDraftBytes, Max: res[2], Used: res[1], Requested: bytes, RetryAfter: untilMs(res[3], now)}
}

func untilMs(ms int64, now time.Time) time.Duration {
	if ms <= 0 {
		return 0
	}
	return max(time.UnixMilli(ms).Sub(now), time.Second)
}

// releaseDraft ends a submitted draft's place among the account's drafts
// and drops its data (best effort: a failure leaves it counted until it
// expires).
func (d *Dashboard) releaseDraft(ctx context.Context, accountID, id string) {
	if err := releaseDraftScript.Run(ctx, d.Redis, []string{draftsKey(accountID), draftBytesKey(accountID), draftKey(accountID, id)}, id).Err(); err != nil {
		d.Logger.Warn("dashboard: releasing a submitted upload", "draft", id, "err", err)
	}
}

// DraftUsage is how many drafts an account has waiting and their bytes
// (bulkd admin).
func DraftUsage(ctx context.Context, rdb redis.UniversalClient, accountID string) (count, bytes int64, err error) {
	res, err := draftUsageScript.Run(ctx, rdb, []string{accounts.AccountKey(accountID), draftsKey(accountID), draftBytesKey(accountID)},
		"", time.Now().UnixMilli()).Int64Slice()
	if err != nil {
		return 0, 0, fmt.Errorf("read the uploads of account %s: %w", accountID, err)
	}
	return res[0], res[1], nil
}

// limitStatus is the HTTP status of a page refused at an account limit.
const limitStatus = http.StatusTooManyRequests
