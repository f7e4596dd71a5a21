// Command bulkctl is the command-line client of bulkd's bulk API
// (internal/bulkctl; docs/bulkctl.md).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/bulkd/bulkd/internal/bulkctl"
)

// Set with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := bulkctl.Main(ctx, os.Args[1:], bulkctl.Env{
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv,
		Terminal: isTerminal(os.Stderr), Version: version,
	})
	stop()
	os.Exit(code)
}

// isTerminal: f is a character device (a terminal, not a file or a pipe).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
