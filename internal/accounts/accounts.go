// Package accounts stores accounts, their unlimited plans and their API keys
// in Redis.
//
// API keys are high-entropy random strings of the form bkd_<id>_<secret>.
// Only the SHA-256 of the whole key is stored, under the key id; a presented
// key is looked up by its id and its hash compared in constant time, so
// neither a database leak nor response timing reveals a usable key.
package accounts

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/credits"
)

// KeyType is the family a key authenticates.
type KeyType string

const (
	// PayAsYouGo keys authenticate the credit-metered /v1 endpoints.
	PayAsYouGo KeyType = "payg"
	// Unlimited keys authenticate /v1/unlimited/* and need an active plan.
	Unlimited KeyType = "unlimited"
)

// Plan is an unlimited plan tier.
type Plan string

const (
	PlanNone         Plan = ""
	PlanStarter      Plan = "starter"
	PlanStandard     Plan = "standard"
	PlanProfessional Plan = "professional"
)

// PlanState says whether the unlimited subscription is paid up.
type PlanState string

const (
	StateActive PlanState = "active"
	StateLapsed PlanState = "lapsed"
)

// ParsePlan validates a plan name.
func ParsePlan(s string) (Plan, error) {
	switch p := Plan(strings.ToLower(strings.TrimSpace(s))); p {
	case PlanStarter, PlanStandard, PlanProfessional:
		return p, nil
	case "none":
		return PlanNone, nil
	}
	return "", fmt.Errorf("unknown plan %q (want starter, standard, professional or none)", s)
}

// Account is a customer account.
type Account struct {
	ID        string
	Name      string
	Balance   credits.Amount
	Plan      Plan
	PlanState PlanState
	PeriodEnd time.Time // end of the current billing period; zero when no plan
	CreatedAt time.Time
	// RetentionDays is how long the account's jobs are kept, in days
	// (1..30, field retention_days; 0: the deployment's --retention). The
	// deployment's retention is the most any account gets
	// (docs/privacy.md).
	RetentionDays int
	// Overrides are the account's own limits (limits.go): limit name ->
	// value, absent where the default applies. Authenticate reads only
	// the request rate's.
	Overrides map[string]int64
}

// PlanActive reports whether the unlimited plan may be used at now: a plan is
// set, its state is active and its billing period has not ended. A period that
// ran out without renewal counts as lapsed (we read "subscription has lapsed"
// as covering both an explicit lapse and a period nobody renewed).
func (a *Account) PlanActive(now time.Time) bool {
	if a.Plan == PlanNone || a.PlanState != StateActive {
		return false
	}
	return a.PeriodEnd.IsZero() || now.Before(a.PeriodEnd)
}

// Key is an API key's stored record (never the key itself).
type Key struct {
	ID        string
	AccountID string
	Type      KeyType
	Prefix    string // safe to display: bkd_<id>
	Revoked   bool
	CreatedAt time.Time
	RevokedAt time.Time
	// LastUsedAt is when the key last authenticated a request, to the
	// minute (zero: never, or before last-use tracking); Keys reads it.
	LastUsedAt time.Time
}

// Errors.
var (
	ErrNotFound   = errors.New("not found")
	ErrInvalidKey = errors.New("invalid API key")
)

// Store reads and writes accounts and keys.
type Store struct {
	rdb  redis.UniversalClient
	now  func() time.Time
	seen seenKeys
	// Limits are the default per-account limits (limits.go); the store
	// enforces Keys when it makes a key. Zero: no limit.
	Limits Limits
}

// NewStore returns a store; now may be nil for time.Now.
func NewStore(rdb redis.UniversalClient, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{rdb: rdb, now: now}
}

// Key layout. Every key of one account carries the account id as a hash tag
// so that the billing scripts, which touch several of them at once, also work
// on Redis Cluster.
const prefix = "bulkd:"

// AccountKey is the hash holding an account.
func AccountKey(id string) string { return prefix + "acct:{" + id + "}" }

// AccountKeysKey is the set of key ids of an account.
func AccountKeysKey(id string) string { return prefix + "acct:{" + id + "}:keys" }

// LedgerKey is the stream of an account's money and quota movements.
func LedgerKey(id string) string { return prefix + "acct:{" + id + "}:ledger" }

// ChargeKey records one charge so it can be reversed exactly once.
func ChargeKey(account, chargeID string) string {
	return prefix + "acct:{" + account + "}:charge:" + chargeID
}

// QuotaKey counts one quota window's use.
func QuotaKey(account, window string) string {
	return prefix + "acct:{" + account + "}:quota:" + window
}

func accountsIndexKey() string   { return prefix + "accounts" }
func apiKeyKey(id string) string { return prefix + "apikey:" + id }

const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// randomString returns n characters from alphabet using crypto/rand with
// rejection sampling (no modulo bias).
func randomString(n int) string {
	out := make([]byte, 0, n)
	buf := make([]byte, n*2)
	for len(out) < n {
		if _, err := rand.Read(buf); err != nil {
			panic(fmt.Sprintf("crypto/rand: %v", err))
		}
		for _, b := range buf {
			if int(b) < 248 { // 248 = 4*62
				out = append(out, alphabet[int(b)%62])
				if len(out) == n {
					break
				}
			}
		}
	}
	return string(out)
}

// CreateAccount stores a new account with an opening balance.
func (s *Store) CreateAccount(ctx context.Context, name string, balance credits.Amount) (*Account, error) {
	if balance < 0 {
		return nil, errors.New("opening balance must not be negative")
	}
	a := &Account{ID: "acct_" + strings.ToLower(randomString(16)), Name: name, Balance: balance, CreatedAt: s.now().UTC()}
	ok, err := s.rdb.HSetNX(ctx, AccountKey(a.ID), "id", a.ID).Result()
	if err != nil {
		return nil, fmt.Errorf("create account: %w", err)
	}
	if !ok {
		return nil, errors.New("create account: id collision, try again")
	}
	// opening_balance is where the ledger starts: every later change of
	// the balance is a ledger entry, so balance = opening_balance + the
	// ledger's credit amounts (billing.Reconcile checks it).
	if err := s.rdb.HSet(ctx, AccountKey(a.ID), "name", name, "balance", int64(balance), "opening_balance", int64(balance),
		"plan", "", "plan_state", "", "period_end", 0, "created_at", a.CreatedAt.Unix()).Err(); err != nil {
		return nil, fmt.Errorf("create account: %w", err)
	}
	// The index of all accounts lives in another hash slot than the
	// account (no MULTI spans both on Redis Cluster): it is written once
	// the account is whole, and only listing reads it.
	if err := s.rdb.SAdd(ctx, accountsIndexKey(), a.ID).Err(); err != nil {
		return nil, fmt.Errorf("create account: index: %w", err)
	}
	return a, nil
}

// Account reads one account.
func (s *Store) Account(ctx context.Context, id string) (*Account, error) {
	m, err := s.rdb.HGetAll(ctx, AccountKey(id)).Result()
	if err != nil {
		return nil, fmt.Errorf("read account: %w", err)
	}
	if len(m) == 0 || m["id"] == "" {
		return nil, ErrNotFound
	}
	return accountFromMap(m), nil
}

func accountFromMap(m map[string]string) *Account {
	bal, _ := strconv.ParseInt(m["balance"], 10, 64)
	pe, _ := strconv.ParseInt(m["period_end"], 10, 64)
	ca, _ := strconv.ParseInt(m["created_at"], 10, 64)
	a := &Account{ID: m["id"], Name: m["name"], Balance: credits.Amount(bal), Plan: Plan(m["plan"]),
		PlanState: PlanState(m["plan_state"]), CreatedAt: time.Unix(ca, 0).UTC()}
	if pe > 0 {
		a.PeriodEnd = time.Unix(pe, 0).UTC()
	}
	a.Overrides = overridesFrom(m)
	a.RetentionDays, _ = strconv.Atoi(m["retention_days"])
	return a
}

// MaxRetentionDays is the longest retention an account may choose.
const MaxRetentionDays = 30

// SetRetention sets how many days the account's jobs are kept (1 to
// MaxRetentionDays), or with 0 goes back to the deployment's retention.
// Jobs submitted before keep the expiry they were given.
func (s *Store) SetRetention(ctx context.Context, id string, days int) error {
	if days < 0 || days > MaxRetentionDays {
		return fmt.Errorf("retention must be 1 to %d days (0: the deployment's)", MaxRetentionDays)
	}
	if _, err := s.Account(ctx, id); err != nil {
		return err
	}
	if days == 0 {
		return s.rdb.HDel(ctx, AccountKey(id), "retention_days").Err()
	}
	return s.rdb.HSet(ctx, AccountKey(id), "retention_days", days).Err()
}

// Retention is how long a job of an account with retentionDays is kept
// under a deployment whose retention is max: the account's choice, never
// longer than max.
func Retention(retentionDays int, max time.Duration) time.Duration {
	if retentionDays <= 0 {
		return max
	}
	return min(time.Duration(retentionDays)*24*time.Hour, max)
}

// ListAccounts returns every account id.
func (s *Store) ListAccounts(ctx context.Context) ([]string, error) {
	return s.rdb.SMembers(ctx, accountsIndexKey()).Result()
}

// SetPlan sets an account's unlimited plan, state and period end.
func (s *Store) SetPlan(ctx context.Context, id string, plan Plan, state PlanState, periodEnd time.Time) error {
	if _, err := s.Account(ctx, id); err != nil {
		return err
	}
	if state != StateActive && state != StateLapsed {
		return fmt.Errorf("unknown plan state %q (want active or lapsed)", state)
	}
	var pe int64
	if !periodEnd.IsZero() {
		pe = periodEnd.Unix()
	}
	return s.rdb.HSet(ctx, AccountKey(id), "plan", string(plan), "plan_state", string(state), "period_end", pe).Err()
}

// CreateKey makes a new API key for an account and returns its value, which
// is never stored and cannot be shown again.
func (s *Store) CreateKey(ctx context.Context, accountID string, typ KeyType) (string, *Key, error) {
	if typ != PayAsYouGo && typ != Unlimited {
		return "", nil, fmt.Errorf("unknown key type %q (want payg or unlimited)", typ)
	}
	if _, err := s.Account(ctx, accountID); err != nil {
		return "", nil, err
	}
	id := randomString(12)
	value := "bkd_" + id + "_" + randomString(40)
	k := &Key{ID: id, AccountID: accountID, Type: typ, Prefix: "bkd_" + id, CreatedAt: s.now().UTC()}
	ok, err := s.rdb.HSetNX(ctx, apiKeyKey(id), "account", accountID).Result()
	if err != nil {
		return "", nil, fmt.Errorf("create key: %w", err)
	}
	if !ok {
		return "", nil, errors.New("create key: id collision, try again")
	}
	sum := sha256.Sum256([]byte(value))
	// The key's record and the account's key list are in different hash
	// slots (no MULTI spans both on Redis Cluster). The list is written
	// first and the hash that makes the key work last, so a key that
	// authenticates is always listed (and can be found and revoked). The
	// list takes it only under the account's key limit (listKey, one
	// script on the account's slot: two concurrent creations cannot both
	// take the last place).
	if err := s.listKey(ctx, accountID, id); err != nil {
		_ = s.rdb.Del(context.WithoutCancel(ctx), apiKeyKey(id)).Err() // the placeholder HSETNX made
		return "", nil, err
	}
	if err := s.rdb.HSet(ctx, apiKeyKey(id), "type", string(typ), "hash", hex.EncodeToString(sum[:]), "revoked", 0,
		"created_at", k.CreatedAt.Unix()).Err(); err != nil {
		return "", nil, fmt.Errorf("create key: %w", err)
	}
	s.pruneRevoked(ctx, accountID)
	return value, k, nil
}

// KeyIDOf extracts the key id of a presented key, or "" when the value is
// not shaped like one of ours.
func KeyIDOf(value string) string {
	if len(value) != 4+12+1+40 || !strings.HasPrefix(value, "bkd_") || value[16] != '_' {
		return ""
	}
	id := value[4:16]
	for i := 0; i < len(id); i++ {
		if strings.IndexByte(alphabet, id[i]) < 0 {
			return ""
		}
	}
	return id
}

// Principal is what a successful authentication yields.
type Principal struct {
	Key     Key
	Account Account
}

// keyFields and accountFields are what authentication reads.
var (
	keyFields     = []string{"account", "type", "hash", "revoked", "created_at"}
	accountFields = []string{"id", "name", "balance", "plan", "plan_state", "period_end", "created_at", LimitField(LimitRequestRate)}
)

// Authenticate checks a presented key. It returns ErrInvalidKey for any
// unknown, malformed, revoked or wrong value, without saying which.
//
// The key's record and its account's hash are in different hash slots
// (the key id is all a request carries), so no one script may read both on
// Redis Cluster. A key's account never changes, so the store remembers it:
// a key seen before costs one pipelined round trip that reads the key and
// the account together; a key seen for the first time costs two.
// Revocation is read from the key's record on every call, so it still
// takes effect at once. The key's last use (Key.LastUsedAt) is written at
// most once a minute per key per process: one HSET a minute per active
// key, not one per request.
func (s *Store) Authenticate(ctx context.Context, value string) (*Principal, error) {
	id := KeyIDOf(value)
	if id == "" {
		return nil, ErrInvalidKey
	}
	var k, a []any
	acct, known := s.seen.owner(id)
	if known {
		pipe := s.rdb.Pipeline()
		kc := pipe.HMGet(ctx, apiKeyKey(id), keyFields...)
		ac := pipe.HMGet(ctx, AccountKey(acct), accountFields...)
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("authenticate: %w", err)
		}
		k, a = kc.Val(), ac.Val()
	} else {
		var err error
		if k, err = s.rdb.HMGet(ctx, apiKeyKey(id), keyFields...).Result(); err != nil {
			return nil, fmt.Errorf("authenticate: %w", err)
		}
	}
	str := func(v []any, i int, def string) string {
		if x, ok := v[i].(string); ok {
			return x
		}
		return def
	}
	owner := str(k, 0, "")
	if owner == "" {
		return nil, ErrInvalidKey
	}
	if owner != acct { // first sight (or a cache that can only be wrong by a bug)
		var err error
		if a, err = s.rdb.HMGet(ctx, AccountKey(owner), accountFields...).Result(); err != nil {
			return nil, fmt.Errorf("authenticate: %w", err)
		}
	}
	sum := sha256.Sum256([]byte(value))
	want, err := hex.DecodeString(str(k, 2, ""))
	if err != nil || subtle.ConstantTimeCompare(sum[:], want) != 1 || str(k, 3, "0") != "0" || str(a, 0, "") == "" {
		return nil, ErrInvalidKey
	}
	ca, _ := strconv.ParseInt(str(k, 4, "0"), 10, 64)
	p := &Principal{Key: Key{ID: id, AccountID: owner, Type: KeyType(str(k, 1, "")), Prefix: "bkd_" + id, CreatedAt: time.Unix(ca, 0).UTC()}}
	m := make(map[string]string, len(accountFields))
	for i, f := range accountFields {
		m[f] = str(a, i, "")
	}
	p.Account = *accountFromMap(m)
	if now := s.now(); s.seen.use(id, owner, now) {
		// The last-used mark: at most one HSET a minute per key per
		// process; a failure only loses the mark.
		_ = s.rdb.HSet(ctx, apiKeyKey(id), "last_used_at", now.UTC().Unix()).Err()
	}
	return p, nil
}

// seenKeys remembers, per authenticated key id, its account (never
// changes once a key exists) and when its last use was last written.
// Bounded: when full it starts over, which only costs the next request of
// each key one more round trip and one more last-used write.
type seenKeys struct {
	mu sync.Mutex
	m  map[string]seenKey
}

type seenKey struct {
	account string
	marked  time.Time // when last_used_at was last written
}

const maxSeenKeys = 100_000

func (o *seenKeys) owner(id string) (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	k, ok := o.m[id]
	return k.account, ok
}

// use records that key id of account authenticated a request at now, and
// reports whether its last use is due to be written (none written in the
// last minute by this process).
func (o *seenKeys) use(id, account string, now time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil || len(o.m) >= maxSeenKeys {
		o.m = make(map[string]seenKey)
	}
	k, ok := o.m[id]
	due := !ok || now.Sub(k.marked) >= time.Minute
	if due {
		k.marked = now
	}
	k.account = account
	o.m[id] = k
	return due
}

// RevokeKey revokes a key by id or display prefix; it stops working at once.
func (s *Store) RevokeKey(ctx context.Context, idOrPrefix string) error {
	id := strings.TrimPrefix(idOrPrefix, "bkd_")
	if i := strings.IndexByte(id, '_'); i >= 0 { // a whole key value was given
		id = id[:i]
	}
	owner, err := s.rdb.HGet(ctx, apiKeyKey(id), "account").Result()
	if errors.Is(err, redis.Nil) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("revoke key: %w", err)
	}
	if err := s.rdb.HSet(ctx, apiKeyKey(id), "revoked", 1, "revoked_at", s.now().UTC().Unix()).Err(); err != nil {
		return fmt.Errorf("revoke key: %w", err)
	}
	// Second, in the account's slot: the key limit counts the keys not
	// revoked from this set. A crash before it only makes the count too
	// high until the next refusal checks it against the records
	// (listKey).
	if err := s.rdb.SAdd(ctx, revokedKeysKey(owner), id).Err(); err != nil {
		return fmt.Errorf("revoke key: %w", err)
	}
	return nil
}

// Keys lists an account's keys.
func (s *Store) Keys(ctx context.Context, accountID string) ([]Key, error) {
	ids, err := s.rdb.SMembers(ctx, AccountKeysKey(accountID)).Result()
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HGetAll(ctx, apiKeyKey(id))
	}
	if len(ids) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("list keys: %w", err)
		}
	}
	out := make([]Key, 0, len(ids))
	for i, id := range ids {
		m := cmds[i].Val()
		ca, _ := strconv.ParseInt(m["created_at"], 10, 64)
		ra, _ := strconv.ParseInt(m["revoked_at"], 10, 64)
		k := Key{ID: id, AccountID: accountID, Type: KeyType(m["type"]), Prefix: "bkd_" + id, Revoked: m["revoked"] == "1",
			CreatedAt: time.Unix(ca, 0).UTC()}
		if ra > 0 {
			k.RevokedAt = time.Unix(ra, 0).UTC()
		}
		if lu, _ := strconv.ParseInt(m["last_used_at"], 10, 64); lu > 0 {
			k.LastUsedAt = time.Unix(lu, 0).UTC()
		}
		out = append(out, k)
	}
	return out, nil
}
