package lists

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// KeyPrefix is where operator lists live: KeyPrefix+kind is a string with
// one entry a line (a string, not a set, so a list is replaced atomically
// with one SET and read with one GET), and KeyPrefix+"meta" a hash of
// kind -> JSON Stored.
const KeyPrefix = "bulkd:lists:"

// Stored describes an operator-loaded list.
type Stored struct {
	Count    int       `json:"count"`
	Source   string    `json:"source"`
	LoadedAt time.Time `json:"loaded_at"`
}

// Save validates the list read from r and stores it for every process
// (they pick it up at their next start). It returns the entry count.
func Save(ctx context.Context, rdb redis.UniversalClient, kind, source string, r io.Reader, now time.Time) (int, error) {
	set, err := Parse(kind, r)
	if err != nil {
		return 0, err
	}
	var b strings.Builder
	for e := range set {
		b.WriteString(e)
		b.WriteByte('\n')
	}
	meta, _ := json.Marshal(Stored{Count: len(set), Source: source, LoadedAt: now.UTC()})
	// MULTI so a reader never sees the new list with the old count.
	_, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, KeyPrefix+kind, b.String(), 0)
		p.HSet(ctx, KeyPrefix+"meta", kind, meta)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store %s list: %w", kind, err)
	}
	return len(set), nil
}

// StoredInfo returns what an operator loaded, by kind (absent: none).
func StoredInfo(ctx context.Context, rdb redis.UniversalClient) (map[string]Stored, error) {
	m, err := rdb.HGetAll(ctx, KeyPrefix+"meta").Result()
	if err != nil {
		return nil, fmt.Errorf("read list metadata: %w", err)
	}
	out := map[string]Stored{}
	for k, v := range m {
		var s Stored
		if json.Unmarshal([]byte(v), &s) == nil {
			out[k] = s
		}
	}
	return out, nil
}

// LoadFromRedis returns the embedded defaults overlaid with the lists an
// operator stored: a stored list replaces the default of its kind.
func LoadFromRedis(ctx context.Context, rdb redis.UniversalClient) (*Lists, error) {
	l := Default()
	info, err := StoredInfo(ctx, rdb)
	if err != nil {
		return nil, err
	}
	for _, k := range Kinds {
		v, err := rdb.Get(ctx, KeyPrefix+k).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s list: %w", k, err)
		}
		src := "redis"
		if s, ok := info[k]; ok && s.Source != "" {
			src = "redis: " + s.Source
		}
		if _, err := l.LoadSource(k, strings.NewReader(v), src); err != nil {
			return nil, fmt.Errorf("stored %s list: %w", k, err)
		}
	}
	return l, nil
}
