package verify

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// ProbeStore shares each domain's catch-all probe address between
// processes. Greylisting keys on the recipient: a retry made by another
// process (a retry Job's pod, another API replica) must send the probe the
// first attempt sent, or the probe is greylisted again on every attempt and
// the domain's real addresses can never be confirmed.
type ProbeStore interface {
	// Probe returns domain's probe local part, storing fresh as it for ttl
	// when the domain has none yet.
	Probe(ctx context.Context, domain, fresh string, ttl time.Duration) (string, error)
}

// RedisProbes is a ProbeStore in Redis: one key per domain, set once.
type RedisProbes struct {
	rdb    redis.UniversalClient
	prefix string
}

// NewRedisProbes returns a ProbeStore on rdb (keys bulkd:smtp:probe:<domain>).
func NewRedisProbes(rdb redis.UniversalClient) *RedisProbes {
	return &RedisProbes{rdb: rdb, prefix: "bulkd:smtp:probe:"}
}

// probeScript: KEYS = the domain's key. ARGV = fresh, ttl seconds.
var probeScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then return v end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return ARGV[1]
`)

// Probe implements ProbeStore.
func (p *RedisProbes) Probe(ctx context.Context, domain, fresh string, ttl time.Duration) (string, error) {
	return probeScript.Run(ctx, p.rdb, []string{p.prefix + domain}, fresh, int64(ttl/time.Second)).Text()
}
