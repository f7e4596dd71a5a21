// Package idempotency is the Redis store behind the API's Idempotency-Key
// (docs/api.md, "Idempotent requests"): a client that retries a charging
// request after a timeout or a dropped connection sends the same key and
// gets the first answer back instead of paying again. The HTTP side (the
// header, the fingerprint of a request, replaying an answer, the errors)
// stays in apiserver; this package owns the records and their transitions.
//
// One Redis hash per (API key, Idempotency-Key) holds the request's state:
//
//	st=run  own=<token> t0=<ms> lease=<ms>                   a request is running
//	st=done own t0 fp=<sha256> code=<status> ct=<type> body  its stored answer
//
// Every transition is one Lua script on that one key, so two replicas (or
// two goroutines) never both run the same key: the claim is "create unless
// a live record exists" in one step. The owner heartbeats its lease while
// the handler runs, so a long request keeps its claim and a crashed
// process's claim frees itself within Lease. The key is hash-tagged with
// the API key id, so every script touches one slot (Redis Cluster).
package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Options tune the store.
type Options struct {
	// TTL is how long a stored answer is replayed, counted from the first
	// request (default 24 h).
	TTL time.Duration
	// Lease is how long a running request's claim lasts without a
	// heartbeat (default 30 s; the owner renews it every Lease/3). It is
	// how long a key stays "in progress" after the process that ran it
	// died.
	Lease time.Duration
	// MaxAccountBytes bounds the bytes one account's stored answers hold
	// (every API key of the account together; account.go): past it a new
	// key is refused before its request runs. 0: no limit. It is the
	// default: an account's own override (accounts.LimitIdempotencyBytes)
	// takes its place for that account.
	MaxAccountBytes int64
}

// WithDefaults returns o with its zero fields set to the defaults.
func (o Options) WithDefaults() Options {
	if o.TTL <= 0 {
		o.TTL = 24 * time.Hour
	}
	if o.Lease <= 0 {
		o.Lease = 30 * time.Second
	}
	return o
}

// Store runs the record transitions on Redis.
type Store struct {
	rdb  redis.UniversalClient
	opts Options
	now  func() time.Time
}

// New returns a store on rdb; now (nil: time.Now) is the clock the TTL and
// lease are judged by, so that the API's injected clock decides, not only
// Redis expiry.
func New(rdb redis.UniversalClient, opts Options, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{rdb: rdb, opts: opts.WithDefaults(), now: now}
}

// Options are the store's options, defaults applied.
func (s *Store) Options() Options { return s.opts }

// Key is the Redis key of one (API key, Idempotency-Key): hash-tagged with
// the API key id (Cluster-safe; all of a key's records on one slot), the
// client's value hashed so that any printable key makes a fixed-length,
// harmless Redis key.
func Key(apiKeyID, key string) string {
	sum := sha256.Sum256([]byte(key))
	return "bulkd:idem:{" + apiKeyID + "}:" + hex.EncodeToString(sum[:])
}

// Record states Claim returns.
const (
	StateNew  = "new"  // the caller now owns the claim
	StateRun  = "run"  // another request holds a live claim
	StateDone = "done" // an answer is stored
)

// Claimed is what Claim found or made.
type Claimed struct {
	State string
	// StateDone: the stored request's fingerprint and answer.
	FP, Code, ContentType, Body string
	// StateNew: what a dead running claim recorded and hands on (empty
	// when there was none): its bulk submission's job and fingerprint, or
	// its single request's charge.
	PriorJob, PriorFP, PriorCharge string
}

// claimScript claims a key or returns its live record.
// KEYS = record. ARGV = now ms, ttl ms, lease ms, owner token.
// Returns {"new", job, fp, charge}, or {st, fp, code, ct, body}. A record past its
// TTL (done) or its lease (run) is dead: it is replaced. The TTL and lease
// are also checked here, against the server's clock, and not only left to
// Redis expiry, so that the clock the API runs on (injected in tests)
// decides.
//
// A dead running claim's job and fp (what a bulk submission recorded before
// charging) and charge (a single request's; recordScript) carry over to
// the new claim and come back to its owner: the process that died may have
// committed that job, and the retry must answer with it instead of
// charging again (apiserver's idemSubmission); a single request's charge is reversed
// (apiserver's newChargeID). They stay on the record until a retry settles them and
// records its own, so a retry that dies too hands them on.
var claimScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 'st', 't0', 'lease', 'fp', 'code', 'ct', 'body', 'job', 'charge')
local now = tonumber(ARGV[1])
local live = false
if r[1] == 'done' then
  live = now - tonumber(r[2]) < tonumber(ARGV[2])
elseif r[1] == 'run' then
  live = now < tonumber(r[3])
end
if live then return {r[1], r[4] or '', r[5] or '', r[6] or '', r[7] or ''} end
local job, fp, charge = '', '', ''
if r[1] == 'run' then job, fp, charge = r[8] or '', r[4] or '', r[9] or '' end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'st', 'run', 'own', ARGV[4], 't0', ARGV[1], 'lease', now + tonumber(ARGV[3]))
if job ~= '' or charge ~= '' then
  redis.call('HSET', KEYS[1], 'job', job, 'fp', fp, 'charge', charge)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return {'new', job, fp, charge}
`)

// recordScript records on a claim we own what a request is about to
// take, before it takes it: a bulk submission's job id and request
// fingerprint (fields job and fp), or a single request's charge id (field
// charge). From then on the record lives for the TTL, not the lease: if
// the process dies, Redis must not expire the only link between the key and
// what it may have taken (the lease field still ends the claim). A retry
// that takes the claim over settles it: it answers with the committed job,
// or rolls the job back, or reverses the charge (apiserver's idemSubmission,
// newChargeID).
// KEYS = record. ARGV = owner, ttl ms, field, value[, field, value].
// Returns 1, or 0 when the claim was lost.
var recordScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 'st', 'own')
if r[1] ~= 'run' or r[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// renewScript extends a running claim's lease if we still own it (and
// the record's expiry with it, unless a job or a charge is recorded: then
// the record already lives for the TTL, and must go on doing so).
// KEYS = record. ARGV = owner, now ms, lease ms. Returns 1, or 0 when lost.
var renewScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 'st', 'own', 'job', 'charge')
if r[1] ~= 'run' or r[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'lease', tonumber(ARGV[2]) + tonumber(ARGV[3]))
if not r[3] and not r[4] then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return 1
`)

// storeScript stores a claim's answer if we still own it; the record
// then lives until TTL after the first request.
// KEYS = record. ARGV = owner, fp, code, ct, body, ttl ms, now ms.
// Returns the first request's time (ms), or 0 when the claim was lost.
var storeScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 'st', 'own', 't0')
if r[1] ~= 'run' or r[2] ~= ARGV[1] then return 0 end
local left = tonumber(r[3]) + tonumber(ARGV[6]) - tonumber(ARGV[7])
if left < 1000 then left = 1000 end
redis.call('HSET', KEYS[1], 'st', 'done', 'fp', ARGV[2], 'code', ARGV[3], 'ct', ARGV[4], 'body', ARGV[5])
redis.call('HDEL', KEYS[1], 'lease')
redis.call('PEXPIRE', KEYS[1], left)
return tonumber(r[3])
`)

// releaseScript drops a running claim if we own it (a non-2xx answer:
// nothing was kept, the next request with the key runs anew). A claim that
// carries a dead request's job this request did not settle (it answered
// before looking: 422 another body, an error) keeps that job for the next
// retry: its lease is ended instead.
// KEYS = record. ARGV = owner, keep (1 or 0).
var releaseScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 'st', 'own')
if r[1] ~= 'run' or r[2] ~= ARGV[1] then return 0 end
if ARGV[2] == '1' then
  redis.call('HSET', KEYS[1], 'lease', 0)
else
  redis.call('DEL', KEYS[1])
end
return 1
`)

// Claim claims record rk for owner, or returns its live record.
func (s *Store) Claim(ctx context.Context, rk, owner string) (Claimed, error) {
	res, err := claimScript.Run(ctx, s.rdb, []string{rk}, s.now().UnixMilli(),
		s.opts.TTL.Milliseconds(), s.opts.Lease.Milliseconds(), owner).StringSlice()
	if err != nil {
		return Claimed{}, err
	}
	switch {
	case len(res) == 4 && res[0] == StateNew:
		return Claimed{State: StateNew, PriorJob: res[1], PriorFP: res[2], PriorCharge: res[3]}, nil
	case len(res) == 5 && (res[0] == StateRun || res[0] == StateDone):
		return Claimed{State: res[0], FP: res[1], Code: res[2], ContentType: res[3], Body: res[4]}, nil
	}
	return Claimed{}, fmt.Errorf("idempotency claim: unexpected reply %q", res)
}

// Record notes on owner's claim what its request is about to take
// (field-value pairs: "job", id, "fp", fingerprint; or "charge", id). It
// returns false when the claim was lost.
func (s *Store) Record(ctx context.Context, rk, owner string, fieldValues ...any) (bool, error) {
	args := append([]any{owner, s.opts.TTL.Milliseconds()}, fieldValues...)
	n, err := recordScript.Run(ctx, s.rdb, []string{rk}, args...).Int()
	return n == 1, err
}

// Renew extends owner's lease; false when the claim was lost.
func (s *Store) Renew(ctx context.Context, rk, owner string) (bool, error) {
	n, err := renewScript.Run(ctx, s.rdb, []string{rk}, owner, s.now().UnixMilli(), s.opts.Lease.Milliseconds()).Int()
	return n == 1, err
}

// Save stores owner's answer (fingerprint fp, status code, content type
// and body) and counts it against accountID until it expires
// (account.go); false when the claim was lost. An error with true: the
// answer is stored but could not be counted.
func (s *Store) Save(ctx context.Context, accountID, rk, owner, fp string, code int, contentType string, body []byte) (bool, error) {
	t0, err := storeScript.Run(ctx, s.rdb, []string{rk}, owner, fp, code, contentType, body,
		s.opts.TTL.Milliseconds(), s.now().UnixMilli()).Int64()
	if err != nil || t0 == 0 {
		return false, err
	}
	if err := s.count(ctx, accountID, rk, StoredBytes(contentType, body), t0+s.opts.TTL.Milliseconds()); err != nil {
		return true, fmt.Errorf("count the stored answer: %w", err)
	}
	return true, nil
}

// Release drops owner's claim; keep ends its lease instead, so that a dead
// request's job or charge stays on the record for the next retry.
func (s *Store) Release(ctx context.Context, rk, owner string, keep bool) error {
	k := 0
	if keep {
		k = 1
	}
	return releaseScript.Run(ctx, s.rdb, []string{rk}, owner, k).Err()
}
