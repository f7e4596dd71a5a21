package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/admin"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/finder"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/privacy"
)

// AdminCommands are the admin commands that need the families (`bulkd
// admin erase`, `bulkd admin privacy audit`): cmd/bulkd registers them
// (admin.Env.Extra), so package admin stays free of the families.
func AdminCommands(extra ...Extra) map[string]admin.Command {
	return map[string]admin.Command{
		"erase": func(ctx context.Context, rdb redis.UniversalClient, env admin.Env, args []string) error {
			return erase(ctx, rdb, env, args, extra)
		},
		"privacy": privacyCmd,
	}
}

func erase(ctx context.Context, rdb redis.UniversalClient, env admin.Env, args []string, extra []Extra) error {
	var sub privacy.Subject
	secret := os.Getenv(config.EnvName("privacy-secret"))
	actor := "admin"
	if u, err := user.Current(); err == nil {
		actor = "admin:" + u.Username
	}
	for i := 0; i < len(args); i++ {
		need := func(n int) error {
			if i+n >= len(args) {
				return fmt.Errorf("%s needs %d value(s)", args[i], n)
			}
			return nil
		}
		switch args[i] {
		case "--email", "-email":
			if err := need(1); err != nil {
				return err
			}
			sub.Email, i = args[i+1], i+1
		case "--name", "-name":
			if err := need(2); err != nil {
				return err
			}
			sub.First, sub.Last, i = args[i+1], args[i+2], i+2
		case "--domain", "-domain":
			if err := need(1); err != nil {
				return err
			}
			sub.Domain, i = args[i+1], i+1
		case "--actor", "-actor":
			if err := need(1); err != nil {
				return err
			}
			actor, i = args[i+1], i+1
		case "--privacy-secret", "-privacy-secret":
			if err := need(1); err != nil {
				return err
			}
			secret, i = args[i+1], i+1
		default:
			return fmt.Errorf("erase: unknown argument %q\n%s", args[i], admin.EraseUsage)
		}
	}
	if err := sub.Valid(); err != nil {
		return err
	}
	h, err := privacy.NewHasher(secret)
	if err != nil {
		return err
	}
	cfg := config.Default()
	cfg.RedirectChecks = false
	// Diagnostics go to stderr; they name no one (the subject is logged
	// as its hash only).
	log := slog.New(slog.NewTextHandler(errWriter(env), nil))
	fams, err := buildFamilies(cfg, rdb, log, scope{declared: true}, extra) // their subjects only
	if err != nil {
		return err
	}
	byName := map[string]family.Family{}
	for _, b := range fams.bulk {
		byName[b.Family.Name()] = b.Family
	}
	er := &privacy.Eraser{Redis: rdb, Store: jobs.NewStore(rdb, billing.New(rdb, env.Now)), Families: byName,
		Suppress: privacy.NewSuppressions(rdb, h), Hasher: h, Audit: privacy.NewAudit(rdb, auditKeep()),
		Patterns: finder.NewRedisPatterns(rdb), Log: log}
	rep, err := er.Erase(ctx, sub, actor)
	if err != nil {
		return err
	}
	return json.NewEncoder(env.Stdout).Encode(rep)
}

// auditKeep is --privacy-audit-retention as the servers read it
// (BULKD_PRIVACY_AUDIT_RETENTION), or its default.
func auditKeep() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(config.EnvName("privacy-audit-retention"))); err == nil && d > 0 {
		return d
	}
	return config.Default().PrivacyAuditRetention
}

func errWriter(env admin.Env) io.Writer {
	if env.Stderr != nil {
		return env.Stderr
	}
	return io.Discard
}

func privacyCmd(ctx context.Context, rdb redis.UniversalClient, env admin.Env, args []string) error {
	if len(args) == 0 || args[0] != "audit" {
		return errors.New("usage: privacy audit [--limit N]")
	}
	limit := int64(1000)
	if len(args) == 3 && args[1] == "--limit" {
		n, err := strconv.ParseInt(args[2], 10, 64)
		if err != nil || n < 1 {
			return errors.New("--limit must be a positive number")
		}
		limit = n
	}
	es, err := privacy.NewAudit(rdb, 0).Entries(ctx, limit)
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
