package lists

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// KeyPrefix is where operator lists live. KeyPrefix+kind is a string with
// one entry a line (a string, not a set, so a list is replaced atomically
// with one SET and read with one GET), KeyPrefix+"meta" a hash of kind ->
// JSON Stored, and KeyPrefix+"version" a counter raised by every change.
// The hash tag keeps the keys in one Redis Cluster slot, so a change is
// one MULTI and a read one consistent snapshot.
const KeyPrefix = "bulkd:{lists}:"

// legacyPrefix is where bulkd stored operator lists before they had a
// version (bulkd:lists:<kind>); a list found there is still read, until the
// next sync of its kind deletes it.
const legacyPrefix = "bulkd:lists:"

// Channel is the pub/sub channel a change is announced on (the message is
// the new version). Announcements only hurry the reload: a process that
// missed one finds the new version at its next poll (Watch).
const Channel = "bulkd:lists:changed"

const (
	versionKey = KeyPrefix + "version"
	metaKey    = KeyPrefix + "meta"
)

// Stored describes an operator-loaded list.
type Stored struct {
	Count    int       `json:"count"`
	Source   string    `json:"source"`
	LoadedAt time.Time `json:"loaded_at"`
	Mode     string    `json:"mode,omitempty"` // replace (also when empty) or add
}

// SyncOptions say what Sync stores.
type SyncOptions struct {
	Kind   string // disposable, role or free
	Mode   string // Replace (default) or Add
	Source string // shown by `lists show`, e.g. the file's name
	Now    time.Time
	// DryRun validates and counts without storing anything.
	DryRun bool
}

// SyncResult is what a sync did.
type SyncResult struct {
	Kind    string `json:"kind"`
	Mode    string `json:"mode"`
	Entries int    `json:"entries"` // distinct entries in the file
	// Added and Removed compare with the operator list stored before
	// (none: everything is added).
	Added   int `json:"added"`
	Removed int `json:"removed"`
	// Effective is the size of the list in effect once processes reload:
	// Entries for replace, the union with the embedded list for add.
	Effective int   `json:"effective"`
	Version   int64 `json:"version"` // the new version (0 on a dry run)
	DryRun    bool  `json:"dry_run,omitempty"`
}

// Sync validates the list read from r and stores it as the operator's list
// of its kind, for every process: each one reloads it within moments
// (pub/sub) or at its next poll. The previous operator list of that kind
// is replaced whatever the mode; the mode says whether the list replaces
// the embedded one or is added to it.
func Sync(ctx context.Context, rdb redis.UniversalClient, r io.Reader, o SyncOptions) (SyncResult, error) {
	if o.Mode == "" {
		o.Mode = Replace
	}
	if o.Mode != Replace && o.Mode != Add {
		return SyncResult{}, fmt.Errorf("unknown mode %q (want replace or add)", o.Mode)
	}
	s, err := Parse(o.Kind, r)
	if err != nil {
		return SyncResult{}, err
	}
	res := SyncResult{Kind: o.Kind, Mode: o.Mode, Entries: len(s), Effective: len(s), DryRun: o.DryRun}
	if o.Mode == Add {
		res.Effective = len(union(embedded()[o.Kind], s))
	}
	prev, _, err := storedList(ctx, rdb, o.Kind)
	if err != nil {
		return SyncResult{}, err
	}
	for e := range s {
		if _, ok := prev[e]; !ok {
			res.Added++
		}
	}
	for e := range prev {
		if _, ok := s[e]; !ok {
			res.Removed++
		}
	}
	if o.DryRun {
		return res, nil
	}
	entries := make([]string, 0, len(s))
	for e := range s {
		entries = append(entries, e)
	}
	sort.Strings(entries)
	meta, _ := json.Marshal(Stored{Count: len(s), Source: o.Source, LoadedAt: o.Now.UTC(), Mode: o.Mode})
	v, err := commit(ctx, rdb, func(p redis.Pipeliner) {
		p.Set(ctx, KeyPrefix+o.Kind, strings.Join(entries, "\n")+"\n", 0)
		p.HSet(ctx, metaKey, o.Kind, meta)
	})
	if err != nil {
		return SyncResult{}, fmt.Errorf("store %s list: %w", o.Kind, err)
	}
	res.Version = v
	// The legacy key would otherwise shadow nothing but confuse a reader.
	_ = rdb.Del(ctx, legacyPrefix+o.Kind).Err()
	return res, nil
}

// Save stores a list that replaces the embedded one (Sync with Replace) and
// returns its entry count.
func Save(ctx context.Context, rdb redis.UniversalClient, kind, source string, r io.Reader, now time.Time) (int, error) {
	res, err := Sync(ctx, rdb, r, SyncOptions{Kind: kind, Source: source, Now: now})
	return res.Entries, err
}

// Clear drops the operator's list of kind: the embedded one is in effect
// again once processes reload. It returns the new version.
func Clear(ctx context.Context, rdb redis.UniversalClient, kind string) (int64, error) {
	if !ValidKind(kind) {
		return 0, fmt.Errorf("unknown list kind %q (want disposable, role or free)", kind)
	}
	v, err := commit(ctx, rdb, func(p redis.Pipeliner) {
		p.Del(ctx, KeyPrefix+kind)
		p.HDel(ctx, metaKey, kind)
	})
	if err != nil {
		return 0, fmt.Errorf("clear %s list: %w", kind, err)
	}
	_ = rdb.Del(ctx, legacyPrefix+kind).Err()
	return v, nil
}

// commit runs change and raises the version in one MULTI, then announces
// the new version. A failed announcement is not an error: the change is
// stored and every process finds it at its next poll.
func commit(ctx context.Context, rdb redis.UniversalClient, change func(redis.Pipeliner)) (int64, error) {
	var incr *redis.IntCmd
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		change(p)
		incr = p.Incr(ctx, versionKey)
		return nil
	})
	if err != nil {
		return 0, err
	}
	v := incr.Val()
	_ = rdb.Publish(ctx, Channel, strconv.FormatInt(v, 10)).Err()
	return v, nil
}

// storedList returns the operator's current list of kind (nil: none).
func storedList(ctx context.Context, rdb redis.UniversalClient, kind string) (set, bool, error) {
	v, err := rdb.Get(ctx, KeyPrefix+kind).Result()
	if errors.Is(err, redis.Nil) {
		v, err = rdb.Get(ctx, legacyPrefix+kind).Result()
	}
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read %s list: %w", kind, err)
	}
	s, err := parseString(kind, v)
	if err != nil {
		return nil, false, fmt.Errorf("stored %s list: %w", kind, err)
	}
	return s, true, nil
}

// StoredInfo returns what an operator loaded, by kind (absent: none).
func StoredInfo(ctx context.Context, rdb redis.UniversalClient) (map[string]Stored, error) {
	out := map[string]Stored{}
	for _, key := range []string{legacyPrefix + "meta", metaKey} { // the current one wins
		m, err := rdb.HGetAll(ctx, key).Result()
		if err != nil {
			return nil, fmt.Errorf("read list metadata: %w", err)
		}
		for k, v := range m {
			var s Stored
			if json.Unmarshal([]byte(v), &s) == nil {
				out[k] = s
			}
		}
	}
	return out, nil
}

// LoadFromRedis returns the embedded defaults overlaid with the lists an
// operator stored: a stored list replaces the default of its kind, or is
// added to it (mode add). The lists, their metadata and the version are
// read in one MULTI (one slot), so they agree.
func LoadFromRedis(ctx context.Context, rdb redis.UniversalClient) (*Lists, error) {
	var (
		version *redis.StringCmd
		meta    *redis.MapStringStringCmd
		lists   = map[string]*redis.StringCmd{}
	)
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		version = p.Get(ctx, versionKey)
		meta = p.HGetAll(ctx, metaKey)
		for _, k := range Kinds {
			lists[k] = p.Get(ctx, KeyPrefix+k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read stored lists: %w", err)
	}
	l := Default()
	if v, err := version.Int64(); err == nil {
		l.version = v
	}
	info := map[string]Stored{}
	for k, v := range meta.Val() {
		var s Stored
		if json.Unmarshal([]byte(v), &s) == nil {
			info[k] = s
		}
	}
	for _, k := range Kinds {
		text, err := lists[k].Result()
		src := "redis"
		if errors.Is(err, redis.Nil) {
			// A list stored by an older bulkd (no version, no mode).
			if text, err = rdb.Get(ctx, legacyPrefix+k).Result(); errors.Is(err, redis.Nil) {
				continue
			}
			if err == nil {
				old, _ := StoredInfo(ctx, rdb)
				info[k] = old[k]
			}
		}
		if err != nil {
			return nil, fmt.Errorf("read %s list: %w", k, err)
		}
		s, err := parseString(k, text)
		if err != nil {
			return nil, fmt.Errorf("stored %s list: %w", k, err)
		}
		st := info[k]
		if st.Source != "" {
			src = "redis: " + st.Source
		}
		mode := Replace
		if st.Mode == Add {
			mode = Add
			s = union(embedded()[k], s)
			src += " + embedded"
		}
		l.sets[k] = s
		l.info[k] = Info{Kind: k, Count: len(s), Source: src, Mode: mode}
	}
	return l, nil
}
