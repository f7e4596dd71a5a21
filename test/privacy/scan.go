// Package privacy is the proof's shared part (docs/privacy.md): the scan
// of every Redis key and value for a marker, used by this directory's
// standalone proof and by test/cluster's Kubernetes-mode one.
package privacy

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Finder counts where markers occur (case-folded) in the texts it is
// given.
type Finder struct {
	Markers []string
	// Found is every place a marker was found, "where: marker".
	Found []string
}

// Check looks for the markers in s, found at where.
func (f *Finder) Check(where, s string) {
	low := strings.ToLower(s)
	for _, m := range f.Markers {
		if strings.Contains(low, strings.ToLower(m)) {
			f.Found = append(f.Found, fmt.Sprintf("%s: %q", where, m))
		}
	}
}

// ScanRedis reads every key of rdb and every value it holds, whatever its
// type, into f, and returns how many keys it read.
func ScanRedis(ctx context.Context, rdb redis.UniversalClient, f *Finder) (int, error) {
	keys := 0
	iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		keys++
		f.Check("key "+k, k)
		vs, err := Values(ctx, rdb, k)
		if err != nil {
			return keys, err
		}
		for _, v := range vs {
			f.Check("value of "+k, v)
		}
	}
	return keys, iter.Err()
}

// Values are every value key k holds, whatever its type (a key gone since
// it was listed holds none).
func Values(ctx context.Context, rdb redis.UniversalClient, k string) ([]string, error) {
	typ, err := rdb.Type(ctx, k).Result()
	if err != nil {
		return nil, err
	}
	var out []string
	switch typ {
	case "string":
		v, _ := rdb.Get(ctx, k).Result()
		out = append(out, v)
	case "hash":
		m, _ := rdb.HGetAll(ctx, k).Result()
		for f, v := range m {
			out = append(out, f, v)
		}
	case "set":
		out, _ = rdb.SMembers(ctx, k).Result()
	case "zset":
		out, _ = rdb.ZRange(ctx, k, 0, -1).Result()
	case "list":
		out, _ = rdb.LRange(ctx, k, 0, -1).Result()
	case "stream":
		ms, _ := rdb.XRange(ctx, k, "-", "+").Result()
		for _, m := range ms {
			for f, v := range m.Values {
				s, _ := v.(string)
				out = append(out, f, s)
			}
		}
	}
	return out, nil
}
