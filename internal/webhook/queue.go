package webhook

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Queue keys. They share the {wh} hash tag, so each script (the due zset
// and one event's hash) runs on Redis Cluster.
const (
	dueKey   = "bulkd:{wh}:due" // zset: event id -> when it is due (ms); a claimed event's lease end
	evPrefix = "bulkd:{wh}:ev:" // hash per event (see Event and the scripts)
)

func evKey(id string) string { return evPrefix + id }

// Event states.
const (
	StatePending   = "pending"
	StateDelivered = "delivered"
	StateFailed    = "failed" // given up
)

// Queued is an event as stored: what to send where, and how it went.
type Queued struct {
	ID         string
	Type       string
	JobID      string
	AccountID  string
	URL        string
	Body       []byte
	EnqueuedAt time.Time
	Attempts   int
	State      string
	LastError  string
	LastStatus int
	Lease      string // the token of the claim that holds it
}

// Queue is the Redis-backed queue of webhook events: a zset of due events
// and a hash per event. Claiming an event pushes its due time out by a
// lease, so an event whose deliverer died comes due again (at least once).
type Queue struct {
	rdb redis.UniversalClient
	// Keep is how long a delivered or given-up event's record stays (it
	// is what makes a second enqueue of the same event a no-op).
	Keep time.Duration
}

// NewQueue returns the queue on rdb.
func NewQueue(rdb redis.UniversalClient) *Queue { return &Queue{rdb: rdb, Keep: 7 * 24 * time.Hour} }

// enqueueScript adds an event once: an event id already known (pending,
// delivered or given up) is left alone. KEYS = event hash, due zset.
// ARGV = id, type, job, account, url, body, now ms, ttl ms.
var enqueueScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'type', ARGV[2], 'job', ARGV[3], 'account', ARGV[4],
  'url', ARGV[5], 'body', ARGV[6], 'enq_at', ARGV[7], 'attempts', 0, 'state', 'pending')
redis.call('PEXPIRE', KEYS[1], ARGV[8])
redis.call('ZADD', KEYS[2], ARGV[7], ARGV[1])
return 1
`)

// Enqueue adds an event to deliver now; false when its id was already
// enqueued (the event is the same: ids are stable per job and transition).
// maxAge is how long delivery is retried; the record lives Keep longer.
func (q *Queue) Enqueue(ctx context.Context, e Queued, now time.Time, maxAge time.Duration) (bool, error) {
	ttl := (maxAge + q.Keep).Milliseconds()
	n, err := enqueueScript.Run(ctx, q.rdb, []string{evKey(e.ID), dueKey},
		e.ID, e.Type, e.JobID, e.AccountID, e.URL, e.Body, now.UnixMilli(), ttl).Int()
	if err != nil {
		return false, fmt.Errorf("enqueue webhook event %s: %w", e.ID, err)
	}
	return n == 1, nil
}

// Due lists up to n event ids due at now (a read; Claim takes them).
func (q *Queue) Due(ctx context.Context, now time.Time, n int) ([]string, error) {
	ids, err := q.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: dueKey, Start: "-inf", Stop: strconv.FormatInt(now.UnixMilli(), 10),
		ByScore: true, Count: int64(n)}).Result()
	if err != nil {
		return nil, fmt.Errorf("list due webhook events: %w", err)
	}
	return ids, nil
}

// claimScript takes one due event for a lease: its due time moves to the
// lease's end (so nobody else takes it meanwhile, and it comes back if we
// die), the attempt is counted, and the claim's token noted. An event
// that is not due (another deliverer took it) is not claimed; one that is
// not pending (or gone) leaves the zset. KEYS = due zset, event hash.
// ARGV = id, now ms, lease end ms, token.
var claimScript = redis.NewScript(`
local due = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not due or tonumber(due) > tonumber(ARGV[2]) then return false end
if redis.call('HGET', KEYS[2], 'state') ~= 'pending' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return false
end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
local n = redis.call('HINCRBY', KEYS[2], 'attempts', 1)
redis.call('HSET', KEYS[2], 'lease', ARGV[4])
return redis.call('HGETALL', KEYS[2])
`)

// Claim takes event id until leaseEnd; nil when it is not due any more.
func (q *Queue) Claim(ctx context.Context, id string, now, leaseEnd time.Time, token string) (*Queued, error) {
	v, err := claimScript.Run(ctx, q.rdb, []string{dueKey, evKey(id)}, id, now.UnixMilli(), leaseEnd.UnixMilli(), token).StringSlice()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claim webhook event %s: %w", id, err)
	}
	m := map[string]string{}
	for i := 0; i+1 < len(v); i += 2 {
		m[v[i]] = v[i+1]
	}
	return queuedFromMap(m), nil
}

func queuedFromMap(m map[string]string) *Queued {
	i := func(k string) int64 { n, _ := strconv.ParseInt(m[k], 10, 64); return n }
	return &Queued{ID: m["id"], Type: m["type"], JobID: m["job"], AccountID: m["account"], URL: m["url"], Body: []byte(m["body"]),
		EnqueuedAt: time.UnixMilli(i("enq_at")), Attempts: int(i("attempts")), State: m["state"], LastError: m["last_error"],
		LastStatus: int(i("last_status")), Lease: m["lease"]}
}

// Get reads an event (nil when unknown).
func (q *Queue) Get(ctx context.Context, id string) (*Queued, error) {
	m, err := q.rdb.HGetAll(ctx, evKey(id)).Result()
	if err != nil {
		return nil, fmt.Errorf("read webhook event %s: %w", id, err)
	}
	if len(m) == 0 {
		return nil, nil
	}
	return queuedFromMap(m), nil
}

// doneScript ends an attempt held by token: delivered (ARGV[3] =
// 'delivered'), given up ('failed'), or to retry at ARGV[4] ms ('retry').
// A claim that is no longer ours (our lease ran out and another deliverer
// took the event) changes nothing. KEYS = due zset, event hash.
// ARGV = id, token, outcome, retry at ms, now ms, http status, error,
// keep ms. Returns 1 when applied.
var doneScript = redis.NewScript(`
if redis.call('HGET', KEYS[2], 'lease') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[2], 'last_status', ARGV[6], 'last_error', ARGV[7])
redis.call('HDEL', KEYS[2], 'lease')
if ARGV[3] == 'retry' then
  redis.call('ZADD', KEYS[1], ARGV[4], ARGV[1])
  return 1
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], 'state', ARGV[3], 'done_at', ARGV[5])
redis.call('PEXPIRE', KEYS[2], ARGV[8])
return 1
`)

// finish ends the attempt held by token.
func (q *Queue) finish(ctx context.Context, e *Queued, token, outcome string, retryAt, now time.Time, status int, errText string) (bool, error) {
	n, err := doneScript.Run(ctx, q.rdb, []string{dueKey, evKey(e.ID)}, e.ID, token, outcome, retryAt.UnixMilli(), now.UnixMilli(),
		status, errText, q.Keep.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("finish webhook event %s: %w", e.ID, err)
	}
	return n == 1, nil
}

// Pending is how many events wait for delivery (due or not).
func (q *Queue) Pending(ctx context.Context) (int64, error) {
	return q.rdb.ZCard(ctx, dueKey).Result()
}

// Forget removes events, queued or kept, by id: a deleted job's (their
// records and their places in the due queue).
func (q *Queue) Forget(ctx context.Context, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	pipe := q.rdb.Pipeline()
	members := make([]any, len(ids))
	keys := make([]string, len(ids))
	for i, id := range ids {
		members[i], keys[i] = id, evKey(id)
	}
	pipe.ZRem(ctx, dueKey, members...)
	for _, k := range keys {
		pipe.Unlink(ctx, k) // one key a command: the keys share a slot, but one command a key is plainer
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("forget webhook events: %w", err)
	}
	return nil
}
