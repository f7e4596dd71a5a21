package admin

import (
	"context"
	"flag"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/webhook"
)

// WebhookUsage is the usage of `bulkd admin webhook-secret`.
const WebhookUsage = `  webhook-secret ACCOUNT [--rotate]               print the account's webhook signing secret (made on first use);
                                                   --rotate makes a new one, the old one signs too for 24 h
`

// webhookSecret prints an account's webhook signing secret, or rotates it.
func webhookSecret(ctx context.Context, rdb redis.UniversalClient, env Env, args []string) error {
	fs := newFlags(env, "webhook-secret")
	rotate := fs.Bool("rotate", false, "make a new secret; the previous one stays valid (and signs too) for 24 h")
	pos, err := parse(fs, args, 1)
	if err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return fmt.Errorf("usage: webhook-secret ACCOUNT [--rotate]: %w", err)
	}
	if _, err := accounts.NewStore(rdb, env.Now).Account(ctx, pos[0]); err != nil {
		return fmt.Errorf("account %s: %w", pos[0], err)
	}
	s := webhook.NewSecrets(rdb)
	if env.Now != nil {
		s.Now = env.Now
	}
	var sec string
	if *rotate {
		sec, err = s.Rotate(ctx, pos[0])
	} else {
		sec, err = s.Current(ctx, pos[0])
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(env.Stdout, sec)
	return nil
}
