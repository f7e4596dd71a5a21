// Command bulkd is the whole service in one binary: `serve` runs the API
// with in-process job processing (standalone mode); `apiserver`,
// `controller` and `processor` are the three parts of Kubernetes mode;
// `admin` manages accounts, keys, credits and data, and `version` prints
// the build.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/bulkd/bulkd/controllers"
	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/admin"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/kube"
	"github.com/bulkd/bulkd/internal/kubeapi"
	"github.com/bulkd/bulkd/internal/memlimit"
	"github.com/bulkd/bulkd/internal/processor"
	"github.com/bulkd/bulkd/internal/serve"
)

// Set with -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  = "unknown"
)

const usage = `usage: bulkd COMMAND [flags]

commands:
  serve       run the HTTP API with in-process job processing (standalone mode)
  apiserver   run the HTTP API in Kubernetes mode: each accepted job becomes a BulkJob
  controller  run the Kubernetes controller that runs BulkJobs as Indexed Jobs
  processor   process one shard of a job (what the controller's pods run)
  admin       manage accounts, keys, credits, plans and the ledger (bulkd admin help)
  version     print the version

Run "bulkd COMMAND -h" for a command's flags.
`

// exitError carries a specific exit status.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

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
	case "apiserver":
		err = runAPIServer(ctx, os.Args[2:])
	case "controller":
		err = runController(ctx, os.Args[2:])
	case "processor":
		err = runProcessor(ctx, os.Args[2:])
	case "admin":
		err = admin.Main(ctx, os.Args[2:], admin.Env{Stdout: os.Stdout, Stderr: os.Stderr, Extra: serve.AdminCommands()})
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
		stop()
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(1)
	}
}

func runServe(ctx context.Context, args []string) error {
	cfg := config.Default()
	if err := parseFlags("bulkd serve", args, cfg.Register, cfg.Validate); err != nil {
		return err
	}
	log := newLogger(cfg)
	return serve.Run(ctx, cfg, log, os.Stdout, nil)
}

// runAPIServer is the HTTP API of Kubernetes mode: `serve` without
// in-process workers, every accepted job handed to the controller as a
// BulkJob.
func runAPIServer(ctx context.Context, args []string) error {
	cfg := config.Default()
	kc := config.DefaultKube()
	register := func(fs *flag.FlagSet) { cfg.Register(fs); kc.RegisterAPIServer(fs) }
	if err := parseFlags("bulkd apiserver", args, register, cfg.Validate, kc.Validate); err != nil {
		return err
	}
	log := newLogger(cfg)
	ctrl.SetLogger(logr.FromSlogHandler(log.Handler()))
	rc, err := kube.RESTConfig(kc.Kubeconfig)
	if err != nil {
		return err
	}
	return kubeapi.Run(ctx, rc, cfg, kc, log, os.Stdout, nil)
}

// runController is the operator: it runs each BulkJob's shards as an
// Indexed Job of processor pods and folds progress into BulkJob status.
func runController(ctx context.Context, args []string) error {
	cfg := config.Default()
	kc := config.DefaultKube()
	register := func(fs *flag.FlagSet) { cfg.RegisterStore(fs); kc.RegisterController(fs) }
	if err := parseFlags("bulkd controller", args, register, cfg.Validate, kc.Validate); err != nil {
		return err
	}
	resources, err := controllers.ParseResources(kc.Resources)
	if err != nil {
		return fmt.Errorf("--processor-resources: %w", err)
	}
	// Checked before anything connects: a bad profile is a flag error.
	if _, err := controllers.ParseFamilyProfiles(kc.FamilyProfiles); err != nil {
		return fmt.Errorf("--family-profiles: %w", err)
	}
	log := newLogger(cfg)
	logger := logr.FromSlogHandler(log.Handler())
	ctrl.SetLogger(logger)
	rdb, err := serve.NewRedis(ctx, cfg.RedisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	// Webhook events are swept and delivered here too (and by every API
	// replica): claims are leased, so any number of deliverers share them.
	proc, wh, err := serve.NewController(cfg, rdb, log, ctrlmetrics.Registry)
	if err != nil {
		return err
	}
	rc, err := kube.RESTConfig(kc.Kubeconfig)
	if err != nil {
		return err
	}
	mgr, err := controllers.NewManager(rc, controllers.ManagerOptions{
		Namespace:   kc.Namespace,
		MetricsAddr: kc.MetricsAddr,
		HealthAddr:  kc.HealthAddr,
		PprofAddr:   kc.PprofAddr,
		LeaderElect: kc.LeaderElect,
		Concurrency: kc.Concurrency,
		Reconciler:  controllers.OptionsFrom(kc, cfg.Retention, resources),
		Data:        proc.Store,
		Shards:      proc,
		Plans:       accounts.NewStore(rdb, nil),
		ReadyCheck:  func(r *http.Request) error { return rdb.Ping(r.Context()).Err() },
		Logger:      logger,
	})
	if err != nil {
		return err
	}
	go wh.Run(ctx)
	log.Info("bulkd controller starting", "namespace", kc.Namespace, "image", kc.Image, "leader_elect", kc.LeaderElect)
	return mgr.Start(ctx)
}

// runProcessor answers one shard and exits: 0 when it is done, 3 when the
// job's data is gone (retrying cannot help), 1 otherwise (the Job retries
// the index).
func runProcessor(ctx context.Context, args []string) error {
	cfg := config.Default()
	fs := flag.NewFlagSet("bulkd processor", flag.ContinueOnError)
	cfg.Register(fs)
	jobID := fs.String("job", "", "job id (the BulkJob's spec.jobID)")
	shardFlag := fs.String("shard", "", "shard to process (default: $JOB_COMPLETION_INDEX)")
	timeout := fs.Duration("timeout", controllers.DefaultOptions().ProcessorTimeout, "time limit of this run")
	retries := fs.Bool("retries", false, "answer the job's provisional answers whose retry is due, instead of a shard")
	if err := fs.Parse(args); err != nil {
		return &exitError{2, err}
	}
	if *retries {
		return runRetries(ctx, cfg, *jobID, *timeout)
	}
	s := *shardFlag
	if s == "" {
		s = os.Getenv("JOB_COMPLETION_INDEX")
	}
	shard, err := strconv.Atoi(s)
	if err != nil || shard < 0 || *jobID == "" || *timeout <= 0 {
		return &exitError{2, fmt.Errorf("--job, a --shard of at least 0 and a positive --timeout are required (shard %q)", s)}
	}
	if err := cfg.Validate(); err != nil {
		return &exitError{2, err}
	}
	log := newLogger(cfg).With("job", *jobID, "shard", shard)
	rdb, proc, err := openProcessor(ctx, cfg, *jobID, log)
	if err != nil {
		return &exitError{processor.ExitCode(err), err}
	}
	defer rdb.Close()
	defer proc.Close() // before rdb.Close: parked SMTP sessions give their slots back
	proc.Owner = processor.ShardOwner(*jobID, shard)
	if err := processor.RunShard(ctx, proc, *jobID, shard, *timeout, log); err != nil {
		return &exitError{processor.ExitCode(err), err}
	}
	return nil
}

// runRetries answers a job's due retries once and exits (a retry Job's
// pod): exit codes as for a shard.
func runRetries(ctx context.Context, cfg config.Config, jobID string, timeout time.Duration) error {
	if jobID == "" || timeout <= 0 {
		return &exitError{2, fmt.Errorf("--job and a positive --timeout are required")}
	}
	if err := cfg.Validate(); err != nil {
		return &exitError{2, err}
	}
	log := newLogger(cfg).With("job", jobID, "retries", true)
	rdb, proc, err := openProcessor(ctx, cfg, jobID, log)
	if err != nil {
		return &exitError{processor.ExitCode(err), err}
	}
	defer rdb.Close()
	defer proc.Close() // before rdb.Close: parked SMTP sessions give their slots back
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	next, err := proc.RetryDue(ctx, jobID)
	if err != nil {
		return &exitError{processor.ExitCode(err), err}
	}
	log.Info("due retries answered", "next_retry_at", next)
	return nil
}

// openProcessor connects to Redis and builds the shard processor of job
// jobID on it, with its family alone; the caller closes the client. A job
// that is gone is jobs.ErrJobNotFound (exit 3).
func openProcessor(ctx context.Context, cfg config.Config, jobID string, log *slog.Logger) (redis.UniversalClient, *jobs.Processor, error) {
	rdb, err := serve.NewRedis(ctx, cfg.RedisURL)
	if err != nil {
		return nil, nil, err
	}
	proc, err := serve.NewJobProcessor(ctx, cfg, rdb, log, jobID)
	if err != nil {
		rdb.Close()
		return nil, nil, err
	}
	// Processor pods announce their progress to the controller, which
	// has no other way to hear of it. (The controller builds its own
	// processor, serve.NewController, which never announces.)
	proc.Announce = jobs.NewAnnouncer(proc.Store, jobs.DefaultAnnounceEvery, log)
	return rdb, proc, nil
}

// parseFlags registers a command's flags, parses args and runs the
// validators in order.
func parseFlags(name string, args []string, register func(*flag.FlagSet), validate ...func() error) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, v := range validate {
		if err := v(); err != nil {
			return err
		}
	}
	return nil
}

// newLogger builds the process logger and, as the first thing a long-running
// command does, fits the Go heap under the container's memory limit.
func newLogger(cfg config.Config) *slog.Logger {
	log := serve.NewLogger(os.Stderr, cfg.LogFormat, cfg.LogLevel)
	if msg := memlimit.Apply(); msg != "" {
		log.Info(msg)
	}
	return log
}
