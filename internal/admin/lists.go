package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/verify/lists"
)

// ListsUsage documents `bulkd admin lists`.
const ListsUsage = `  lists sync --list disposable|role|free [--mode replace|add] [--dry-run] FILE|-
                                                   store FILE (one entry a line, # comments) as the operator's
                                                   list of that kind: it replaces the built-in list (replace) or
                                                   is added to it (add); every process reloads it within seconds.
                                                   Print what changed as JSON
  lists clear --list disposable|role|free          drop the operator's list: the built-in one is back in effect
  lists load --kind KIND FILE|-                    sync --mode replace; print the count
  lists show                                       print each list's count, source and mode as JSON
`

// ListView is one line of `lists show`.
type ListView struct {
	Kind     string `json:"kind"`
	Count    int    `json:"count"`  // entries in effect
	Source   string `json:"source"` // "embedded" or "redis: <file>"
	Embedded int    `json:"embedded_count"`
	LoadedAt string `json:"loaded_at,omitempty"`
	Mode     string `json:"mode,omitempty"` // the operator list's mode: replace or add
	Version  int64  `json:"version"`        // the stored lists' version (0: none ever stored)
}

func listsCmd(ctx context.Context, rdb redis.UniversalClient, env Env, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: lists sync|clear|load|show")
	}
	switch args[0] {
	case "sync":
		fs := newFlags(env, "lists sync")
		kind := fs.String("list", "", "disposable, role or free")
		mode := fs.String("mode", lists.Replace, "replace: the file replaces the built-in list; add: it is added to it")
		dry := fs.Bool("dry-run", false, "validate and print what would change, store nothing")
		pos, err := parse(fs, args[1:], 1)
		if err != nil {
			return err
		}
		if !lists.ValidKind(*kind) {
			return fmt.Errorf("--list must be disposable, role or free, not %q", *kind)
		}
		r, source, closeFn, err := openList(env, pos[0])
		if err != nil {
			return err
		}
		defer closeFn()
		res, err := lists.Sync(ctx, rdb, r, lists.SyncOptions{Kind: *kind, Mode: *mode, Source: source, Now: env.Now(), DryRun: *dry})
		if err != nil {
			return err
		}
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	case "clear":
		fs := newFlags(env, "lists clear")
		kind := fs.String("list", "", "disposable, role or free")
		if _, err := parse(fs, args[1:], 0); err != nil {
			return err
		}
		v, err := lists.Clear(ctx, rdb, *kind)
		if err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "{\"kind\":%q,\"version\":%d}\n", *kind, v)
		return nil
	case "load":
		fs := newFlags(env, "lists load")
		kind := fs.String("kind", "", "disposable, role or free")
		pos, err := parse(fs, args[1:], 1)
		if err != nil {
			return err
		}
		if !lists.ValidKind(*kind) {
			return fmt.Errorf("--kind must be disposable, role or free, not %q", *kind)
		}
		r, source, closeFn, err := openList(env, pos[0])
		if err != nil {
			return err
		}
		defer closeFn()
		n, err := lists.Save(ctx, rdb, *kind, source, r, env.Now())
		if err != nil {
			return err
		}
		fmt.Fprintln(env.Stdout, n)
		return nil
	case "show":
		if _, err := parse(newFlags(env, "lists show"), args[1:], 0); err != nil {
			return err
		}
		eff, err := lists.LoadFromRedis(ctx, rdb)
		if err != nil {
			return err
		}
		stored, err := lists.StoredInfo(ctx, rdb)
		if err != nil {
			return err
		}
		def := lists.Default().Infos()
		var out []ListView
		for i, in := range eff.Infos() {
			v := ListView{Kind: in.Kind, Count: in.Count, Source: in.Source, Embedded: def[i].Count, Version: eff.Version()}
			if in.Source != "embedded" {
				v.Mode = in.Mode
			}
			if s, ok := stored[in.Kind]; ok {
				v.LoadedAt = s.LoadedAt.Format("2006-01-02T15:04:05Z07:00")
			}
			out = append(out, v)
		}
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	return fmt.Errorf("unknown command lists %s", args[0])
}

// openList opens a list file, or stdin for "-".
func openList(env Env, name string) (io.Reader, string, func(), error) {
	if name == "-" {
		return env.Stdin, "stdin", func() {}, nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, "", nil, err
	}
	return f, filepath.Base(name), func() { _ = f.Close() }, nil
}
