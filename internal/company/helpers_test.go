package company

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/bulkd/bulkd/internal/company/companytest"
	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/redis/go-redis/v9"
)

// The tests use companytest.Normalizer, a trivial stand-in, because the
// real normalizer (internal/company/normalize) is written separately and
// this package must not depend on it.
var stubNorm companytest.Normalizer

const testPrefix = "bulkd:"

func newTestStore(t testing.TB) (*Store, redis.UniversalClient) {
	t.Helper()
	rdb := testredis.Universal(t)
	return NewStore(rdb, testPrefix), rdb
}

// TestMain stops the shared Redis Cluster of BULKD_TEST_REDIS=cluster runs.
func TestMain(m *testing.M) { testredis.Main(m) }

// scanKeys lists the keys matching pattern on every master (SCAN on a
// cluster client walks one node only).
func scanKeys(t testing.TB, rdb redis.UniversalClient, pattern string) []string {
	t.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	var out []string
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			out = append(out, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, scan)
	} else {
		err = scan(ctx, rdb.(*redis.Client))
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// dumpKeys returns every key under prefix with a type-aware rendering of
// its value (hash fields sorted), so two dumps compare the logical state.
func dumpKeys(t testing.TB, rdb redis.UniversalClient, prefix string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, k := range scanKeys(t, rdb, prefix+"*") {
		typ, err := rdb.Type(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		switch typ {
		case "string":
			v, err := rdb.Get(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			out[k] = v
		case "hash":
			m, err := rdb.HGetAll(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			fields := make([]string, 0, len(m))
			for f, v := range m {
				fields = append(fields, fmt.Sprintf("%x=%s", f, v))
			}
			sort.Strings(fields)
			out[k] = "hash:" + strings.Join(fields, ",")
		default:
			t.Fatalf("unexpected key type %s for %s", typ, k)
		}
	}
	return out
}

// hashFieldCount sums HLEN over all keys matching pattern.
func hashFieldCount(t testing.TB, rdb redis.UniversalClient, pattern string) int64 {
	t.Helper()
	ctx := context.Background()
	var n int64
	for _, k := range scanKeys(t, rdb, pattern) {
		l, err := rdb.HLen(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		n += l
	}
	return n
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// generated returns n generated records, parsed back from Generate's output
// and prepared the way Import prepares them.
func generated(t testing.TB, n int, seed int64) []Record {
	t.Helper()
	var buf bytes.Buffer
	if err := Generate(&buf, n, seed, "network.example"); err != nil {
		t.Fatal(err)
	}
	var recs []Record
	dec := json.NewDecoder(&buf)
	for dec.More() {
		var r Record
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		p, ok, err := prepareOwn(r, stubNorm)
		if err != nil || !ok {
			t.Fatalf("generated record %s not importable", mustJSON(t, r))
		}
		recs = append(recs, p)
	}
	return recs
}
