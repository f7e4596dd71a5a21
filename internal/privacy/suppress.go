// Package privacy is what bulkd does for the people in its customers'
// lists (docs/privacy.md): the suppression list of erased people, kept as
// keyed hashes only; the erasure of a person from every job, cache and
// learned pattern (bulkd admin erase); and the audit log of erasures and
// deletions, which names no one.
package privacy

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/jobs"
)

// SuppressedKey is the set of the suppression list: keyed hashes
// (Hasher.Hash) of canonical subjects, never a subject in the clear.
const SuppressedKey = "bulkd:privacy:suppressed"

// ErrNoSecret: erasing or suppressing needs the deployment's secret
// (--privacy-secret), without which the hashes could be recomputed by
// anyone with a list of addresses.
var ErrNoSecret = errors.New("privacy: no --privacy-secret (BULKD_PRIVACY_SECRET) configured")

// Hasher makes the keyed hashes of subjects: HMAC-SHA256 with the
// deployment's secret. Without the secret a hash cannot be tested against
// a guessed address.
type Hasher struct{ secret []byte }

// NewHasher returns a hasher with secret; an empty secret is ErrNoSecret.
func NewHasher(secret string) (*Hasher, error) {
	if secret == "" {
		return nil, ErrNoSecret
	}
	return &Hasher{secret: []byte(secret)}, nil
}

// Hash is subject's keyed hash, hex.
func (h *Hasher) Hash(subject string) string {
	m := hmac.New(sha256.New, h.secret)
	m.Write([]byte(subject))
	return hex.EncodeToString(m.Sum(nil))
}

// Suppressions is the suppression list.
type Suppressions struct {
	rdb redis.UniversalClient
	h   *Hasher
}

// NewSuppressions returns the list on rdb; a nil hasher (no secret) is a
// list that suppresses nothing and can be added to by no one.
func NewSuppressions(rdb redis.UniversalClient, h *Hasher) *Suppressions {
	return &Suppressions{rdb: rdb, h: h}
}

// Add puts subjects on the list.
func (s *Suppressions) Add(ctx context.Context, subjects ...string) error {
	if s.h == nil {
		return ErrNoSecret
	}
	members := make([]any, len(subjects))
	for i, sub := range subjects {
		members[i] = s.h.Hash(sub)
	}
	if err := s.rdb.SAdd(ctx, SuppressedKey, members...).Err(); err != nil {
		return fmt.Errorf("suppression list: %w", err)
	}
	return nil
}

// Any reports whether one of subjects is on the list (a single
// endpoint's input, apiserver). A nil list, or one without a secret,
// suppresses nothing; an empty list costs one SCARD.
func (s *Suppressions) Any(ctx context.Context, subjects ...string) (bool, error) {
	if s == nil || s.h == nil || len(subjects) == 0 {
		return false, nil
	}
	n, err := s.rdb.SCard(ctx, SuppressedKey).Result()
	if err != nil {
		return false, fmt.Errorf("suppression list: %w", err)
	}
	if n == 0 {
		return false, nil
	}
	hashes := make([]any, len(subjects))
	for i, sub := range subjects {
		hashes[i] = s.h.Hash(sub)
	}
	in, err := s.rdb.SMIsMember(ctx, SuppressedKey, hashes...).Result()
	if err != nil {
		return false, fmt.Errorf("suppression list: %w", err)
	}
	for _, yes := range in {
		if yes {
			return true, nil
		}
	}
	return false, nil
}

// suppressBatch is how many hashes one SMISMEMBER asks about.
const suppressBatch = 1000

// Apply answers the inputs of b that name a suppressed subject with f's
// SuppressedAnswer (jobs.Builder.Suppress). A family that names no one,
// or an empty list (one SCARD), costs nothing more.
func (s *Suppressions) Apply(ctx context.Context, f family.Family, b *jobs.Builder) error {
	fs, ok := f.(family.Subjects)
	if !ok || s == nil || s.h == nil {
		return nil
	}
	n, err := s.rdb.SCard(ctx, SuppressedKey).Result()
	if err != nil {
		return fmt.Errorf("suppression list: %w", err)
	}
	if n == 0 {
		return nil
	}
	var hits []int
	var idx []int
	var hashes []any
	check := func() error {
		if len(hashes) == 0 {
			return nil
		}
		in, err := s.rdb.SMIsMember(ctx, SuppressedKey, hashes...).Result()
		if err != nil {
			return fmt.Errorf("suppression list: %w", err)
		}
		for k, yes := range in {
			if yes && (len(hits) == 0 || hits[len(hits)-1] != idx[k]) {
				hits = append(hits, idx[k])
			}
		}
		idx, hashes = idx[:0], hashes[:0]
		return nil
	}
	var ferr error
	b.Payloads(func(i int, payload string) {
		if ferr != nil {
			return
		}
		for _, sub := range fs.Subjects(payload) {
			idx, hashes = append(idx, i), append(hashes, s.h.Hash(sub))
		}
		if len(hashes) >= suppressBatch {
			ferr = check()
		}
	})
	if ferr != nil {
		return ferr
	}
	if err := check(); err != nil {
		return err
	}
	b.Suppress(hits, fs.SuppressedAnswer())
	return nil
}
