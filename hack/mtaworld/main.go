// Command mtaworld starts the real-MTA world (stock Postfix with postgrey
// and a DNS block list, and Exim, from Debian; internal/mtaworld,
// docs/mta-world.md), prints the settings bulkd needs to verify addresses
// against it, and runs until SIGINT or SIGTERM. Root only; run
// hack/ensure-mta.sh first (make deps does).
//
//	go run ./hack/mtaworld [--scale 1] [--noslow] [--dir /tmp/mtaworld] [--env-file var/mtaworld.env]
//	go run ./hack/mtaworld --cases    # start, print the addresses and their truth as JSON Lines, stop
//
// It prints, and writes to --env-file:
//
//	BULKD_DNS_SERVER=127.B.C.53:53
//	BULKD_SMTP_PORT=2525
//	BULKD_OUTBOUND_ALLOW_CIDRS=127.0.0.0/8
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/bulkd/bulkd/internal/mtaworld"
)

func main() {
	scale := flag.Int("scale", 1, "addresses per domain multiplier (1: 238 addresses)")
	noSlow := flag.Bool("noslow", false, "leave out the slow server")
	dir := flag.String("dir", "", "keep configuration and logs here (default: a temporary directory removed on exit)")
	envFile := flag.String("env-file", "", "also write the settings to this file")
	cases := flag.Bool("cases", false, "print the addresses and their truth as JSON Lines and exit")
	flag.Parse()
	if err := run(*scale, *noSlow, *dir, *envFile, *cases); err != nil {
		fmt.Fprintln(os.Stderr, "mtaworld:", err)
		os.Exit(1)
	}
}

func run(scale int, noSlow bool, dir, envFile string, cases bool) error {
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	w, err := mtaworld.Start(context.Background(), mtaworld.Options{Scale: scale, NoSlow: noSlow, Dir: dir, Seed: 25})
	if err != nil {
		return err
	}
	if cases {
		// Stopped before printing: a reader that closes the pipe early
		// (| head) must not leave the daemons running.
		all := w.Cases()
		if err := w.Close(); err != nil {
			return err
		}
		enc := json.NewEncoder(os.Stdout)
		for _, c := range all {
			if err := enc.Encode(c); err != nil {
				return err
			}
		}
		return nil
	}
	defer w.Close()
	env := fmt.Sprintf("BULKD_DNS_SERVER=%s\nBULKD_SMTP_PORT=%d\nBULKD_OUTBOUND_ALLOW_CIDRS=127.0.0.0/8\n", w.DNSAddr(), w.SMTPPort())
	fmt.Print(env)
	fmt.Fprint(os.Stderr, w.Summary())
	if envFile != "" {
		if err := os.WriteFile(envFile, []byte(env), 0o644); err != nil {
			return err
		}
		defer os.Remove(envFile)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return nil
}
