package admin

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/dashboard/users"
)

// UserUsage documents the dashboard user commands.
const UserUsage = `  user create ACCOUNT --email E [--password-stdin] [--base-url URL]
                                                   make a dashboard user; print its one-time sign-in link
                                                   (valid 24 h), or with --password-stdin set the password
                                                   read from stdin and print the user id
  user link EMAIL [--base-url URL]                 print a new one-time sign-in link
  user password EMAIL --password-stdin             set the password read from stdin; the user's sessions end
  user revoke-sessions EMAIL                       sign the user out everywhere; print how many sessions ended
  user list ACCOUNT                                print the account's dashboard users (id and email), one a line
  user role EMAIL owner|member                     set the user's role: only an owner changes the account's
                                                   settings in the dashboard (its retention); the first user
                                                   of an account is its owner
`

func userCmd(ctx context.Context, rdb redis.UniversalClient, env Env, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: user create|link|password|revoke-sessions|list|role ...")
	}
	us := users.New(rdb, env.Now, users.Options{})
	st := accounts.NewStore(rdb, env.Now)
	fs := newFlags(env, "user "+args[0])
	email := fs.String("email", "", "the user's email (create)")
	pwStdin := fs.Bool("password-stdin", false, "read the password from the first line of stdin")
	baseURL := fs.String("base-url", "", "the dashboard's public address, e.g. https://bulkd.example.com (the link is printed as a path without it)")
	link := func(id string) error {
		t, err := us.NewLink(ctx, id)
		if err != nil {
			return err
		}
		fmt.Fprintln(env.Stdout, users.LinkURL(*baseURL, t))
		return nil
	}
	switch args[0] {
	case "create":
		pos, err := parse(fs, args[1:], 1)
		if err != nil {
			return err
		}
		if _, err := st.Account(ctx, pos[0]); err != nil {
			return fmt.Errorf("account %s: %w", pos[0], err)
		}
		if *email == "" {
			return errors.New("--email is required")
		}
		pw := ""
		if *pwStdin {
			if pw, err = readPassword(env.Stdin); err != nil {
				return err
			}
		}
		u, err := us.Create(ctx, pos[0], *email, pw)
		if err != nil {
			return err
		}
		if *pwStdin {
			fmt.Fprintln(env.Stdout, u.ID)
			return nil
		}
		return link(u.ID)
	case "role":
		return userRole(ctx, us, env, fs, args[1:])
	case "link", "password", "revoke-sessions":
		pos, err := parse(fs, args[1:], 1)
		if err != nil {
			return err
		}
		u, _, err := us.ByEmail(ctx, pos[0])
		if err != nil {
			return fmt.Errorf("user %s: %w", pos[0], err)
		}
		switch args[0] {
		case "link":
			return link(u.ID)
		case "password":
			if !*pwStdin {
				return errors.New("--password-stdin is required")
			}
			pw, err := readPassword(env.Stdin)
			if err != nil {
				return err
			}
			// Setting a password ends every session the user has.
			if _, err := us.SetPassword(ctx, u.ID, pw); err != nil {
				return err
			}
			fmt.Fprintln(env.Stdout, u.ID)
			return nil
		default:
			n, err := us.RevokeSessions(ctx, u.ID)
			if err != nil {
				return err
			}
			fmt.Fprintln(env.Stdout, n)
			return nil
		}
	case "list":
		return userList(ctx, us, env, fs, args[1:])
	}
	return fmt.Errorf("unknown command %q; see bulkd admin help", "user "+args[0])
}

// userRole is `user role EMAIL owner|member`.
func userRole(ctx context.Context, us *users.Store, env Env, fs *flag.FlagSet, args []string) error {
	pos, err := parse(fs, args, 2)
	if err != nil {
		return err
	}
	u, _, err := us.ByEmail(ctx, pos[0])
	if err != nil {
		return fmt.Errorf("user %s: %w", pos[0], err)
	}
	if err := us.SetRole(ctx, u.ID, pos[1]); err != nil {
		return err
	}
	fmt.Fprintln(env.Stdout, u.ID, pos[1])
	return nil
}

// userList is `user list ACCOUNT`.
func userList(ctx context.Context, us *users.Store, env Env, fs *flag.FlagSet, args []string) error {
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	us2, err := us.AccountUsers(ctx, pos[0])
	if err != nil {
		return err
	}
	for _, u := range us2 {
		fmt.Fprintf(env.Stdout, "%s %s %s\n", u.ID, u.Email, u.Role)
	}
	return nil
}

// readPassword reads the first line of r (without its line ending).
func readPassword(r io.Reader) (string, error) {
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read password: %w", err)
	}
	pw := strings.TrimRight(line, "\r\n")
	if pw == "" {
		return "", errors.New("no password on stdin")
	}
	return pw, nil
}
