package soak

import (
	"flag"
	"os"
	"strings"
	"testing"
	"time"
)

var (
	full     = flag.Bool("soak", false, "run the full soak (make soak: 200 keys, 5 minutes) instead of the short one")
	bin      = flag.String("soak.bin", "", "bulkd binary to run (default: build ./cmd/bulkd)")
	duration = flag.Duration("soak.duration", 0, "length of the load phase (default: 5m full, 24s short); the faults keep their places in it")
	keys     = flag.Int("soak.keys", 0, "API keys (default: 200 full, 20 short)")
	reportTo = flag.String("soak.report", "", "write the report (markdown) to this file")
	logDir   = flag.String("soak.dir", "", "keep the replicas' logs here (default: the test's temporary directory)")
)

// TestSoak is the load and fault suite (issue 11): two `bulkd serve`
// replicas sharing one redis-server with its append-only file on, every API
// key sending at its rate limit a mix of bulk submissions of the three
// families, status polls, results pages and balance reads, while a replica
// is killed (-9) and restarted, the replica holding the most shard leases
// is killed and kept down until the other has taken its shards over, and
// Redis is stopped (SIGTERM) and started again on the same data. Then every
// accepted job must be finished with every row answered once, every job
// charged exactly what its submission said, and every account's balance
// equal to its ledger; no 5xx may be seen, and connection errors only to a
// replica the suite killed.
//
// By default it runs the short version (about 25 s of load, 20 keys; part
// of `make test`); `make soak` runs the full one with -soak.
func TestSoak(t *testing.T) {
	cfg := ShortConfig()
	if *full {
		cfg = FullConfig()
	}
	if *duration > 0 {
		// The faults keep their places in the run.
		scale := func(d time.Duration) time.Duration {
			return time.Duration(float64(d) * float64(*duration) / float64(cfg.Duration))
		}
		cfg.ReplicaKillAt, cfg.ProcessorKillAt, cfg.RedisRestartAt = scale(cfg.ReplicaKillAt), scale(cfg.ProcessorKillAt), scale(cfg.RedisRestartAt)
		cfg.Duration = *duration
	}
	if *keys > 0 {
		cfg.Keys = *keys
		cfg.Accounts = max(1, min(cfg.Accounts, *keys))
		cfg.UnlimitedAccounts = min(cfg.UnlimitedAccounts, cfg.Accounts-1)
	}
	cfg.Bin = *bin
	cfg.Dir = *logDir
	if cfg.Dir != "" {
		if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Logf = t.Logf
	start := time.Now()
	rep, err := Run(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	md := rep.Markdown()
	t.Logf("soak report (%s):\n%s", time.Since(start).Round(time.Second), md)
	if *reportTo != "" {
		if err := os.WriteFile(*reportTo, []byte(md), 0o644); err != nil {
			t.Error(err)
		}
	}
	if f := rep.Failures(); len(f) > 0 {
		t.Errorf("soak failures:\n- %s", strings.Join(f, "\n- "))
	}
}
