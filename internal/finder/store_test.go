package finder_test

import (
	"context"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/finder"
	"github.com/bulkd/bulkd/internal/testredis"
)

func TestRedisPatterns(t *testing.T) {
	rdb, _ := testredis.Client(t)
	ctx := context.Background()
	s := finder.NewRedisPatterns(rdb)
	if _, ok, err := s.Get(ctx, "acme.test"); ok || err != nil {
		t.Fatalf("empty store: ok=%v err=%v", ok, err)
	}
	// The most verified pattern wins; a tie goes to the higher prior.
	for _, p := range []string{"{f}{last}", "{last}", "{last}", "{f}{last}"} {
		if err := s.Learn(ctx, "acme.test", p); err != nil {
			t.Fatal(err)
		}
	}
	if p, ok, _ := s.Get(ctx, "acme.test"); !ok || p != "{f}{last}" {
		t.Errorf("tie: %q %v", p, ok)
	}
	_ = s.Learn(ctx, "acme.test", "{last}")
	if p, _, _ := s.Get(ctx, "acme.test"); p != "{last}" {
		t.Errorf("majority: %q", p)
	}
	// Unknown patterns are neither stored nor returned.
	_ = s.Learn(ctx, "acme.test", "{evil}")
	rdb.HSet(ctx, s.Key("other.test"), "{evil}", 99, "{first}", 1)
	if c, _ := s.Counts(ctx, "acme.test"); len(c) != 2 || c["{last}"] != 3 || c["{f}{last}"] != 2 {
		t.Errorf("counts %v", c)
	}
	if p, _, _ := s.Get(ctx, "other.test"); p != "{first}" {
		t.Errorf("unknown pattern returned: %q", p)
	}
	if ttl := rdb.TTL(ctx, s.Key("acme.test")).Val(); ttl < finder.PatternTTL-time.Minute {
		t.Errorf("ttl %v", ttl)
	}
	if err := s.LearnMany(ctx, []string{"a.test", "b.test", "a.test"}, []string{"{first}", "{first}.{last}", "{first}"}); err != nil {
		t.Fatal(err)
	}
	m, err := s.GetMany(ctx, []string{"a.test", "b.test", "none.test", "acme.test"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a.test": "{first}", "b.test": "{first}.{last}", "acme.test": "{last}"}
	if len(m) != len(want) {
		t.Errorf("GetMany %v", m)
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("GetMany[%s] = %q, want %q", k, m[k], v)
		}
	}
	if c, _ := s.Counts(ctx, "a.test"); c["{first}"] != 2 {
		t.Errorf("a.test counts %v", c)
	}
}
