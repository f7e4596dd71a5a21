package serve

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/testredis"
)

// bulkd says at start when its Redis would lose data: no append-only file,
// or an eviction policy that drops keys.
func TestDurabilityProblems(t *testing.T) {
	ctx := context.Background()
	d := testredis.StartDurable(t) // appendonly yes, appendfsync everysec
	good := redis.NewClient(&redis.Options{Addr: d.Addr})
	defer good.Close()
	if p, ok := DurabilityProblems(ctx, good); !ok || len(p) != 0 {
		t.Fatalf("durable Redis: %v %v", p, ok)
	}
	good.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru")
	if p, ok := DurabilityProblems(ctx, good); !ok || len(p) != 1 || !strings.Contains(p[0], "maxmemory-policy is allkeys-lru") {
		t.Fatalf("evicting Redis: %v", p)
	}

	bad, _ := testredis.Client(t) // the tests' Redis: nothing on disk
	if p, ok := DurabilityProblems(ctx, bad); !ok || len(p) != 1 || !strings.Contains(p[0], "appendonly is no") {
		t.Fatalf("Redis without AOF: %v %v", p, ok)
	}
}

// go-redis's own messages (here: a pool that cannot dial) come out as
// lines of the process log, JSON in production.
func TestRedisClientLogsAreJSON(t *testing.T) {
	var buf syncBuffer
	_ = NewLogger(&buf, "json", "info")
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer c.Close()
	_ = c.Ping(context.Background()).Err()
	out := buf.String()
	if !strings.Contains(out, `"msg":"redis client"`) || strings.Contains(out, "redis: 20") {
		t.Fatalf("log %q", out)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
