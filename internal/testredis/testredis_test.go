package testredis

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestStartIsPrivate(t *testing.T) {
	c1, s1 := Client(t)
	c2, s2 := Client(t)
	if s1.Addr == s2.Addr {
		t.Fatalf("two servers share %s", s1.Addr)
	}
	ctx := context.Background()
	if err := c1.Set(ctx, "k", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, _ := c2.Exists(ctx, "k").Result(); n != 0 {
		t.Fatalf("state leaked between servers")
	}
}

// A cluster serves all 16,384 slots across three masters: keys of
// different slots land on different nodes, and a transaction across slots
// is refused, which is what the engine's scripts must never need.
func TestClusterSpreadsSlots(t *testing.T) {
	c := StartCluster(t)
	cl := c.Client(t)
	ctx := context.Background()
	nodes := map[string]bool{}
	for i := 0; i < 50; i++ {
		k := "k" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if err := cl.Set(ctx, k, "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		// Which master holds it?
		for _, addr := range c.Addrs {
			n := redis.NewClient(&redis.Options{Addr: addr})
			if v, _ := n.Exists(ctx, k).Result(); v == 1 {
				nodes[addr] = true
			}
			n.Close()
		}
	}
	if len(nodes) != 3 {
		t.Fatalf("50 keys on %d masters, want 3", len(nodes))
	}
	pipe := cl.TxPipeline()
	pipe.Set(ctx, "{a}x", 1, 0)
	pipe.Set(ctx, "{b}y", 1, 0)
	if _, err := pipe.Exec(ctx); err == nil {
		t.Fatal("cross-slot MULTI accepted")
	}
	if err := c.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := cl.DBSize(ctx).Result(); n != 0 {
		t.Fatalf("%d keys after FlushAll", n)
	}
}

// A script that touches a key it did not declare fails under
// CheckScriptKeys, even where Redis itself would let it (same slot).
func TestCheckScriptKeys(t *testing.T) {
	rdb, _ := Client(t)
	CheckScriptKeys(rdb)
	ctx := context.Background()
	declared := redis.NewScript(`redis.call('SET', KEYS[1], ARGV[1]); return redis.call('TIME')[1] and redis.call('GET', KEYS[1])`)
	if got, err := declared.Run(ctx, rdb, []string{"{a}x"}, "v").Text(); err != nil || got != "v" {
		t.Fatalf("declared: %q %v", got, err)
	}
	undeclared := redis.NewScript(`return redis.call('GET', KEYS[1] .. ':other')`)
	if err := undeclared.Run(ctx, rdb, []string{"{a}x"}).Err(); err == nil || !strings.Contains(err.Error(), "undeclared key {a}x:other") {
		t.Fatalf("undeclared key: %v", err)
	}
}
