// Command mailworld starts one of the project's ready-made mail worlds (an
// authoritative DNS server plus SMTP servers on loopback, see
// internal/mailworld), prints the three settings bulkd needs to verify
// addresses against it and runs until SIGINT or SIGTERM.
//
//	go run ./hack/mailworld --scenario demo|classes|bench [--env-file var/mailworld.env] [--rtt 50ms] [--seed 1]
//	go run ./hack/mailworld --scenario classes --cases   # the expected answers as JSON Lines
//
// It prints, and writes to --env-file (atomically, removed again on exit):
//
//	BULKD_DNS_SERVER=127.0.0.1:PORT
//	BULKD_SMTP_PORT=PORT
//	BULKD_OUTBOUND_ALLOW_CIDRS=127.0.0.0/8   (the world is on loopback, which bulkd refuses by default)
//	MAILWORLD_DOMAINS=acme.test,catchall.test,...   (env file only)
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/bulkd/bulkd/internal/mailworld"
)

func main() {
	scenario := flag.String("scenario", "demo", "demo, classes, bench or shared (30 tenants' MX names on 3 servers of one provider, mailworld.SharedServers)")
	envFile := flag.String("env-file", "", "also write the settings to this file")
	rtt := flag.Duration("rtt", -1, "simulated round trip per SMTP reply (default: the scenario's)")
	seed := flag.Int64("seed", 1, "seed of the bench scenario")
	cases := flag.Bool("cases", false, "print the scenario's cases (expected answers) as JSON Lines and exit")
	flag.Parse()
	if err := run(*scenario, *envFile, *rtt, *seed, *cases); err != nil {
		fmt.Fprintln(os.Stderr, "mailworld:", err)
		os.Exit(1)
	}
}

func run(scenario, envFile string, rtt time.Duration, seed int64, printCases bool) error {
	var spec mailworld.Spec
	switch scenario {
	case "demo":
		spec = mailworld.Demo()
	case "classes":
		spec = mailworld.Classes(mailworld.ClassOptions{})
	case "bench":
		spec = mailworld.Bench(mailworld.BenchOptions{Seed: seed})
	case "shared":
		spec = mailworld.SharedServers(mailworld.SharedServersOptions{Seed: seed, MaxConnsPerServer: 3})
	default:
		return fmt.Errorf("unknown scenario %q (demo, classes, bench or shared)", scenario)
	}
	if rtt >= 0 {
		spec.RTT = rtt
	}
	if printCases {
		enc := json.NewEncoder(os.Stdout)
		for _, c := range spec.Cases {
			if err := enc.Encode(c); err != nil {
				return err
			}
		}
		return nil
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	w, err := mailworld.Start(ctx, spec)
	if err != nil {
		return err
	}
	defer w.Close()
	settings := fmt.Sprintf("BULKD_DNS_SERVER=%s\nBULKD_SMTP_PORT=%d\nBULKD_OUTBOUND_ALLOW_CIDRS=%s\n", w.DNSAddr(), w.SMTPPort(), mailworld.AllowCIDRs)
	fmt.Print(settings)
	if envFile != "" {
		doms := make([]string, 0, len(spec.Domains))
		for _, d := range spec.Domains {
			doms = append(doms, d.Name)
		}
		if err := writeAtomic(envFile, settings+"MAILWORLD_DOMAINS="+strings.Join(doms, ",")+"\n"); err != nil {
			return err
		}
		defer os.Remove(envFile)
	}
	fmt.Fprintf(os.Stderr, "mailworld: scenario %s running (%d hosts, %d domains, %d cases, RTT %v); Ctrl-C stops it\n",
		scenario, len(spec.Hosts), len(spec.Domains), len(spec.Cases), spec.RTT)
	<-ctx.Done()
	fmt.Fprintln(os.Stderr, "mailworld: stopping")
	return w.Close()
}

// writeAtomic writes through a temporary file and a rename, so a script
// waiting for the file never reads half of it.
func writeAtomic(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
