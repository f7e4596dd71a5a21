package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/verify/lists"
)

// ListsUsage documents `bulkd admin lists`.
const ListsUsage = `  lists load --kind disposable|role|free FILE|-  replace a verifier list (one entry a line, # comments)
                                                   for every process (read at its next start); print the count
  lists show                                       print each list's count and source as JSON
`

// ListView is one line of `lists show`.
type ListView struct {
	Kind     string `json:"kind"`
	Count    int    `json:"count"`  // entries in effect
	Source   string `json:"source"` // "embedded" or "redis: <file>"
	Embedded int    `json:"embedded_count"`
	LoadedAt string `json:"loaded_at,omitempty"`
}

func listsCmd(ctx context.Context, rdb redis.UniversalClient, env Env, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: lists load|show")
	}
	switch args[0] {
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
		r, source := env.Stdin, "stdin"
		if pos[0] != "-" {
			f, err := os.Open(pos[0])
			if err != nil {
				return err
			}
			defer f.Close()
			r, source = f, filepath.Base(pos[0])
		}
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
			v := ListView{Kind: in.Kind, Count: in.Count, Source: in.Source, Embedded: def[i].Count}
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
