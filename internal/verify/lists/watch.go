package lists

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
)

// WatchOptions tune Watch.
type WatchOptions struct {
	// Poll is how often the stored version is checked in case an
	// announcement was missed (Redis restarted, the subscription was
	// reconnecting); default 30s.
	Poll time.Duration
	// Log receives a line per reload and per failed reload; nil:
	// slog.Default().
	Log *slog.Logger
	// Reloaded, when set, is called after l took a new version.
	Reloaded func(version int64)
	// Ready, when set, is called once the subscription is made and the
	// first check is done (tests wait for it).
	Ready func()
}

// reloadTimeout bounds one reload (a GET of the version, then one MULTI
// reading at most three lists of MaxBytes).
const reloadTimeout = 30 * time.Second

// Watch keeps l in step with the lists operators store, until ctx ends: it
// subscribes to Channel and, on each announcement and every Poll, compares
// the stored version with l's and reloads the lists when they differ. A
// reload builds the new sets beside the old ones and swaps them in (for a
// moment both are in memory; each is bounded by MaxEntries and MaxBytes).
// A failed reload (Redis down, a stored list that no longer parses) keeps
// the lists l has and is logged; the next announcement or poll tries again.
func Watch(ctx context.Context, rdb redis.UniversalClient, l *Lists, o WatchOptions) {
	if o.Poll <= 0 {
		o.Poll = 30 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	ps := rdb.Subscribe(ctx, Channel)
	defer ps.Close()
	// Channel() reconnects and resubscribes by itself; the poll covers what
	// was announced meanwhile.
	msgs := ps.Channel(redis.WithChannelHealthCheckInterval(o.Poll))
	tick := time.NewTicker(o.Poll)
	defer tick.Stop()
	check := func() {
		cctx, cancel := context.WithTimeout(ctx, reloadTimeout)
		defer cancel()
		if err := reloadIfChanged(cctx, rdb, l, o); err != nil && ctx.Err() == nil {
			o.Log.Warn("reloading the address lists failed; keeping the ones in use", "err", err, "version", l.Version())
		}
	}
	check() // what changed between the caller's load and the subscription
	if o.Ready != nil {
		o.Ready()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-msgs:
			if !ok {
				return
			}
			check()
		case <-tick.C:
			check()
		}
	}
}

func reloadIfChanged(ctx context.Context, rdb redis.UniversalClient, l *Lists, o WatchOptions) error {
	v, err := rdb.Get(ctx, versionKey).Int64()
	if errors.Is(err, redis.Nil) {
		v, err = 0, nil // nothing stored (ever, or since Redis was emptied)
	}
	if err != nil {
		return err
	}
	if v == l.Version() {
		return nil
	}
	nl, err := LoadFromRedis(ctx, rdb)
	if err != nil {
		return err
	}
	if l.adopt(nl) {
		args := []any{"version", nl.Version()}
		for _, in := range nl.Infos() {
			args = append(args, in.Kind, in.Count)
		}
		o.Log.Info("address lists reloaded", args...)
		if o.Reloaded != nil {
			o.Reloaded(nl.Version())
		}
	}
	return nil
}
