package testredis

import (
	"context"
	"testing"
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
