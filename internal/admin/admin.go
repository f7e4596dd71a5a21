// Package admin is `bulkd admin`: non-interactive, scriptable account,
// key, credit, plan and ledger management. Every command prints only its
// result on stdout (an id, a key, a balance, or JSON), and diagnostics on
// stderr, so it composes in shell scripts: KEY=$(bulkd admin key create ...).
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/redisconn"
)

// Env is what commands run against.
type Env struct {
	Stdout, Stderr io.Writer
	Stdin          io.Reader
	Now            func() time.Time
	// Extra holds commands registered by other packages (e.g. companies).
	Extra map[string]Command
	// Limits are the default per-account limits (accounts.Limits): key
	// creation enforces Keys, `account limits` shows them. Main fills them
	// from the --account-max-* flags (BULKD_* variables, as the servers).
	Limits accounts.Limits
}

// Command runs one admin sub-command with its arguments.
type Command func(ctx context.Context, rdb redis.UniversalClient, env Env, args []string) error

// Usage is printed for `bulkd admin help`.
const Usage = `usage: bulkd admin [--redis-url URL] COMMAND ...

  account create --name NAME [--credits N]         print the new account id
  account show ACCOUNT                             print the account as JSON
  account list                                     print account ids, one a line
  account retention ACCOUNT [DAYS|default]         print, or set, how many days the account's jobs are kept
                                                   (1..30, never more than the servers' --retention; docs/privacy.md)
` + LimitsUsage + `  credits add ACCOUNT AMOUNT [--note TEXT]         print the new balance
  credits remove ACCOUNT AMOUNT [--note TEXT]      print the new balance (never below 0)
  key create ACCOUNT [--type payg|unlimited]       print the new key (shown only this once)
  key revoke KEY_ID|PREFIX                         print the revoked key's prefix
  plan set ACCOUNT --plan P --state S [--period-end RFC3339]
                                                   set the unlimited plan (starter|standard|professional|none),
                                                   state (active|lapsed) and billing period end
  ledger ACCOUNT [--limit N] [--after ENTRY_ID]    print ledger entries as JSON lines, oldest first
` + EraseUsage + LedgerUsage + CompaniesUsage + ListsUsage + WebhookUsage + UserUsage + SMTPRulesUsage

// Main parses the global flags and runs a command.
func Main(ctx context.Context, args []string, env Env) error {
	fs := flag.NewFlagSet("bulkd admin", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	redisURL := config.Default().RedisURL
	if v, ok := os.LookupEnv(config.EnvName("redis-url")); ok {
		redisURL = v
	}
	fs.StringVar(&redisURL, "redis-url", redisURL, "Redis URL ["+config.EnvName("redis-url")+"]")
	// The per-account limits' defaults, from the same flags and BULKD_*
	// variables as the servers'.
	cfg := config.Default()
	cfg.RegisterLimits(fs)
	fs.Usage = func() { fmt.Fprint(env.Stderr, Usage) }
	if env.Stdin == nil {
		env.Stdin = os.Stdin
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 || rest[0] == "help" {
		fmt.Fprint(env.Stderr, Usage)
		if len(rest) == 0 {
			return errors.New("no command")
		}
		return nil
	}
	// A server, a Cluster or a Sentinel-managed master (internal/redisconn);
	// nothing is dialled until the first command.
	rcfg, err := redisconn.Parse(redisURL)
	if err != nil {
		return fmt.Errorf("--redis-url: %w", err)
	}
	rdb := rcfg.NewClient()
	defer rdb.Close()
	if env.Now == nil {
		env.Now = time.Now
	}
	env.Limits = cfg.AccountLimits()
	return Run(ctx, rdb, env, rest)
}

// Run dispatches a command against rdb.
func Run(ctx context.Context, rdb redis.UniversalClient, env Env, args []string) error {
	if len(args) == 0 {
		return errors.New("no command; see bulkd admin help")
	}
	if c, ok := env.Extra[args[0]]; ok {
		return c(ctx, rdb, env, args[1:])
	}
	if args[0] == "companies" {
		return companies(ctx, rdb, env, args[1:])
	}
	if args[0] == "lists" {
		return listsCmd(ctx, rdb, env, args[1:])
	}
	if args[0] == "user" {
		return userCmd(ctx, rdb, env, args[1:])
	}
	if args[0] == "smtp-rules" {
		return smtpRulesCmd(ctx, rdb, env, args[1:])
	}
	if args[0] == "webhook-secret" {
		return webhookSecret(ctx, rdb, env, args[1:])
	}
	if len(args) < 2 {
		return fmt.Errorf("unknown command %q; see bulkd admin help", strings.Join(args, " "))
	}
	st := accounts.NewStore(rdb, env.Now)
	st.Limits = env.Limits
	bl := billing.New(rdb, env.Now)
	verb, rest := args[0]+" "+args[1], args[2:]
	switch verb {
	case "account limits":
		return accountLimits(ctx, rdb, st, env, rest)
	case "account retention":
		return accountRetention(ctx, st, env, rest)
	case "account create":
		return accountCreate(ctx, st, env, rest)
	case "account show":
		return accountShow(ctx, st, bl, env, rest)
	case "account list":
		ids, err := st.ListAccounts(ctx)
		if err != nil {
			return err
		}
		for _, id := range ids {
			fmt.Fprintln(env.Stdout, id)
		}
		return nil
	case "credits add", "credits remove":
		return creditsAdjust(ctx, bl, env, rest, args[1] == "remove")
	case "key create":
		return keyCreate(ctx, st, env, rest)
	case "key revoke":
		if len(rest) != 1 {
			return errors.New("usage: key revoke KEY_ID|PREFIX")
		}
		if err := st.RevokeKey(ctx, rest[0]); err != nil {
			return fmt.Errorf("revoke %s: %w", rest[0], err)
		}
		id := strings.TrimPrefix(rest[0], "bkd_")
		if i := strings.IndexByte(id, '_'); i >= 0 {
			id = id[:i]
		}
		fmt.Fprintln(env.Stdout, "bkd_"+id)
		return nil
	case "plan set":
		return planSet(ctx, st, env, rest)
	}
	if args[0] == "ledger" {
		if ok, err := ledgerSub(ctx, bl, env, args[1:]); ok {
			return err
		}
		return ledger(ctx, bl, env, args[1:])
	}
	return fmt.Errorf("unknown command %q; see bulkd admin help", verb)
}

// parse splits positional arguments from flags wherever they appear, so
// both `account show ID --x` and `account show --x ID` work.
func parse(fs *flag.FlagSet, args []string, npos int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if len(pos) != npos {
		return nil, fmt.Errorf("expected %d argument(s), got %d", npos, len(pos))
	}
	return pos, nil
}

func newFlags(env Env, name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	return fs
}

func accountCreate(ctx context.Context, st *accounts.Store, env Env, args []string) error {
	fs := newFlags(env, "account create")
	name := fs.String("name", "", "account name")
	amount := fs.String("credits", "0", "opening balance in credits (decimals allowed)")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if strings.TrimSpace(*name) == "" {
		return errors.New("--name is required")
	}
	bal, err := credits.Parse(*amount)
	if err != nil {
		return fmt.Errorf("--credits: %w", err)
	}
	a, err := st.CreateAccount(ctx, *name, bal)
	if err != nil {
		return err
	}
	fmt.Fprintln(env.Stdout, a.ID)
	return nil
}

// AccountView is what `account show` prints.
type AccountView struct {
	ID                  string         `json:"id"`
	Name                string         `json:"name"`
	Credits             credits.Amount `json:"credits"`
	Plan                string         `json:"plan"`
	PlanState           string         `json:"plan_state"`
	PlanActive          bool           `json:"plan_active"`
	CurrentPeriodEnd    *time.Time     `json:"current_period_end"`
	BulkSearchesToday   int64          `json:"bulk_searches_today"`
	SingleLookupsPeriod int64          `json:"single_lookups_this_period"`
	CreatedAt           time.Time      `json:"created_at"`
	Keys                []KeyView      `json:"keys"`
}

// KeyView is one key in `account show`.
type KeyView struct {
	Prefix    string     `json:"prefix"`
	Type      string     `json:"type"`
	Revoked   bool       `json:"revoked"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

func accountShow(ctx context.Context, st *accounts.Store, bl *billing.Billing, env Env, args []string) error {
	fs := newFlags(env, "account show")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	a, err := st.Account(ctx, pos[0])
	if err != nil {
		return fmt.Errorf("account %s: %w", pos[0], err)
	}
	now := env.Now()
	v := AccountView{ID: a.ID, Name: a.Name, Credits: a.Balance, Plan: string(a.Plan), PlanState: string(a.PlanState),
		PlanActive: a.PlanActive(now), CreatedAt: a.CreatedAt, Keys: []KeyView{}}
	if !a.PeriodEnd.IsZero() {
		pe := a.PeriodEnd
		v.CurrentPeriodEnd = &pe
		if v.SingleLookupsPeriod, err = bl.Used(ctx, a.ID, billing.PeriodWindow(billing.SingleLookups, pe)); err != nil {
			return err
		}
	}
	if v.BulkSearchesToday, err = bl.Used(ctx, a.ID, billing.DailyWindow(billing.BulkSearches, now)); err != nil {
		return err
	}
	keys, err := st.Keys(ctx, a.ID)
	if err != nil {
		return err
	}
	for _, k := range keys {
		kv := KeyView{Prefix: k.Prefix, Type: string(k.Type), Revoked: k.Revoked, CreatedAt: k.CreatedAt}
		if !k.RevokedAt.IsZero() {
			ra := k.RevokedAt
			kv.RevokedAt = &ra
		}
		v.Keys = append(v.Keys, kv)
	}
	enc := json.NewEncoder(env.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func creditsAdjust(ctx context.Context, bl *billing.Billing, env Env, args []string, remove bool) error {
	fs := newFlags(env, "credits")
	note := fs.String("note", "", "ledger note")
	pos, err := parse(fs, args, 2)
	if err != nil {
		return err
	}
	amt, err := credits.Parse(pos[1])
	if err != nil {
		return err
	}
	if amt <= 0 {
		return errors.New("amount must be positive")
	}
	if remove {
		amt = -amt
	}
	if *note == "" {
		*note = "admin"
	}
	after, err := bl.Adjust(ctx, pos[0], amt, *note)
	if err != nil {
		return err
	}
	fmt.Fprintln(env.Stdout, after)
	return nil
}

func keyCreate(ctx context.Context, st *accounts.Store, env Env, args []string) error {
	fs := newFlags(env, "key create")
	typ := fs.String("type", string(accounts.PayAsYouGo), "payg or unlimited")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	value, _, err := st.CreateKey(ctx, pos[0], accounts.KeyType(*typ))
	var le *accounts.LimitError
	if errors.As(err, &le) {
		return fmt.Errorf("%w; revoke a key, or raise the account's limit: bulkd admin account limits %s --keys N", err, pos[0])
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(env.Stdout, value)
	return nil
}

func planSet(ctx context.Context, st *accounts.Store, env Env, args []string) error {
	fs := newFlags(env, "plan set")
	plan := fs.String("plan", "", "starter, standard, professional or none")
	state := fs.String("state", string(accounts.StateActive), "active or lapsed")
	periodEnd := fs.String("period-end", "", "end of the billing period (RFC 3339); default 30 days from now")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	p, err := accounts.ParsePlan(*plan)
	if err != nil {
		return err
	}
	pe := env.Now().UTC().Add(30 * 24 * time.Hour).Truncate(time.Second)
	if *periodEnd != "" {
		if pe, err = time.Parse(time.RFC3339, *periodEnd); err != nil {
			return fmt.Errorf("--period-end: %w", err)
		}
	}
	if p == accounts.PlanNone {
		pe = time.Time{}
	}
	if err := st.SetPlan(ctx, pos[0], p, accounts.PlanState(*state), pe); err != nil {
		return err
	}
	fmt.Fprintln(env.Stdout, pos[0])
	return nil
}

func ledger(ctx context.Context, bl *billing.Billing, env Env, args []string) error {
	fs := newFlags(env, "ledger")
	limit := fs.Int64("limit", 1000, "entries to print")
	after := fs.String("after", "", "print entries after this entry id")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	es, err := bl.Entries(ctx, pos[0], *after, *limit)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(env.Stdout)
	for _, e := range es {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return nil
}

// EraseUsage is the help of `erase` and `privacy audit`, which
// internal/serve registers (they need the families; docs/privacy.md).
const EraseUsage = `  erase --email ADDRESS | --name FIRST LAST --domain D [--actor WHO]
                                                   erase a person from every job, learned pattern and cache, add
                                                   them to the suppression list (keyed hash), record it in the audit
                                                   log; prints a JSON report (hashes and counts only); needs
                                                   BULKD_PRIVACY_SECRET (or --privacy-secret), the servers' secret
  privacy audit [--limit N]                        print the privacy audit log (erasures, job deletions) as JSON lines
`

// accountRetention prints or sets an account's job retention in days
// (docs/privacy.md): "default" goes back to the deployment's --retention.
func accountRetention(ctx context.Context, st *accounts.Store, env Env, args []string) error {
	if len(args) < 1 || len(args) > 2 {
		return errors.New("usage: account retention ACCOUNT [DAYS|default]")
	}
	if len(args) == 2 {
		days := 0
		if args[1] != "default" {
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 1 {
				return fmt.Errorf("retention: %q is not a number of days (1..%d) or default", args[1], accounts.MaxRetentionDays)
			}
			days = n
		}
		if err := st.SetRetention(ctx, args[0], days); err != nil {
			return err
		}
	}
	a, err := st.Account(ctx, args[0])
	if err != nil {
		return err
	}
	if a.RetentionDays == 0 {
		fmt.Fprintln(env.Stdout, "default")
		return nil
	}
	fmt.Fprintln(env.Stdout, a.RetentionDays)
	return nil
}
