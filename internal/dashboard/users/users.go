// Package users stores the account dashboard's users, their sign-in
// links, sessions and sign-in attempt counters in Redis.
//
// Passwords are hashed with argon2id (the parameters are recorded in the
// hash string, so they can be raised later without breaking old hashes)
// and compared in constant time. Sign-in links, session ids and CSRF
// tokens are 256-bit random values; only their SHA-256 is stored, so a
// copy of Redis holds nothing that signs anyone in.
//
// Redis Cluster: every key is in the slot of one hash tag, and no command
// or script spans two slots. A user's record is tagged with the user id,
// the email index with the email's hash, a session with its own hash and
// an account's list of users with the account id (in the account's slot).
package users

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/crypto/argon2"
)

// Errors.
var (
	ErrNotFound = errors.New("not found")
	// ErrBadCredentials is every failed sign-in: unknown email, wrong
	// password, a user without a password, a used or expired link.
	ErrBadCredentials = errors.New("bad credentials")
	ErrEmailTaken     = errors.New("a dashboard user with this email already exists")
)

// User is a dashboard user: one person who signs in to one account.
type User struct {
	ID        string
	AccountID string
	Email     string
	CreatedAt time.Time
	// HasPassword: a user made without one signs in with links only.
	HasPassword bool
	// Role is RoleOwner or RoleMember: only an owner changes the
	// account's settings (its retention).
	Role string
	// sgen is the user's session generation when the record was read (as
	// one read with the password hash): a session made for this User is
	// made under it, so a password change that lands between the
	// password check and the new session still ends that session.
	sgen string
}

// Session is a signed-in browser.
type Session struct {
	User      User
	CSRF      string    // the per-session token every form carries
	CreatedAt time.Time // absolute expiry counts from here
	hash      string
}

// Options are the store's lifetimes and limits.
type Options struct {
	IdleTTL time.Duration // a session unused this long ends (12 h)
	// MaxSessions is how many sessions a user has at once (20): a new
	// sign-in past it ends the user's oldest session. Sign-ins that
	// succeed give their throttle attempt back, so without it a user (or
	// whoever has their password) made a Redis session a sign-in, for
	// 12 h each, without end.
	MaxSessions int
	AbsoluteTTL time.Duration // a session ends this long after sign-in whatever (7 d)
	LinkTTL     time.Duration // a sign-in link is valid this long (24 h)

	// The sign-in throttle (Attempt). Attempts are counted per (email,
	// client): the first FreeAttempts go ahead at once; after that each
	// must wait AttemptDelay after the one before, doubled for every
	// further attempt, at most MaxAttemptDelay (5; 1 s, 2 s, 4 s … 60 s).
	// A pair's count is forgotten AttemptWindow after its last attempt,
	// and at once when it signs in. Delays rather than a lock: failures
	// from one client never hold the same email back on another.
	FreeAttempts    int64
	AttemptDelay    time.Duration
	MaxAttemptDelay time.Duration
	// ClientAttempts attempts per client, whatever the emails, are allowed
	// in any AttemptWindow (50 in any 15 min, a sliding window: a fixed
	// one let 100 through around its boundary): the guard against one
	// address spraying passwords over many emails. A successful sign-in
	// gives its attempt back.
	ClientAttempts int64
	AttemptWindow  time.Duration
	// UserAttempts attempts per email, from all clients together, are
	// allowed in any UserWindow (20 in any 10 min): the guard no number of
	// client addresses gets around (a botnet trying one password per
	// address). Past it the email is refused from clients it has not
	// signed in from, until the window has room (at most UserWindow);
	// from a client it signed in from in the last KnownClientTTL (30 d;
	// the KnownClients most recent, 20) it is never refused by this
	// limit, so an attacker cannot lock the owner out of their usual
	// network. docs/security.md has the trade-off.
	UserAttempts   int64
	UserWindow     time.Duration
	KnownClients   int64
	KnownClientTTL time.Duration
}

func (o *Options) defaults() {
	if o.IdleTTL <= 0 {
		o.IdleTTL = 12 * time.Hour
	}
	if o.AbsoluteTTL <= 0 {
		o.AbsoluteTTL = 7 * 24 * time.Hour
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = 20
	}
	if o.LinkTTL <= 0 {
		o.LinkTTL = 24 * time.Hour
	}
	if o.FreeAttempts <= 0 {
		o.FreeAttempts = 5
	}
	if o.AttemptDelay <= 0 {
		o.AttemptDelay = time.Second
	}
	if o.MaxAttemptDelay < o.AttemptDelay {
		o.MaxAttemptDelay = max(time.Minute, o.AttemptDelay)
	}
	if o.ClientAttempts <= 0 {
		o.ClientAttempts = 50
	}
	if o.AttemptWindow <= 0 {
		o.AttemptWindow = 15 * time.Minute
	}
	if o.UserAttempts <= 0 {
		o.UserAttempts = 20
	}
	if o.UserWindow <= 0 {
		o.UserWindow = 10 * time.Minute
	}
	if o.KnownClients <= 0 {
		o.KnownClients = 20
	}
	if o.KnownClientTTL <= 0 {
		o.KnownClientTTL = 30 * 24 * time.Hour
	}
}

// Store reads and writes dashboard users and sessions.
type Store struct {
	rdb  redis.UniversalClient
	now  func() time.Time
	Opts Options
}

// New returns a store; now may be nil for time.Now.
func New(rdb redis.UniversalClient, now func() time.Time, o Options) *Store {
	if now == nil {
		now = time.Now
	}
	o.defaults()
	return &Store{rdb: rdb, now: now, Opts: o}
}

const prefix = "bulkd:dash:"

func userKey(id string) string           { return prefix + "user:{" + id + "}" }
func userSessionsKey(id string) string   { return prefix + "user:{" + id + "}:sessions" }
func emailKey(email string) string       { return prefix + "email:{" + digest(email) + "}" }
func sessionKey(hash string) string      { return prefix + "sess:{" + hash + "}" }
func linkKey(hash string) string         { return prefix + "link:{" + hash + "}" }
func accountUsersKey(acct string) string { return "bulkd:acct:{" + acct + "}:dashusers" }
func attemptKey(kind, v string) string   { return prefix + "attempts:" + kind + ":{" + digest(v) + "}" }

// pairKey is the attempt record of one email from one client.
func pairKey(email, client string) string {
	return attemptKey("pair", NormalizeEmail(email)+"\x00"+client)
}

// clientKey is a client's attempts (a sorted set of their times).
func clientKey(client string) string { return attemptKey("client", client) }

// userKeys are an email's attempts from every client (a sorted set of
// their times) and the clients it signed in from (client -> last ms), on
// one slot.
func userKeys(email string) []string {
	tag := attemptKey("user", NormalizeEmail(email))
	return []string{tag, tag + ":known"}
}

// digest is the hex SHA-256 of s: what is stored of every secret.
func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// Token returns a new 256-bit random value, URL-safe.
func Token() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// NormalizeEmail is how an email is compared: trimmed and lowercased.
func NormalizeEmail(e string) string { return strings.ToLower(strings.TrimSpace(e)) }

// validEmail is a light check: one @, something on each side, no spaces.
func validEmail(e string) bool {
	at := strings.IndexByte(e, '@')
	return at > 0 && at < len(e)-1 && strings.Count(e, "@") == 1 && !strings.ContainsAny(e, " \t\r\n") && len(e) <= 320
}

// Roles of dashboard users. The first user of an account is its owner,
// later ones members (SetRole changes it: `bulkd admin user role`). A user
// made before roles existed has no role field and reads as owner: every
// user could do everything then.
const (
	RoleOwner  = "owner"
	RoleMember = "member"
)

// IsOwner reports whether u may change the account's settings.
func (u *User) IsOwner() bool { return u.Role == RoleOwner }

// Create makes a dashboard user of an account. password may be empty: the
// user then signs in with a link (NewLink).
func (s *Store) Create(ctx context.Context, accountID, email, password string) (*User, error) {
	email = NormalizeEmail(email)
	if !validEmail(email) {
		return nil, fmt.Errorf("invalid email %q", email)
	}
	if accountID == "" {
		return nil, errors.New("an account is required")
	}
	u := &User{ID: "usr_" + Token()[:22], AccountID: accountID, Email: email, CreatedAt: s.now().UTC()}
	// The email index is claimed first (SETNX: one user per email), in
	// its own slot; the user record that makes sign-in work is written
	// last, so a half-made user cannot sign in and its email can be
	// reclaimed by deleting the index entry.
	ok, err := s.rdb.SetNX(ctx, emailKey(email), u.ID, 0).Result()
	if err != nil {
		return nil, fmt.Errorf("create user: %w", err)
	}
	if !ok {
		return nil, ErrEmailTaken
	}
	n, err := s.rdb.SCard(ctx, accountUsersKey(accountID)).Result()
	if err != nil {
		return nil, fmt.Errorf("create user: %w", err)
	}
	u.Role = RoleMember
	if n == 0 {
		u.Role = RoleOwner
	}
	fields := []any{"id", u.ID, "account", accountID, "email", email, "created_at", u.CreatedAt.Unix(), "role", u.Role, "password", ""}
	if password != "" {
		h, err := HashPassword(password)
		if err != nil {
			return nil, err
		}
		fields[len(fields)-1] = h
		u.HasPassword = true
	}
	if err := s.rdb.SAdd(ctx, accountUsersKey(accountID), u.ID).Err(); err != nil {
		return nil, fmt.Errorf("create user: %w", err)
	}
	if err := s.rdb.HSet(ctx, userKey(u.ID), fields...).Err(); err != nil {
		return nil, fmt.Errorf("create user: %w", err)
	}
	return u, nil
}

// SetRole makes user id an owner or a member of its account.
func (s *Store) SetRole(ctx context.Context, id, role string) error {
	if role != RoleOwner && role != RoleMember {
		return fmt.Errorf("role %q: owner or member", role)
	}
	if _, err := s.Get(ctx, id); err != nil {
		return err
	}
	if err := s.rdb.HSet(ctx, userKey(id), "role", role).Err(); err != nil {
		return fmt.Errorf("set role: %w", err)
	}
	return nil
}

// ByEmail finds a user by email.
func (s *Store) ByEmail(ctx context.Context, email string) (*User, string, error) {
	id, err := s.rdb.Get(ctx, emailKey(NormalizeEmail(email))).Result()
	if errors.Is(err, redis.Nil) {
		return nil, "", ErrNotFound
	}
	if err != nil {
		return nil, "", fmt.Errorf("user by email: %w", err)
	}
	return s.get(ctx, id)
}

// Get reads a user by id.
func (s *Store) Get(ctx context.Context, id string) (*User, error) {
	u, _, err := s.get(ctx, id)
	return u, err
}

func (s *Store) get(ctx context.Context, id string) (*User, string, error) {
	m, err := s.rdb.HGetAll(ctx, userKey(id)).Result()
	if err != nil {
		return nil, "", fmt.Errorf("read user: %w", err)
	}
	u, hash := userFromMap(m)
	if u == nil {
		return nil, "", ErrNotFound
	}
	return u, hash, nil
}

// userFromMap reads a user's record and its password hash; nil when there
// is no such user.
func userFromMap(m map[string]string) (*User, string) {
	if m["id"] == "" {
		return nil, ""
	}
	ca, _ := strconv.ParseInt(m["created_at"], 10, 64)
	role := m["role"]
	if role == "" {
		role = RoleOwner // made before roles existed (Create)
	}
	return &User{ID: m["id"], AccountID: m["account"], Email: m["email"], CreatedAt: time.Unix(ca, 0).UTC(),
		HasPassword: m["password"] != "", Role: role, sgen: m["sgen"]}, m["password"]
}

// SetPassword replaces a user's password and ends every session the user
// has: whoever signed in with the old password (or a stolen cookie) is
// out. It returns how many sessions were live.
//
// The end is certain even against a sign-in racing it: the new hash and a
// new session generation are written in one HSET, and Session refuses a
// session made under an older generation. The dashboard has no password
// page; one would re-issue its own browser's session after this (a fresh
// NewSession), so that only the user's other sessions end.
func (s *Store) SetPassword(ctx context.Context, id, password string) (int, error) {
	if _, err := s.Get(ctx, id); err != nil {
		return 0, err
	}
	h, err := HashPassword(password)
	if err != nil {
		return 0, err
	}
	pipe := s.rdb.TxPipeline()
	pipe.HSet(ctx, userKey(id), "password", h)
	pipe.HIncrBy(ctx, userKey(id), "sgen", 1)
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("set password: %w", err)
	}
	return s.dropSessions(ctx, id)
}

// AccountUsers lists an account's dashboard users.
func (s *Store) AccountUsers(ctx context.Context, accountID string) ([]User, error) {
	ids, err := s.rdb.SMembers(ctx, accountUsersKey(accountID)).Result()
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HGetAll(ctx, userKey(id))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("account users: %w", err)
	}
	var out []User
	for _, c := range cmds {
		if u, _ := userFromMap(c.Val()); u != nil {
			out = append(out, *u)
		}
	}
	return out, nil
}

// dummyHash is compared against when the email is unknown, so that an
// unknown email takes as long as a wrong password.
var dummyHash = sync.OnceValue(func() string {
	h, _ := HashPassword("no user has this password " + Token())
	return h
})

// CheckPassword signs a user in by email and password; any failure is
// ErrBadCredentials.
func (s *Store) CheckPassword(ctx context.Context, email, password string) (*User, error) {
	u, hash, err := s.ByEmail(ctx, email)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	if u == nil || hash == "" {
		_ = VerifyPassword(dummyHash(), password)
		return nil, ErrBadCredentials
	}
	if !VerifyPassword(hash, password) {
		return nil, ErrBadCredentials
	}
	return u, nil
}

// LinkPath is where a one-time sign-in link points: the dashboard's page
// for it (internal/dashboard), which takes the token as ?token=.
const LinkPath = "/dashboard/login/link"

// LinkURL is the address of a one-time sign-in link under baseURL (e.g.
// https://bulkd.example.com; "" for the path alone).
func LinkURL(baseURL, token string) string {
	return strings.TrimRight(baseURL, "/") + LinkPath + "?token=" + token
}

// NewLink makes a one-time sign-in token for a user (valid Opts.LinkTTL).
func (s *Store) NewLink(ctx context.Context, userID string) (string, error) {
	if _, err := s.Get(ctx, userID); err != nil {
		return "", err
	}
	t := Token()
	if err := s.rdb.Set(ctx, linkKey(digest(t)), userID, s.Opts.LinkTTL).Err(); err != nil {
		return "", fmt.Errorf("sign-in link: %w", err)
	}
	return t, nil
}

// PeekLink says whose a sign-in token is without using it.
func (s *Store) PeekLink(ctx context.Context, token string) (*User, error) {
	id, err := s.rdb.Get(ctx, linkKey(digest(token))).Result()
	if errors.Is(err, redis.Nil) {
		return nil, ErrBadCredentials
	}
	if err != nil {
		return nil, err
	}
	return s.Get(ctx, id)
}

// RedeemLink uses a sign-in token: GET and DEL in one MULTI (GETDEL needs
// Redis 6.2), so only one caller ever gets its user.
func (s *Store) RedeemLink(ctx context.Context, token string) (*User, error) {
	if token == "" {
		return nil, ErrBadCredentials
	}
	pipe := s.rdb.TxPipeline()
	get := pipe.Get(ctx, linkKey(digest(token)))
	pipe.Del(ctx, linkKey(digest(token)))
	_, err := pipe.Exec(ctx)
	id := get.Val()
	if errors.Is(err, redis.Nil) {
		return nil, ErrBadCredentials
	}
	if err != nil {
		return nil, fmt.Errorf("sign-in link: %w", err)
	}
	u, err := s.Get(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return nil, ErrBadCredentials
	}
	return u, err
}

// NewSession signs u in: a new random session id (never one the browser
// brought), stored as its hash with the idle expiry. It returns the id for
// the cookie. u must be as the store read it (CheckPassword, RedeemLink,
// ByEmail, Get): it carries the session generation the session is made
// under.
func (s *Store) NewSession(ctx context.Context, u *User) (string, *Session, error) {
	id := Token()
	h := digest(id)
	now := s.now()
	ss := &Session{User: *u, CSRF: Token(), CreatedAt: now, hash: h}
	// Made under the user's session generation as read with the password
	// (or link) that signed in: a password change or revoke-sessions
	// raises it, which ends this session (Session).
	pipe := s.rdb.Pipeline()
	pipe.HSet(ctx, sessionKey(h), "user", u.ID, "csrf", ss.CSRF, "created", now.UnixMilli(), "gen", u.sgen)
	pipe.PExpire(ctx, sessionKey(h), s.ttl(now, now))
	if _, err := pipe.Exec(ctx); err != nil {
		return "", nil, fmt.Errorf("new session: %w", err)
	}
	// The user's list of sessions (another slot), for revoking them all.
	pipe = s.rdb.Pipeline()
	pipe.SAdd(ctx, userSessionsKey(u.ID), h)
	card := pipe.SCard(ctx, userSessionsKey(u.ID))
	pipe.Expire(ctx, userSessionsKey(u.ID), s.Opts.AbsoluteTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return "", nil, fmt.Errorf("new session: %w", err)
	}
	if card.Val() > int64(s.Opts.MaxSessions) {
		if err := s.trimSessions(ctx, u.ID, h); err != nil {
			return "", nil, err
		}
	}
	return id, ss, nil
}

// trimSessions keeps a user's sessions to MaxSessions: the list forgets
// the sessions that ended on their own, then the oldest live ones (never
// keep, the one just made) are ended.
func (s *Store) trimSessions(ctx context.Context, userID, keep string) error {
	hs, err := s.rdb.SMembers(ctx, userSessionsKey(userID)).Result()
	if err != nil {
		return fmt.Errorf("trim sessions: %w", err)
	}
	type live struct {
		h       string
		created int64
	}
	var alive []live
	for _, h := range hs { // one slot per session: one read each
		c, err := s.rdb.HGet(ctx, sessionKey(h), "created").Int64()
		switch {
		case errors.Is(err, redis.Nil):
			if err := s.rdb.SRem(ctx, userSessionsKey(userID), h).Err(); err != nil {
				return fmt.Errorf("trim sessions: %w", err)
			}
		case err != nil:
			return fmt.Errorf("trim sessions: %w", err)
		case h != keep:
			alive = append(alive, live{h, c})
		}
	}
	slices.SortFunc(alive, func(a, b live) int { return cmp.Compare(a.created, b.created) })
	for i := 0; i < len(alive)+1-s.Opts.MaxSessions; i++ {
		if err := s.rdb.Del(ctx, sessionKey(alive[i].h)).Err(); err != nil {
			return fmt.Errorf("trim sessions: %w", err)
		}
		if err := s.rdb.SRem(ctx, userSessionsKey(userID), alive[i].h).Err(); err != nil {
			return fmt.Errorf("trim sessions: %w", err)
		}
	}
	return nil
}

// ttl is a session's expiry from now: idle, but never past the absolute.
func (s *Store) ttl(created, now time.Time) time.Duration {
	return min(s.Opts.IdleTTL, created.Add(s.Opts.AbsoluteTTL).Sub(now))
}

// Session reads the session of a cookie value and extends its idle
// expiry; an unknown, expired or revoked one is ErrNotFound.
func (s *Store) Session(ctx context.Context, id string) (*Session, error) {
	if id == "" || len(id) > 100 {
		return nil, ErrNotFound
	}
	h := digest(id)
	m, err := s.rdb.HGetAll(ctx, sessionKey(h)).Result()
	if err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	if m["user"] == "" {
		return nil, ErrNotFound
	}
	ms, _ := strconv.ParseInt(m["created"], 10, 64)
	created := time.UnixMilli(ms)
	now := s.now()
	ttl := s.ttl(created, now)
	if ttl <= 0 {
		_ = s.rdb.Del(ctx, sessionKey(h)).Err()
		return nil, ErrNotFound
	}
	// The user and the idle expiry's extension in one round trip (two
	// slots: a plain pipeline, no MULTI).
	pipe := s.rdb.Pipeline()
	uc := pipe.HGetAll(ctx, userKey(m["user"]))
	pipe.PExpire(ctx, sessionKey(h), ttl)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("session: %w", err)
	}
	u, _ := userFromMap(uc.Val())
	// The user is gone, or has changed password or been signed out
	// everywhere since this session began.
	if u == nil || uc.Val()["sgen"] != m["gen"] {
		_ = s.rdb.Del(ctx, sessionKey(h)).Err()
		return nil, ErrNotFound
	}
	return &Session{User: *u, CSRF: m["csrf"], CreatedAt: created.UTC(), hash: h}, nil
}

// EndSession revokes one session (sign out).
func (s *Store) EndSession(ctx context.Context, ss *Session) error {
	if err := s.rdb.Del(ctx, sessionKey(ss.hash)).Err(); err != nil {
		return fmt.Errorf("end session: %w", err)
	}
	return s.rdb.SRem(ctx, userSessionsKey(ss.User.ID), ss.hash).Err()
}

// RevokeSessions ends every session of a user; it returns how many were
// live. Like SetPassword it raises the user's session generation first,
// so a session made while it runs ends too.
func (s *Store) RevokeSessions(ctx context.Context, userID string) (int, error) {
	if err := s.rdb.HIncrBy(ctx, userKey(userID), "sgen", 1).Err(); err != nil {
		return 0, fmt.Errorf("revoke sessions: %w", err)
	}
	return s.dropSessions(ctx, userID)
}

// dropSessions deletes the sessions the user's list names (their
// generation is already past: this frees them rather than ends them).
func (s *Store) dropSessions(ctx context.Context, userID string) (int, error) {
	hs, err := s.rdb.SMembers(ctx, userSessionsKey(userID)).Result()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, h := range hs { // one slot per session: one DEL each
		c, err := s.rdb.Del(ctx, sessionKey(h)).Result()
		if err != nil {
			return n, fmt.Errorf("revoke sessions: %w", err)
		}
		n += int(c)
	}
	return n, s.rdb.Del(ctx, userSessionsKey(userID)).Err()
}

// argon2id parameters (OWASP's minimum: 19 MiB, 2 passes, 1 lane).
const (
	argonMemory  = 19 * 1024
	argonTime    = 2
	argonThreads = 1
	argonKeyLen  = 32
)

// HashPassword hashes with argon2id into the PHC string form
// $argon2id$v=19$m=19456,t=2,p=1$salt$hash.
func HashPassword(pw string) (string, error) {
	if len(pw) < 8 {
		return "", errors.New("a password needs at least 8 characters")
	}
	if len(pw) > 1024 {
		return "", errors.New("a password may have at most 1024 characters")
	}
	var salt [16]byte
	if _, err := rand.Read(salt[:]); err != nil {
		return "", err
	}
	k := argon2.IDKey([]byte(pw), salt[:], argonTime, argonMemory, argonThreads, argonKeyLen)
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemory, argonTime, argonThreads,
		base64.RawStdEncoding.EncodeToString(salt[:]), base64.RawStdEncoding.EncodeToString(k)), nil
}

// VerifyPassword checks pw against a hash of HashPassword's form, with
// the parameters the hash records, in constant time.
func VerifyPassword(hash, pw string) bool {
	parts := strings.Split(hash, "$")
	if len(parts) != 6 || parts[1] != "argon2id" || len(pw) > 1024 {
		return false
	}
	var v int
	var m, t uint32
	var p uint8
	if _, err := fmt.Sscanf(parts[2], "v=%d", &v); err != nil || v != argon2.Version {
		return false
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &t, &p); err != nil || m == 0 || m > 1<<20 || t == 0 || t > 16 || p == 0 {
		return false
	}
	salt, err := base64.RawStdEncoding.DecodeString(parts[4])
	if err != nil {
		return false
	}
	want, err := base64.RawStdEncoding.DecodeString(parts[5])
	if err != nil || len(want) == 0 || len(want) > 128 {
		return false
	}
	got := argon2.IDKey([]byte(pw), salt, t, m, p, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1
}

// VerifySecret compares two secrets in constant time (CSRF tokens).
func VerifySecret(a, b string) bool {
	return a != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
