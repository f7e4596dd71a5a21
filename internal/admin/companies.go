package admin

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/company"
	"github.com/bulkd/bulkd/internal/company/normalize"
)

// CompaniesUsage documents `bulkd admin companies`.
const CompaniesUsage = `  companies import FILE|- [--format jsonl|pdl-ndjson|pdl-csv] [--network-hosts H]
                                                   stream companies into the store (idempotent); progress on
                                                   stderr, final counts as JSON on stdout
  companies generate [--count N] [--seed S] [--network-host H]
                                                   write N fictional companies as JSON Lines to stdout
  companies count                                  print the number of companies in the store
`

func companies(ctx context.Context, rdb redis.UniversalClient, env Env, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: companies import|generate|count")
	}
	switch args[0] {
	case "import":
		return companiesImport(ctx, rdb, env, args[1:])
	case "generate":
		fs := newFlags(env, "companies generate")
		count := fs.Int("count", 5000, "number of companies")
		seed := fs.Int64("seed", 1, "random seed (same seed, same output)")
		host := fs.String("network-host", normalize.DefaultHosts[0], "network host of the generated company URLs")
		if _, err := parse(fs, args[1:], 0); err != nil {
			return err
		}
		w := bufio.NewWriterSize(env.Stdout, 1<<20)
		if err := company.Generate(w, *count, *seed, *host); err != nil {
			return err
		}
		return w.Flush()
	case "count":
		n, err := company.NewStore(rdb, "bulkd:").Count(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintln(env.Stdout, n)
		return nil
	}
	return fmt.Errorf("unknown command companies %s", args[0])
}

func companiesImport(ctx context.Context, rdb redis.UniversalClient, env Env, args []string) error {
	fs := newFlags(env, "companies import")
	format := fs.String("format", string(company.FormatJSONL), "jsonl, pdl-ndjson or pdl-csv")
	hosts := fs.String("network-hosts", strings.Join(normalize.DefaultHosts, ","), "recognised network hosts")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	var r = env.Stdin
	if pos[0] != "-" {
		f, err := os.Open(pos[0])
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	norm := normalize.New(strings.Split(*hosts, ","))
	st := company.NewStore(rdb, "bulkd:")
	stats, err := company.Import(ctx, bufio.NewReaderSize(r, 1<<20), company.Format(*format), st, norm, func(s company.ImportStats) {
		rate := 0.0
		if s.Elapsed > 0 {
			rate = float64(s.Imported) / s.Elapsed.Seconds()
		}
		fmt.Fprintf(env.Stderr, "read %d, imported %d, skipped %d (%.0f/s)\n", s.Read, s.Imported, s.Skipped, rate)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "{\"read\":%d,\"imported\":%d,\"skipped\":%d,\"seconds\":%.3f}\n", stats.Read, stats.Imported, stats.Skipped, stats.Elapsed.Seconds())
	return nil
}
