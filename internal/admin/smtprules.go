package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/verify/rules"
)

// SMTPRulesUsage documents `bulkd admin smtp-rules`.
const SMTPRulesUsage = `  smtp-rules list                                  print the verifier's rules in effect (defaults and yours) as JSON
  smtp-rules set SUFFIX KEY=VALUE...               add or replace the rule of an MX name suffix (provider, sessions,
                                                   provider_sessions, rcpts, timeout, probe); every process applies it
                                                   within 10 s
  smtp-rules unset SUFFIX                          remove your rule of SUFFIX (its default, if any, applies again)
  smtp-rules load FILE|-                           replace all your rules with FILE's (one rule a line); print the count
  smtp-rules reset                                 remove all your rules: the defaults alone apply
`

func smtpRulesCmd(ctx context.Context, rdb redis.UniversalClient, env Env, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: smtp-rules list|set|unset|load|reset")
	}
	switch args[0] {
	case "list":
		if len(args) != 1 {
			return errors.New("usage: smtp-rules list")
		}
		t, err := rules.Load(ctx, rdb)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(t.Entries())
	case "set":
		if len(args) < 3 {
			return errors.New("usage: smtp-rules set SUFFIX KEY=VALUE...")
		}
		r, err := rules.ParseRule(args[1], args[2:])
		if err != nil {
			return err
		}
		if err := rules.Set(ctx, rdb, r); err != nil {
			return err
		}
		fmt.Fprintln(env.Stdout, r.String())
		return nil
	case "unset":
		if len(args) != 2 {
			return errors.New("usage: smtp-rules unset SUFFIX")
		}
		ok, err := rules.Unset(ctx, rdb, args[1])
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("no rule of yours for %s", args[1])
		}
		return nil
	case "load":
		if len(args) != 2 {
			return errors.New("usage: smtp-rules load FILE|-")
		}
		r := env.Stdin
		if args[1] != "-" {
			f, err := os.Open(args[1])
			if err != nil {
				return err
			}
			defer f.Close()
			r = f
		}
		n, err := rules.Replace(ctx, rdb, r)
		if err != nil {
			return err
		}
		fmt.Fprintln(env.Stdout, n)
		return nil
	case "reset":
		if len(args) != 1 {
			return errors.New("usage: smtp-rules reset")
		}
		return rules.Reset(ctx, rdb)
	}
	return fmt.Errorf("unknown command smtp-rules %s", args[0])
}
