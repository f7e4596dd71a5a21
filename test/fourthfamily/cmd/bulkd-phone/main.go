// Command bulkd-phone is `bulkd processor` with the phone lookup family
// registered (test/fourthfamily): what the BulkJob's pods run in the
// fourth family's envtest proof. For a family of bulkd itself, the real
// binary knows it from its one entry in internal/serve's buildFamilies.
// It takes the same arguments (processor --job ID --shard N --timeout D,
// or --retries) and exits with the same codes. Only PHONE_FAIL, a
// comma-separated list of numbers whose answer fails, is its own: a shard
// that keeps failing, for the failed-shard path.
//
// Tests only.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/processor"
	"github.com/bulkd/bulkd/internal/serve"
	"github.com/bulkd/bulkd/test/fourthfamily"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string) int {
	if len(args) == 0 || args[0] != "processor" {
		fmt.Fprintln(os.Stderr, "usage: bulkd-phone processor --job ID --shard N")
		return 2
	}
	cfg := config.Default()
	fs := flag.NewFlagSet("bulkd-phone processor", flag.ContinueOnError)
	cfg.Register(fs)
	jobID := fs.String("job", "", "job id")
	shardFlag := fs.String("shard", "", "shard (default: $JOB_COMPLETION_INDEX)")
	timeout := fs.Duration("timeout", time.Minute, "time limit of this run")
	retries := fs.Bool("retries", false, "answer due retries instead of a shard")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if *retries {
		return 0 // the phone family has no provisional answers
	}
	s := *shardFlag
	if s == "" {
		s = os.Getenv("JOB_COMPLETION_INDEX")
	}
	shard, err := strconv.Atoi(s)
	if err != nil || shard < 0 || *jobID == "" {
		fmt.Fprintln(os.Stderr, "--job and --shard are required")
		return 2
	}
	log := serve.NewLogger(os.Stderr, "text", "info").With("job", *jobID, "shard", shard)
	rdb, err := serve.NewRedis(ctx, cfg.RedisURL)
	if err != nil {
		log.Error("redis", "err", err)
		return processor.ExitCode(err)
	}
	defer rdb.Close()
	fail := strings.Split(os.Getenv("PHONE_FAIL"), ",")
	fam := &fourthfamily.Family{Fail: func(n string) bool { return slices.Contains(fail, n) }}
	proc, err := serve.NewProcessor(cfg, rdb, log, fourthfamily.Extra(fam))
	if err != nil {
		log.Error("processor", "err", err)
		return 2
	}
	proc.Announce = jobs.NewAnnouncer(proc.Store, jobs.DefaultAnnounceEvery, log)
	proc.Owner = processor.ShardOwner(*jobID, shard)
	if err := processor.RunShard(ctx, proc, *jobID, shard, *timeout, log); err != nil {
		log.Error("shard", "err", err)
		return processor.ExitCode(err)
	}
	return 0
}
