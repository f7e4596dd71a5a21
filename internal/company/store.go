package company

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Normalizer turns raw network URLs and domains into their canonical form,
// or returns an error for unusable input. It is satisfied by the
// internal/company/normalize package; the interface lives here, at the
// consumer, so the two packages stay independent.
type Normalizer interface {
	NetworkURL(raw string) (string, error)
	Domain(raw string) (string, error)
}

// Redis key layout, all under the caller's prefix P (e.g. "bulkd:"):
//
//	P co:r:<network_id>  string  the record, binary-encoded (see codec.go)
//	P co:u:<hhhh>        hash    network URL index bucket
//	P co:d:<hhhh>        hash    website domain index bucket
//	P co:n               string  number of stored records
//
// An index entry maps a 10-byte field to the decimal network_id, where
// <hhhh> and the field are the first 2 and the next 10 bytes of
// SHA-1(canonical value). Hashing keeps every field short and fixed-size, so
// the 65,536 buckets of each index stay in Redis's compact listpack encoding
// (at most 128 entries of at most 64 bytes by default) up to about 6 million
// companies, whatever the length of the URLs. An entry then costs some 25
// bytes plus its share of the bucket, against roughly 100 in a
// hashtable-encoded hash keyed by the full URL. 96 bits of hash make a false
// match between two
// different inputs practically impossible (about 1e-17 at a million
// companies), and lookups double-check the stored record's own URL or domain
// anyway. SHA-1 is used because the Put script must recompute bucket and
// field for stale entries and Redis exposes redis.sha1hex to Lua.
//
// Records and index buckets spread over every hash slot, so a Put is not
// one atomic step (Redis Cluster runs a script or a transaction on one
// slot only): see putChunk for the order that keeps lookups right at every
// point.
const (
	keyRecord   = "co:r:"
	keyURLIdx   = "co:u:"
	keyDomIdx   = "co:d:"
	keyCount    = "co:n"
	idxFieldLen = 10
)

// MaxBatch is the largest number of records one Put step or one lookup
// step handles; larger calls are split. It bounds how big one request
// gets (each record is its own command: none holds Redis for long).
const MaxBatch = 1000

// unindexScript removes an index entry only while it still points at the
// record that gave up the URL or domain (another record may have claimed
// it since). KEYS = the index bucket. ARGV = field, network id.
var unindexScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('HDEL', KEYS[1], ARGV[1]) end
return 0
`)

// recordHeader reads the network URL and domain at the head of a stored
// record (see codec.go), without decoding the rest.
func recordHeader(v string) (url, domain string) {
	if len(v) < 5 || v[0] != codecVersion {
		return "", ""
	}
	ul := int(v[1])<<8 | int(v[2])
	p := 3 + ul
	if len(v) < p+2 {
		return "", ""
	}
	dl := int(v[p])<<8 | int(v[p+1])
	if len(v) < p+2+dl {
		return "", ""
	}
	return v[3 : 3+ul], v[p+2 : p+2+dl]
}

// Store keeps company records in Redis. It is safe for concurrent use.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
}

// NewStore returns a Store whose keys all start with prefix (e.g. "bulkd:").
func NewStore(rdb redis.UniversalClient, prefix string) *Store {
	return &Store{rdb: rdb, prefix: prefix}
}

// indexKeyField returns the bucket key and field of canonical value s in
// the index whose key infix is kind.
func (s *Store) indexKeyField(kind, v string) (key, field string) {
	sum := sha1.Sum([]byte(v))
	return s.prefix + kind + hex.EncodeToString(sum[:2]), string(sum[2 : 2+idxFieldLen])
}

// validateForPut checks the invariants the key layout relies on.
func validateForPut(r *Record) error {
	if r.NetworkID == nil {
		return errors.New("network_id is null")
	}
	if id := *r.NetworkID; id < 1 || id > MaxNetworkID {
		return fmt.Errorf("network_id %d outside 1..2^53-1", id)
	}
	if r.NetworkURL == nil && r.Domain == nil {
		return errors.New("neither network_url nor domain is set")
	}
	for _, f := range []struct {
		name string
		v    *string
	}{{"network_url", r.NetworkURL}, {"domain", r.Domain}} {
		if f.v == nil {
			continue
		}
		if *f.v == "" {
			return fmt.Errorf("%s is empty (use null)", f.name)
		}
		if len(*f.v) > maxKeyLen {
			return fmt.Errorf("%s is %d bytes long, limit %d", f.name, len(*f.v), maxKeyLen)
		}
	}
	return nil
}

// Put upserts recs, which must already carry canonical network_url and
// domain values and a network_id, in steps of MaxBatch records: records
// are replaced whole, index entries for a URL or domain a record no longer
// has are removed, and putting the same records again leaves Redis
// byte-for-byte unchanged. When several records claim the same URL or
// domain, the index points at the one written last.
func (s *Store) Put(ctx context.Context, recs []Record) error {
	for i := range recs {
		if err := validateForPut(&recs[i]); err != nil {
			return fmt.Errorf("company: put record %d: %w", i, err)
		}
	}
	for start := 0; start < len(recs); start += MaxBatch {
		chunk := recs[start:min(start+MaxBatch, len(recs))]
		if err := s.putChunk(ctx, chunk); err != nil {
			return fmt.Errorf("company: put records %d..%d: %w", start, start+len(chunk)-1, err)
		}
	}
	return nil
}

// putChunk writes up to MaxBatch records in three steps, each a pipeline
// of one-key commands (records and index buckets are in every hash slot):
//
//  1. every record, with SET ... GET (one call, and the old value back);
//  2. for a record whose URL or domain changed, the old index entry is
//     removed if it still points at the record (unindexScript);
//  3. the index entries of every record (re)claimed with HSET, and the
//     count raised by the records that are new.
//
// Lookups stay right at every point: they go from an index entry to the
// record and keep it only if the record still carries the URL or domain
// looked up, so an entry not yet removed finds nothing, and one not yet
// written finds nothing either, as just before the Put. A Put cut short
// (a crash, a lost connection) is completed by running it again (imports
// are idempotent), except for the count of the records that step 1 had
// found new: it may then stay short by at most one chunk.
//
// An earlier version did all of it in one Lua script per chunk, atomic but
// holding Redis for about ten milliseconds per 1,000 records, and not
// possible on Redis Cluster.
func (s *Store) putChunk(ctx context.Context, chunk []Record) error {
	type entry struct{ uk, uf, dk, df, id string }
	var buf []byte
	ents := make([]entry, len(chunk))
	pipe := s.rdb.Pipeline()
	olds := make([]*redis.StatusCmd, len(chunk)) // with GET: the old value, or redis.Nil
	for i := range chunk {
		r := &chunk[i]
		// Each value gets its own sub-slice of buf. When append moves buf,
		// earlier sub-slices keep pointing at the old array, which is
		// never written again, so they stay valid.
		off := len(buf)
		buf = encodeRecord(buf, r)
		e := &ents[i]
		e.id = strconv.FormatInt(*r.NetworkID, 10)
		if r.NetworkURL != nil {
			e.uk, e.uf = s.indexKeyField(keyURLIdx, *r.NetworkURL)
		}
		if r.Domain != nil {
			e.dk, e.df = s.indexKeyField(keyDomIdx, *r.Domain)
		}
		olds[i] = pipe.SetArgs(ctx, s.prefix+keyRecord+e.id, buf[off:len(buf):len(buf)], redis.SetArgs{Get: true})
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	added := 0
	for i, c := range olds {
		old, err := c.Result()
		if errors.Is(err, redis.Nil) {
			added++
			continue
		}
		if err != nil {
			return err
		}
		r := &chunk[i]
		ou, od := recordHeader(old)
		if ou != "" && (r.NetworkURL == nil || *r.NetworkURL != ou) {
			k, f := s.indexKeyField(keyURLIdx, ou)
			if err := unindexScript.Run(ctx, s.rdb, []string{k}, f, ents[i].id).Err(); err != nil {
				return err
			}
		}
		if od != "" && (r.Domain == nil || *r.Domain != od) {
			k, f := s.indexKeyField(keyDomIdx, od)
			if err := unindexScript.Run(ctx, s.rdb, []string{k}, f, ents[i].id).Err(); err != nil {
				return err
			}
		}
	}
	pipe = s.rdb.Pipeline()
	for _, e := range ents {
		if e.uk != "" {
			pipe.HSet(ctx, e.uk, e.uf, e.id)
		}
		if e.dk != "" {
			pipe.HSet(ctx, e.dk, e.df, e.id)
		}
	}
	if added > 0 {
		pipe.IncrBy(ctx, s.prefix+keyCount, int64(added))
	}
	if pipe.Len() > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

// ByNetworkURL looks up companies by canonical network URL. result[i] is
// nil when canon[i] is empty or unknown. Up to MaxBatch inputs take two
// round trips.
func (s *Store) ByNetworkURL(ctx context.Context, canon []string) ([]*Record, error) {
	return s.lookup(ctx, keyURLIdx, canon, func(r *Record) *string { return r.NetworkURL })
}

// ByDomain looks up companies by canonical website domain. It matches only
// a company whose own website is on that domain, never one that merely
// hosts email there. result[i] is nil when canon[i] is empty or unknown.
func (s *Store) ByDomain(ctx context.Context, canon []string) ([]*Record, error) {
	return s.lookup(ctx, keyDomIdx, canon, func(r *Record) *string { return r.Domain })
}

// lookup resolves canonical values through the index whose key infix is
// kind, in two round trips per chunk: a pipeline of HGETs for the ids, then
// one MGET for the records. A Lua script could do it in one round trip, but
// measured on 500-input batches it took twice the wall time and more than
// twice the Redis CPU: every value passing through Lua is copied into a Lua
// string and back, and each redis.call from Lua costs about a microsecond.
//
// The two steps are not atomic. A record renamed in between is caught by
// the final check that the record still carries the input, and reported as
// not found, which is what a lookup just after the rename would say.
func (s *Store) lookup(ctx context.Context, kind string, canon []string, key func(*Record) *string) ([]*Record, error) {
	out := make([]*Record, len(canon))
	cmds := make([]*redis.StringCmd, 0, min(len(canon), MaxBatch))
	keys := make([]string, 0, cap(cmds))
	pos := make([]int, 0, cap(cmds))
	for start := 0; start < len(canon); start += MaxBatch {
		chunk := canon[start:min(start+MaxBatch, len(canon))]
		cmds, keys, pos = cmds[:0], keys[:0], pos[:0]
		pipe := s.rdb.Pipeline()
		for _, c := range chunk {
			if c == "" {
				cmds = append(cmds, nil)
				continue
			}
			k, f := s.indexKeyField(kind, c)
			cmds = append(cmds, pipe.HGet(ctx, k, f))
		}
		if pipe.Len() > 0 {
			// Exec's own error is the first command's error, often a
			// harmless redis.Nil; each command is checked below instead.
			_, _ = pipe.Exec(ctx)
		}
		for i, cmd := range cmds {
			if cmd == nil {
				continue
			}
			id, err := cmd.Result()
			if errors.Is(err, redis.Nil) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("company: lookup %d inputs: %w", len(chunk), err)
			}
			keys = append(keys, s.prefix+keyRecord+id)
			pos = append(pos, i)
		}
		if len(keys) == 0 {
			continue
		}
		vals, err := s.mget(ctx, keys)
		if err != nil {
			return nil, fmt.Errorf("company: lookup %d records: %w", len(keys), err)
		}
		for j, v := range vals {
			str, ok := v.(string)
			if !ok {
				continue // deleted since the index was read
			}
			i := pos[j]
			rec, err := decodeRecord(str)
			if err != nil {
				return nil, fmt.Errorf("company: lookup %q: %w", chunk[i], err)
			}
			// Only a record that really carries this URL or domain matches:
			// guards against a rename between the two steps and against a
			// (practically impossible) digest collision.
			if k := key(rec); k == nil || *k != chunk[i] {
				continue
			}
			out[start+i] = rec
		}
	}
	return out, nil
}

// mget reads records: one MGET on a single Redis; on Redis Cluster, where
// a multi-key command must stay on one slot and records spread over all of
// them, a pipeline of GETs (the client sends each node its share at once).
// A missing record is nil, as MGET reports it.
func (s *Store) mget(ctx context.Context, keys []string) ([]any, error) {
	if _, ok := s.rdb.(*redis.ClusterClient); !ok {
		return s.rdb.MGet(ctx, keys...).Result()
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Get(ctx, k)
	}
	_, _ = pipe.Exec(ctx) // each command is checked below
	out := make([]any, len(keys))
	for i, c := range cmds {
		v, err := c.Result()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return nil, err
		default:
			out[i] = v
		}
	}
	return out, nil
}

// Count returns the number of stored records.
func (s *Store) Count(ctx context.Context) (int64, error) {
	n, err := s.rdb.Get(ctx, s.prefix+keyCount).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("company: count: %w", err)
	}
	return n, nil
}
