package finder

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// PatternStore keeps each domain's learned address pattern, shared across
// jobs, accounts and processes.
type PatternStore interface {
	// Get returns the domain's best pattern; ok is false when none is
	// known.
	Get(ctx context.Context, domain string) (pattern string, ok bool, err error)
	// Learn records one verified address of the domain written with
	// pattern.
	Learn(ctx context.Context, domain, pattern string) error
}

// batchGetter is implemented by stores that answer many domains in one
// round trip; Find uses it when present.
type batchGetter interface {
	GetMany(ctx context.Context, domains []string) (map[string]string, error)
}

// countsGetter is implemented by stores that give every pattern's count of
// many domains in one round trip; Find uses the counts for its confidence
// and to tell a pattern of one address from an established one.
type countsGetter interface {
	CountsMany(ctx context.Context, domains []string) (map[string]map[string]int64, error)
}

// CountsMany implements countsGetter in one pipelined round trip.
func (s *RedisPatterns) CountsMany(ctx context.Context, domains []string) (map[string]map[string]int64, error) {
	out := make(map[string]map[string]int64, len(domains))
	err := s.eachCounts(ctx, domains, func(domain string, counts map[string]int64) { out[domain] = counts })
	return out, err
}

// eachCounts reads the pattern counts of many domains in one pipelined
// round trip and calls f for each domain that has any.
func (s *RedisPatterns) eachCounts(ctx context.Context, domains []string, f func(domain string, counts map[string]int64)) error {
	if len(domains) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(domains))
	for i, d := range domains {
		cmds[i] = pipe.HGetAll(ctx, s.Key(d))
	}
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return err
	}
	for i, c := range cmds {
		if m, err := c.Result(); err == nil && len(m) > 0 {
			f(domains[i], parseCounts(m))
		}
	}
	return nil
}

func (s *memPatterns) CountsMany(_ context.Context, domains []string) (map[string]map[string]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]map[string]int64, len(domains))
	for _, d := range domains {
		if c := s.m[d]; len(c) > 0 {
			out[d] = maps.Clone(c)
		}
	}
	return out, nil
}

// best picks the pattern with the most verified addresses; a tie goes to
// the pattern with the higher prior. Unknown patterns are ignored.
func best(counts map[string]int64) (string, bool) {
	bp, bc := "", int64(0)
	for p, c := range counts {
		r, ok := priorRank[p]
		if !ok || c <= 0 {
			continue
		}
		if c > bc || c == bc && r < priorRank[bp] {
			bp, bc = p, c
		}
	}
	return bp, bp != ""
}

// PatternTTL is how long a domain's patterns are kept after the last
// address that taught one.
const PatternTTL = 180 * 24 * time.Hour

// RedisPatterns is a PatternStore in Redis: one hash per domain,
// bulkd:finder:pattern:<domain>, field = pattern, value = the number of
// addresses verified with it; the pattern with the highest count wins (ties
// by prior). Every Learn increments its pattern's count and renews the
// key's expiry (PatternTTL).
type RedisPatterns struct {
	rdb    redis.UniversalClient
	prefix string
	ttl    time.Duration
}

// NewRedisPatterns returns a PatternStore on rdb.
func NewRedisPatterns(rdb redis.UniversalClient) *RedisPatterns {
	return &RedisPatterns{rdb: rdb, prefix: "bulkd:finder:pattern:", ttl: PatternTTL}
}

// Key returns the Redis key of a domain.
func (s *RedisPatterns) Key(domain string) string { return s.prefix + domain }

// Get implements PatternStore.
func (s *RedisPatterns) Get(ctx context.Context, domain string) (string, bool, error) {
	m, err := s.rdb.HGetAll(ctx, s.Key(domain)).Result()
	if err != nil {
		return "", false, err
	}
	p, ok := best(parseCounts(m))
	return p, ok, nil
}

// GetMany returns the best pattern of every domain that has one, in one
// pipelined round trip.
func (s *RedisPatterns) GetMany(ctx context.Context, domains []string) (map[string]string, error) {
	out := make(map[string]string, len(domains))
	err := s.eachCounts(ctx, domains, func(domain string, counts map[string]int64) {
		if p, ok := best(counts); ok {
			out[domain] = p
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Learn implements PatternStore.
func (s *RedisPatterns) Learn(ctx context.Context, domain, pattern string) error {
	if !KnownPattern(pattern) {
		return nil
	}
	pipe := s.rdb.TxPipeline()
	pipe.HIncrBy(ctx, s.Key(domain), pattern, 1)
	pipe.Expire(ctx, s.Key(domain), s.ttl)
	_, err := pipe.Exec(ctx)
	return err
}

// Counts returns every pattern's count for a domain (for tests and admin).
func (s *RedisPatterns) Counts(ctx context.Context, domain string) (map[string]int64, error) {
	m, err := s.rdb.HGetAll(ctx, s.Key(domain)).Result()
	if err != nil {
		return nil, err
	}
	return parseCounts(m), nil
}

func parseCounts(m map[string]string) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			out[k] = n
		}
	}
	return out
}

// memPatterns is the in-process PatternStore used when New gets none: the
// same counting rule, at most memDomains domains (when full, an arbitrary
// tenth is forgotten).
type memPatterns struct {
	mu   sync.Mutex
	m    map[string]map[string]int64
	seen map[string]map[string]bool // local parts whose shape was counted, per domain
}

const memDomains = 100_000

func newMemPatterns() *memPatterns { return &memPatterns{m: map[string]map[string]int64{}} }

func (s *memPatterns) Get(_ context.Context, domain string) (string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := best(s.m[domain])
	return p, ok, nil
}

func (s *memPatterns) Learn(_ context.Context, domain, pattern string) error {
	if !KnownPattern(pattern) {
		return nil
	}
	s.add(domain, pattern, 1)
	return nil
}

// add counts n addresses of the domain under field (a pattern or a shape).
func (s *memPatterns) add(domain, field string, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.m[domain]
	if c == nil {
		if len(s.m) >= memDomains {
			n := 0
			for k := range s.m {
				delete(s.m, k)
				if n++; n >= memDomains/10 {
					break
				}
			}
		}
		c = map[string]int64{}
		s.m[domain] = c
	}
	c[field] += n
}

// LearnMany records several verified addresses (domains[i] written with
// patterns[i]) in one round trip.
func (s *RedisPatterns) LearnMany(ctx context.Context, domains, patterns []string) error {
	pipe := s.rdb.Pipeline() // keys of several domains: no MULTI (cluster slots)
	n := 0
	for i, d := range domains {
		if i >= len(patterns) || !KnownPattern(patterns[i]) {
			continue
		}
		pipe.HIncrBy(ctx, s.Key(d), patterns[i], 1)
		pipe.Expire(ctx, s.Key(d), s.ttl)
		n++
	}
	if n == 0 {
		return nil
	}
	_, err := pipe.Exec(ctx)
	return err
}

// forgetScript takes one count from each field of a domain's hash and
// deletes the fields that reach 0, and the key when none is left.
// KEYS = the domain's hash. ARGV = fields. Returns how many fields went.
var forgetScript = redis.NewScript(`
local gone = 0
for i = 1, #ARGV do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then
    if redis.call('HINCRBY', KEYS[1], ARGV[i], -1) <= 0 then
      redis.call('HDEL', KEYS[1], ARGV[i])
      gone = gone + 1
    end
  end
end
return gone
`)

// Forget undoes what one person's verified address taught (an erasure,
// docs/privacy.md): every pattern that writes the address's local part
// for the name loses the count it gave; a pattern learned from that
// address alone (count 1) is forgotten. It returns how many patterns were
// forgotten.
func (s *RedisPatterns) Forget(ctx context.Context, first, last, address string) (int, error) {
	local, domain, ok := strings.Cut(strings.ToLower(strings.TrimSpace(address)), "@")
	if !ok {
		return 0, nil
	}
	n := parseName(first, last)
	fields := patternsOf(n, local)
	if len(fields) == 0 {
		return 0, nil
	}
	return s.forget(ctx, domain, fields)
}

// ForgetShape takes back the count a verified address gave its shape
// (field shape:<s>, docs/privacy.md); a shape counted from that address
// alone is forgotten. The domain's HyperLogLog of local parts seen keeps
// its registers: they name no one and cannot be read back.
func (s *RedisPatterns) ForgetShape(ctx context.Context, address string) (int, error) {
	local, domain, ok := strings.Cut(strings.ToLower(strings.TrimSpace(address)), "@")
	if !ok {
		return 0, nil
	}
	sh, ok := shapeOf(local)
	if !ok {
		return 0, nil
	}
	return s.forget(ctx, domain, []string{shapeField + sh})
}

func (s *RedisPatterns) forget(ctx context.Context, domain string, fields []string) (int, error) {
	args := make([]any, len(fields))
	for i, f := range fields {
		args[i] = f
	}
	n, err := forgetScript.Run(ctx, s.rdb, []string{s.Key(domain)}, args...).Int()
	if err != nil {
		return 0, fmt.Errorf("finder: forget patterns of %s: %w", domain, err)
	}
	return n, nil
}
