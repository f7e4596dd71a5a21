package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RotationGrace is how long the previous secret stays valid (and is still
// signed with) after a rotation.
const RotationGrace = 24 * time.Hour

// secretKey is an account's signing secrets: cur, and after a rotation
// prev with prev_until (ms). It carries the account's hash tag like the
// account's other keys.
func secretKey(accountID string) string { return "bulkd:acct:{" + accountID + "}:webhook" }

// Secrets keeps the per-account webhook signing secrets in Redis.
type Secrets struct {
	rdb redis.UniversalClient
	Now func() time.Time
}

// NewSecrets returns the secret store on rdb.
func NewSecrets(rdb redis.UniversalClient) *Secrets { return &Secrets{rdb: rdb, Now: time.Now} }

func newSecret() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return "whsec_" + hex.EncodeToString(b[:])
}

// ensureScript sets cur when the account has none yet and returns cur,
// prev and prev_until. KEYS = secrets hash. ARGV = candidate secret.
var ensureScript = redis.NewScript(`
redis.call('HSETNX', KEYS[1], 'cur', ARGV[1])
return redis.call('HMGET', KEYS[1], 'cur', 'prev', 'prev_until')
`)

// Current returns the account's secret, generating it on first use.
func (s *Secrets) Current(ctx context.Context, accountID string) (string, error) {
	cur, _, _, err := s.ensure(ctx, accountID)
	return cur, err
}

func (s *Secrets) ensure(ctx context.Context, accountID string) (cur, prev string, prevUntil time.Time, err error) {
	if accountID == "" {
		return "", "", time.Time{}, errors.New("webhook secret: no account")
	}
	v, err := ensureScript.Run(ctx, s.rdb, []string{secretKey(accountID)}, newSecret()).Slice()
	if err != nil {
		return "", "", time.Time{}, fmt.Errorf("webhook secret of %s: %w", accountID, err)
	}
	str := func(i int) string {
		if i < len(v) {
			x, _ := v[i].(string)
			return x
		}
		return ""
	}
	cur, prev = str(0), str(1)
	if ms, _ := strconv.ParseInt(str(2), 10, 64); ms > 0 {
		prevUntil = time.UnixMilli(ms)
	}
	return cur, prev, prevUntil, nil
}

// rotateScript makes ARGV[1] the current secret and keeps the one it
// replaces as prev until ARGV[2] (ms). KEYS = secrets hash.
var rotateScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], 'cur')
if cur then
  redis.call('HSET', KEYS[1], 'prev', cur, 'prev_until', ARGV[2])
end
redis.call('HSET', KEYS[1], 'cur', ARGV[1])
return ARGV[1]
`)

// Rotate makes a new secret; the previous one stays valid (events are
// signed with both) for RotationGrace.
func (s *Secrets) Rotate(ctx context.Context, accountID string) (string, error) {
	if accountID == "" {
		return "", errors.New("webhook secret: no account")
	}
	until := s.Now().Add(RotationGrace).UnixMilli()
	cur, err := rotateScript.Run(ctx, s.rdb, []string{secretKey(accountID)}, newSecret(), until).Text()
	if err != nil {
		return "", fmt.Errorf("rotate webhook secret of %s: %w", accountID, err)
	}
	return cur, nil
}

// Signing returns the secrets to sign with now: the current one, then the
// previous one while it is within its grace period.
func (s *Secrets) Signing(ctx context.Context, accountID string) ([]string, error) {
	cur, prev, until, err := s.ensure(ctx, accountID)
	if err != nil {
		return nil, err
	}
	out := []string{cur}
	if prev != "" && s.Now().Before(until) {
		out = append(out, prev)
	}
	return out, nil
}

// Sign computes the X-Bulkd-Signature value of body sent at t:
// "t=<unix>,v1=<hex>[,v1=<hex>]", one v1 per secret, each the hex
// HMAC-SHA256 of "<unix>.<body>".
func Sign(secrets []string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	var b strings.Builder
	b.WriteString("t=")
	b.WriteString(ts)
	for _, sec := range secrets {
		b.WriteString(",v1=")
		b.WriteString(signature(sec, ts, body))
	}
	return b.String()
}

func signature(secret, ts string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// Verify checks an X-Bulkd-Signature header against body with secret, as
// a receiver does: one of its v1 values must match, and its t must be
// within tolerance of now (0: no check). It is what docs/webhooks.md shows.
func Verify(header, secret string, body []byte, tolerance time.Duration, now time.Time) error {
	var ts string
	var sigs []string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errors.New("signature: no timestamp")
	}
	if tolerance > 0 {
		if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
			return errors.New("signature: timestamp outside the tolerance")
		}
	}
	want := signature(secret, ts, body)
	for _, s := range sigs {
		if hmac.Equal([]byte(s), []byte(want)) {
			return nil
		}
	}
	return errors.New("signature: no v1 value matches")
}
