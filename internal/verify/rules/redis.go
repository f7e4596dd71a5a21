package rules

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Key is the Redis hash of the operator's rules: suffix -> settings (the
// rule's line without its suffix). One key, so every change is atomic and
// it lives in one Redis Cluster slot.
const Key = "bulkd:smtp:rules"

// Stored reads the operator's rules (not the defaults).
func Stored(ctx context.Context, rdb redis.UniversalClient) ([]Rule, error) {
	m, err := rdb.HGetAll(ctx, Key).Result()
	if err != nil {
		return nil, fmt.Errorf("read smtp rules: %w", err)
	}
	return fromHash(m)
}

func fromHash(m map[string]string) ([]Rule, error) {
	var out []Rule
	for s, v := range m {
		r, err := ParseLine(s + " " + v)
		if err != nil {
			// An entry written by hand: skip it rather than lose every rule.
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

// Load returns the defaults overlaid with the operator's rules.
func Load(ctx context.Context, rdb redis.UniversalClient) (*Table, error) {
	op, err := Stored(ctx, rdb)
	if err != nil {
		return nil, err
	}
	return NewTable(Default(), op), nil
}

// Set stores one operator rule (replacing the default or an earlier rule of
// its suffix).
func Set(ctx context.Context, rdb redis.UniversalClient, r Rule) error {
	if err := rdb.HSet(ctx, Key, r.Suffix, r.Settings()).Err(); err != nil {
		return fmt.Errorf("store smtp rule %s: %w", r.Suffix, err)
	}
	return nil
}

// Unset removes the operator's rule of suffix (the default, if any, applies
// again). It reports whether there was one.
func Unset(ctx context.Context, rdb redis.UniversalClient, suffix string) (bool, error) {
	n, err := rdb.HDel(ctx, Key, canon(suffix)).Result()
	if err != nil {
		return false, fmt.Errorf("remove smtp rule %s: %w", suffix, err)
	}
	return n > 0, nil
}

// Replace validates the rules read from r and makes them the operator's
// whole table (one MULTI on one key). It returns how many were stored.
func Replace(ctx context.Context, rdb redis.UniversalClient, r io.Reader) (int, error) {
	rs, err := Parse(r)
	if err != nil {
		return 0, err
	}
	_, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, Key)
		if len(rs) > 0 {
			vals := make([]any, 0, 2*len(rs))
			for _, r := range rs {
				vals = append(vals, r.Suffix, r.Settings())
			}
			p.HSet(ctx, Key, vals...)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store smtp rules: %w", err)
	}
	return len(rs), nil
}

// Reset removes every operator rule: the defaults alone apply.
func Reset(ctx context.Context, rdb redis.UniversalClient) error {
	if err := rdb.Del(ctx, Key).Err(); err != nil {
		return fmt.Errorf("reset smtp rules: %w", err)
	}
	return nil
}

// Holder holds the table in effect; it is safe for concurrent use.
type Holder struct {
	t    atomic.Pointer[Table]
	last atomic.Pointer[map[string]string]

	// Set by NewRedisHolder: Table starts a refresh in the background when
	// the last one is older than every.
	rdb        redis.UniversalClient
	every      time.Duration
	log        *slog.Logger
	checked    atomic.Int64 // unix nanoseconds of the last refresh started
	refreshing atomic.Bool
	failing    atomic.Bool
}

// NewRedisHolder holds the defaults overlaid with the operator's rules in
// rdb, read now (within ctx) and again, in the background, when Table is
// called more than every (WatchEvery when 0) after the last read: an
// operator's change reaches every process that verifies within seconds,
// with no goroutine to stop and no pub/sub connection to keep. A failed
// read keeps the table in effect (the defaults at first) and is logged
// once until a read succeeds.
func NewRedisHolder(ctx context.Context, rdb redis.UniversalClient, every time.Duration, log *slog.Logger) *Holder {
	if every <= 0 {
		every = WatchEvery
	}
	if log == nil {
		log = slog.Default()
	}
	h := NewHolder(nil)
	h.rdb, h.every, h.log = rdb, every, log
	h.checked.Store(time.Now().UnixNano())
	h.refresh(ctx)
	return h
}

func (h *Holder) refresh(ctx context.Context) {
	changed, err := h.Refresh(ctx, h.rdb)
	switch {
	case err != nil:
		if !h.failing.Swap(true) {
			h.log.Warn("smtp rules: reading the operator's rules failed; keeping the table in effect", "err", err)
		}
	default:
		h.failing.Store(false)
		if changed {
			h.log.Info("smtp rules: table loaded", "rules", h.Table().Len())
		}
	}
}

// NewHolder holds t (nil: the defaults).
func NewHolder(t *Table) *Holder {
	if t == nil {
		t = DefaultTable()
	}
	h := &Holder{}
	h.t.Store(t)
	return h
}

// Table is the table in effect.
func (h *Holder) Table() *Table {
	if h == nil {
		return DefaultTable()
	}
	if h.rdb != nil {
		now := time.Now().UnixNano()
		if last := h.checked.Load(); now-last >= int64(h.every) && h.checked.CompareAndSwap(last, now) &&
			h.refreshing.CompareAndSwap(false, true) {
			go func() {
				defer h.refreshing.Store(false)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				h.refresh(ctx)
			}()
		}
	}
	return h.t.Load()
}

// Set makes t the table in effect.
func (h *Holder) Set(t *Table) { h.t.Store(t) }

// Refresh reads the operator's rules and, when they changed since the last
// read, makes defaults + them the table in effect. It reports a change.
func (h *Holder) Refresh(ctx context.Context, rdb redis.UniversalClient) (bool, error) {
	m, err := rdb.HGetAll(ctx, Key).Result()
	if err != nil {
		return false, fmt.Errorf("read smtp rules: %w", err)
	}
	if last := h.last.Load(); last != nil && maps.Equal(*last, m) {
		return false, nil
	}
	op, _ := fromHash(m)
	h.t.Store(NewTable(Default(), op))
	h.last.Store(&m)
	return true, nil
}

// WatchEvery is how often a NewRedisHolder reads the operator's rules
// again while it is used: one HGETALL of a few dozen fields.
const WatchEvery = 10 * time.Second
