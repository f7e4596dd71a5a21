package admin

// `bulkd admin account limits`: one account's limits (docs/security.md),
// its overrides, and what it holds against each.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/dashboard"
	"github.com/bulkd/bulkd/internal/idempotency"
	"github.com/bulkd/bulkd/internal/jobs"
)

// LimitsUsage documents the limits command.
const LimitsUsage = `  account limits ACCOUNT [--active-jobs V] [--stored-bytes V] [--drafts V] [--draft-bytes V] [--keys V] [--request-rate V]
                 [--idempotency-bytes V]
                                                   set one account's limits (V: a number, bytes may end in KiB, MiB
                                                   or GiB; 0 is no limit; "default" drops the override) and print
                                                   its effective limits, defaults, overrides and usage as JSON.
                                                   The defaults are the --account-max-* / --account-rate-limit
                                                   flags (BULKD_ACCOUNT_* variables) of this command, which should
                                                   match the servers'
`

// LimitView is one limit in `account limits`.
type LimitView struct {
	Limit    int64  `json:"limit"` // effective; 0 is no limit
	Default  int64  `json:"default"`
	Override *int64 `json:"override"` // null: the default applies
	Used     *int64 `json:"used,omitempty"`
}

// LimitsView is what `account limits` prints.
type LimitsView struct {
	Account     string    `json:"account"`
	ActiveJobs  LimitView `json:"active_jobs"`
	StoredBytes LimitView `json:"stored_bytes"`
	Drafts      LimitView `json:"drafts"`
	DraftBytes  LimitView `json:"draft_bytes"`
	Keys        LimitView `json:"keys"`
	RequestRate LimitView `json:"request_rate"`
	// IdempotencyBytes: Used is what the account's stored Idempotency-Key
	// answers are counted for (internal/idempotency).
	IdempotencyBytes LimitView `json:"idempotency_bytes"`
}

func (v *LimitsView) entry(name string) *LimitView {
	switch name {
	case accounts.LimitActiveJobs:
		return &v.ActiveJobs
	case accounts.LimitStoredBytes:
		return &v.StoredBytes
	case accounts.LimitDrafts:
		return &v.Drafts
	case accounts.LimitDraftBytes:
		return &v.DraftBytes
	case accounts.LimitKeys:
		return &v.Keys
	case accounts.LimitIdempotencyBytes:
		return &v.IdempotencyBytes
	}
	return &v.RequestRate
}

// limitFlags maps the command's flags to limit names.
var limitFlags = []struct{ flag, name string }{
	{"active-jobs", accounts.LimitActiveJobs},
	{"stored-bytes", accounts.LimitStoredBytes},
	{"drafts", accounts.LimitDrafts},
	{"draft-bytes", accounts.LimitDraftBytes},
	{"keys", accounts.LimitKeys},
	{"request-rate", accounts.LimitRequestRate},
	{"idempotency-bytes", accounts.LimitIdempotencyBytes},
}

func accountLimits(ctx context.Context, rdb redis.UniversalClient, st *accounts.Store, env Env, args []string) error {
	fs := newFlags(env, "account limits")
	vals := make(map[string]*string, len(limitFlags))
	for _, f := range limitFlags {
		vals[f.name] = fs.String(f.flag, "", "new value of "+f.name+": a number (0: no limit) or default")
	}
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	id := pos[0]
	if _, err := st.Account(ctx, id); err != nil {
		return fmt.Errorf("account %s: %w", id, err)
	}
	// Check every value before changing any.
	set := map[string]int64{}
	var clear []string
	for _, f := range limitFlags {
		s := strings.TrimSpace(*vals[f.name])
		switch {
		case s == "":
		case s == "default":
			clear = append(clear, f.name)
		default:
			n, err := parseLimit(s)
			if err != nil {
				return fmt.Errorf("--%s: %w", f.flag, err)
			}
			set[f.name] = n
		}
	}
	for name, n := range set {
		if err := st.SetLimit(ctx, id, name, n); err != nil {
			return err
		}
	}
	for _, name := range clear {
		if err := st.ClearLimit(ctx, id, name); err != nil {
			return err
		}
	}
	v, err := limitsView(ctx, rdb, st, env.Limits, id, env.Now())
	if err != nil {
		return err
	}
	enc := json.NewEncoder(env.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// limitsView reads an account's limits and usage.
func limitsView(ctx context.Context, rdb redis.UniversalClient, st *accounts.Store, defaults accounts.Limits, id string, now time.Time) (*LimitsView, error) {
	over, err := st.LimitOverrides(ctx, id)
	if err != nil {
		return nil, err
	}
	eff := defaults.With(over)
	v := &LimitsView{Account: id}
	for _, name := range accounts.LimitNames {
		e := v.entry(name)
		e.Limit, e.Default = eff.Get(name), defaults.Get(name)
		if o, ok := over[name]; ok {
			e.Override = &o
		}
	}
	u, err := jobs.AccountUsage(ctx, rdb, id, now)
	if err != nil {
		return nil, err
	}
	drafts, draftBytes, err := dashboard.DraftUsage(ctx, rdb, id)
	if err != nil {
		return nil, err
	}
	keys, err := st.ActiveKeys(ctx, id)
	if err != nil {
		return nil, err
	}
	idemBytes, _, err := idempotency.AccountUsage(ctx, rdb, id, now)
	if err != nil {
		return nil, err
	}
	v.ActiveJobs.Used, v.StoredBytes.Used = &u.ActiveJobs, &u.StoredBytes
	v.Drafts.Used, v.DraftBytes.Used, v.Keys.Used = &drafts, &draftBytes, &keys
	v.IdempotencyBytes.Used = &idemBytes
	return v, nil
}

// parseLimit reads a limit: a non-negative integer, optionally ending in
// KiB, MiB or GiB.
func parseLimit(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(rest), u.m
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, errors.New("want a number of at least 0 (bytes may end in KiB, MiB or GiB), or default")
	}
	if n > (1<<62)/mult {
		return 0, errors.New("too large")
	}
	return n * mult, nil
}
