package jobs

// Shards: the lease a runner holds while it runs one, and the mark that
// says every input of one is answered (Store, store.go).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// markShardDoneScript: KEYS = meta, shard bitmap. ARGV = shard, expires ms.
var markShardDoneScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], 'deleted_at') == 1 then return -1 end
if redis.call('SETBIT', KEYS[2], ARGV[1], 1) == 0 then
  redis.call('PEXPIREAT', KEYS[2], ARGV[2])
  return redis.call('HINCRBY', KEYS[1], 'shards_done', 1)
end
return redis.call('HGET', KEYS[1], 'shards_done')
`)

// MarkShardDone records that every input of a shard is answered.
func (s *Store) MarkShardDone(ctx context.Context, j *Job, shard int) error {
	n, err := markShardDoneScript.Run(ctx, s.rdb, []string{metaKey(j.ID), shardsDoneKey(j.ID)}, shard, j.ExpiresAt.UnixMilli()).Int()
	if err != nil {
		return fmt.Errorf("mark shard %d of %s done: %w", shard, j.ID, err)
	}
	if n < 0 {
		return ErrJobNotFound
	}
	return nil
}

// UnfinishedShards lists the shards of a job not marked done.
func (s *Store) UnfinishedShards(ctx context.Context, j *Job) ([]int, error) {
	bits, err := s.rdb.Get(ctx, shardsDoneKey(j.ID)).Bytes()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read shard bitmap of %s: %w", j.ID, err)
	}
	var out []int
	for sh := 0; sh < j.Shards; sh++ {
		byteIdx, bit := sh/8, 7-uint(sh%8)
		if byteIdx >= len(bits) || bits[byteIdx]&(1<<bit) == 0 {
			out = append(out, sh)
		}
	}
	return out, nil
}

// acquireScript takes a lease that is free or already ours. "Ours" matters
// after a restart: an instance with a stable owner id (serve uses host and
// listen address) takes back the leases its previous life held instead of
// waiting for them to expire. In-process, Local never runs one shard twice.
var acquireScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur == false or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
`)

// AcquireLease takes shard's lease for ttl if nobody else holds it.
func (s *Store) AcquireLease(ctx context.Context, id string, shard int, owner string, ttl time.Duration) (bool, error) {
	n, err := acquireScript.Run(ctx, s.rdb, []string{leaseKey(id, shard)}, owner, ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("lease shard %d of %s: %w", shard, id, err)
	}
	return n == 1, nil
}

// extendScript extends a lease only when we still hold it.
var extendScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
`)

var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// ExtendLease keeps a lease alive while the shard runs.
func (s *Store) ExtendLease(ctx context.Context, id string, shard int, owner string, ttl time.Duration) error {
	return extendScript.Run(ctx, s.rdb, []string{leaseKey(id, shard)}, owner, ttl.Milliseconds()).Err()
}

// ReleaseLease gives a lease back.
func (s *Store) ReleaseLease(ctx context.Context, id string, shard int, owner string) error {
	return releaseScript.Run(ctx, s.rdb, []string{leaseKey(id, shard)}, owner).Err()
}
