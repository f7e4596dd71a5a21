// Command bulkd is the whole service in one binary: `serve` runs the API
// with in-process job processing (standalone mode), `admin` manages
// accounts, keys, credits and data, and `version` prints the build.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/bulkd/bulkd/internal/admin"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/serve"
)

// Set with -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  = "unknown"
)

const usage = `usage: bulkd COMMAND [flags]

commands:
  serve     run the HTTP API with in-process job processing (standalone mode)
  admin     manage accounts, keys, credits, plans and the ledger (bulkd admin help)
  version   print the version

Run "bulkd COMMAND -h" for a command's flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "serve":
		err = runServe(ctx, os.Args[2:])
	case "admin":
		err = admin.Main(ctx, os.Args[2:], admin.Env{Stdout: os.Stdout, Stderr: os.Stderr})
	case "version", "--version", "-version":
		fmt.Printf("bulkd %s (commit %s)\n", version, commit)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "bulkd: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(os.Stderr, "bulkd %s: %v\n", os.Args[1], err)
		}
		os.Exit(1)
	}
}

func runServe(ctx context.Context, args []string) error {
	cfg := config.Default()
	fs := flag.NewFlagSet("bulkd serve", flag.ContinueOnError)
	cfg.Register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := serve.NewLogger(os.Stderr, cfg.LogFormat, cfg.LogLevel)
	return serve.Run(ctx, cfg, log, os.Stdout, nil)
}
