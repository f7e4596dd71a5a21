package serve

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// DurabilityProblems lists what in the Redis bulkd was given would lose
// accepted jobs, credits or ledger entries: no append-only file, an fsync
// policy weaker than once a second, or an eviction policy that may drop
// keys when memory is full. It asks with CONFIG GET; a Redis that refuses
// it (managed services often rename CONFIG) is reported as unknown (ok
// false), not as a problem.
func DurabilityProblems(ctx context.Context, rdb redis.UniversalClient) (problems []string, ok bool) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	get := func(k string) (string, bool) {
		m, err := rdb.ConfigGet(cctx, k).Result()
		if err != nil {
			return "", false
		}
		v, found := m[k]
		return v, found
	}
	aof, ok1 := get("appendonly")
	fsync, ok2 := get("appendfsync")
	evict, ok3 := get("maxmemory-policy")
	if !ok1 || !ok2 || !ok3 {
		return nil, false
	}
	if aof != "yes" {
		problems = append(problems, "appendonly is "+aof+" (want yes: without an append-only file a Redis restart loses every write since its last snapshot)")
	} else if fsync == "no" {
		problems = append(problems, "appendfsync is no (want everysec or always: the OS decides when writes reach the disk)")
	}
	if evict != "noeviction" {
		problems = append(problems, "maxmemory-policy is "+evict+" (want noeviction: a full Redis would silently drop keys: accounts, ledgers, jobs)")
	}
	return problems, true
}

// warnIfNotDurable logs each durability problem of the Redis at start.
func warnIfNotDurable(ctx context.Context, rdb redis.UniversalClient, log *slog.Logger) {
	problems, ok := DurabilityProblems(ctx, rdb)
	if !ok {
		log.Info("could not read the Redis persistence settings (CONFIG GET refused); make sure it runs with appendonly yes, appendfsync everysec, maxmemory-policy noeviction")
		return
	}
	if len(problems) > 0 {
		log.Warn("redis is not durable: accepted jobs and ledger entries can be lost", "problems", strings.Join(problems, "; "))
	}
}
