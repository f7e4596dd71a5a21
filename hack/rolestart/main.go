// Command rolestart measures what each bulkd role builds at start (issue
// 29, item 3; docs/benchmarks.md, "Start time and memory per role"): it
// connects to Redis and builds one role's parts as cmd/bulkd does, then
// prints the time that took and the process's resident memory. One role
// per process, so the numbers are the role's own:
//
//	go build -o /tmp/rolestart ./hack/rolestart
//	/tmp/rolestart --redis-url redis://127.0.0.1:PORT --role processor --family company_enrichment
//
// Roles: serve, apiserver (serve's parts with a Kubernetes executor in
// place of the in-process workers; no cluster is needed), controller, and
// processor (--family names the family of the job its pod answers).
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/serve"
)

func main() {
	start := time.Now()
	role := flag.String("role", "serve", "serve, apiserver, controller or processor")
	fam := flag.String("family", "company_enrichment", "processor: the family of the job")
	redisURL := flag.String("redis-url", "redis://127.0.0.1:6379", "Redis")
	settle := flag.Duration("settle", time.Second, "wait after the build before reading memory (background start-up work)")
	showLogs := flag.Bool("logs", false, "print the role's log lines")
	flag.Parse()
	if err := run(*role, *fam, *redisURL, *settle, start, *showLogs); err != nil {
		fmt.Fprintln(os.Stderr, "rolestart:", err)
		os.Exit(1)
	}
}

func run(role, fam, redisURL string, settle time.Duration, start time.Time, showLogs bool) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := config.Default()
	cfg.RedisURL = redisURL
	var logs bytes.Buffer
	log := serve.NewLogger(&logs, "text", "info")
	rdb, err := serve.NewRedis(ctx, cfg.RedisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	switch role {
	case "serve":
		_, err = serve.Build(cfg, rdb, log)
	case "apiserver":
		_, err = serve.BuildWith(cfg, rdb, log, serve.Options{Executor: noExecutor{}, Mode: "kubernetes"})
	case "controller":
		_, _, err = serve.NewController(cfg, rdb, log, nil)
	case "processor":
		_, err = buildProcessor(ctx, cfg, rdb, log, fam)
	default:
		err = fmt.Errorf("unknown --role %q", role)
	}
	if err != nil {
		return err
	}
	built := time.Since(start)
	time.Sleep(settle)
	rss, hwm := memory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	warns := strings.Count(logs.String(), "level=WARN")
	if showLogs {
		os.Stderr.Write(logs.Bytes())
	}
	fmt.Printf("role=%s family=%s start_ms=%.1f rss_mib=%.1f peak_rss_mib=%.1f heap_mib=%.1f goroutines=%d warnings=%d\n",
		role, fam, float64(built.Microseconds())/1000, rss, hwm, float64(ms.HeapAlloc)/(1<<20), runtime.NumGoroutine(), warns)
	return nil
}

// memory is VmRSS and VmHWM of this process, in MiB.
func memory() (rss, hwm float64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		var kb float64
		if n, _ := fmt.Sscanf(line, "VmRSS: %f kB", &kb); n == 1 {
			rss = kb / 1024
		}
		if n, _ := fmt.Sscanf(line, "VmHWM: %f kB", &kb); n == 1 {
			hwm = kb / 1024
		}
	}
	return rss, hwm
}

// noExecutor stands in for the Kubernetes executor (apiserver role).
type noExecutor struct{}

func (noExecutor) Enqueue(context.Context, *jobs.Job) error { return nil }
func (noExecutor) Cancel(context.Context, string) error     { return nil }
