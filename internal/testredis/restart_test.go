package testredis

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Durable server keeps what it acknowledged across SIGTERM and SIGKILL
// and comes back on the same address.
func TestDurableRestart(t *testing.T) {
	d := StartDurable(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: d.Addr, MaxRetries: -1})
	defer c.Close()
	if v := c.ConfigGet(ctx, "appendonly").Val()["appendonly"]; v != "yes" {
		t.Fatalf("appendonly %q", v)
	}
	if v := c.ConfigGet(ctx, "appendfsync").Val()["appendfsync"]; v != "everysec" {
		t.Fatalf("appendfsync %q", v)
	}
	for i, stop := range []func() error{d.Terminate, d.Kill} {
		if err := c.Incr(ctx, "n").Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1100 * time.Millisecond) // appendfsync everysec has had its second
		addr := d.Addr
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if err := c.Ping(ctx).Err(); err == nil {
			t.Fatal("stopped server answers")
		}
		if err := d.Restart(); err != nil {
			t.Fatal(err)
		}
		if d.Addr != addr {
			t.Fatalf("restarted on %s, was %s", d.Addr, addr)
		}
		if n, err := c.Get(ctx, "n").Int(); err != nil || n != i+1 {
			t.Fatalf("after restart %d: n = %d, %v", i, n, err)
		}
	}
}
