// Command loadgen measures bulkd under load on this machine: it starts a
// private redis-server and the real bulkd binary, creates accounts and keys,
// drives concurrent clients for a fixed time and prints throughput and
// latency percentiles. Every request goes to loopback; every loop is bounded
// by count or time.
//
//	go run ./hack/loadgen credits --bin bin/bulkd [--clients 50] [--keys 50] [--duration 10s]
//	go run ./hack/loadgen lookup --bin bin/bulkd (lookup.go)
//	go run ./hack/loadgen spam --bin bin/bulkd (spam.go)
//	go run ./hack/loadgen admission --bin bin/bulkd (admission.go)
//	go run ./hack/loadgen stalled --bin bin/bulkd (stalled.go)
//	go run ./hack/loadgen fair --bin bin/bulkd (fair.go)
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/testredis"
)

func main() {
	if len(os.Args) >= 2 && os.Args[1] == "verify" {
		if err := verifyMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) >= 2 && os.Args[1] == "lookup" {
		if err := lookupMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) >= 2 && os.Args[1] == "admission" {
		if err := admissionMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) >= 2 && os.Args[1] == "stalled" {
		if err := stalledMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) >= 2 && os.Args[1] == "spam" {
		if err := spamMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) >= 2 && os.Args[1] == "fair" {
		if err := fairMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) >= 2 && os.Args[1] == "company" {
		if err := companyMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) < 2 || os.Args[1] != "credits" {
		fmt.Fprintln(os.Stderr, "usage: loadgen credits|company|verify|lookup|admission|stalled|spam|fair [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("credits", flag.ExitOnError)
	bin := fs.String("bin", "bin/bulkd", "bulkd binary")
	clients := fs.Int("clients", 50, "concurrent clients")
	nkeys := fs.Int("keys", 50, "API keys (clients are spread across them)")
	duration := fs.Duration("duration", 10*time.Second, "measured time")
	warmup := fs.Duration("warmup", 2*time.Second, "unmeasured warm-up")
	rateLimit := fs.Int("rate-limit", 1_000_000, "bulkd --rate-limit; high so the limiter is exercised but does not refuse")
	_ = fs.Parse(os.Args[2:])
	if err := credits_(*bin, *clients, *nkeys, *duration, *warmup, *rateLimit); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

func credits_(bin string, clients, nkeys int, duration, warmup time.Duration, rateLimit int) error {
	srv, rdb, cleanup, err := privateRedis()
	if err != nil {
		return err
	}
	defer cleanup()
	ctx := context.Background()
	st := accounts.NewStore(rdb, nil)
	keys := make([]string, nkeys)
	for i := range keys {
		var err error
		if keys[i], err = paygKey(ctx, st, fmt.Sprintf("load-%d", i), credits.Whole(100)); err != nil {
			return err
		}
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "serve", "--listen", addr, "--metrics-listen", "0", "--redis-url", srv.URL, "--log-level", "warn",
		"--rate-limit", fmt.Sprint(rateLimit))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() }()
	base := "http://" + addr
	if err := waitHealthy(base, 10*time.Second); err != nil {
		return err
	}

	tr := &http.Transport{MaxIdleConnsPerHost: clients * 2, MaxConnsPerHost: clients * 2}
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	run := func(d time.Duration, record bool) (lat []time.Duration, errs int, took time.Duration) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := time.Now()
		deadline := start.Add(d)
		for c := 0; c < clients; c++ {
			wg.Add(1)
			go func(c int) {
				defer wg.Done()
				local := make([]time.Duration, 0, 4096)
				bad := 0
				key := keys[c%len(keys)]
				for time.Now().Before(deadline) {
					req, _ := http.NewRequest(http.MethodGet, base+"/v1/credits", nil)
					req.Header.Set("X-API-Key", key)
					t0 := time.Now()
					res, err := hc.Do(req)
					if err == nil {
						_, _ = io.Copy(io.Discard, res.Body)
						res.Body.Close()
					}
					el := time.Since(t0)
					if err != nil || res.StatusCode != 200 {
						bad++
						continue
					}
					if record {
						local = append(local, el)
					}
				}
				mu.Lock()
				lat = append(lat, local...)
				errs += bad
				mu.Unlock()
			}(c)
		}
		wg.Wait()
		return lat, errs, time.Since(start)
	}
	run(warmup, false)
	lat, errs, took := run(duration, true)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[int(float64(len(lat)-1)*p)]
	}
	fmt.Printf("GET /v1/credits: clients=%d keys=%d duration=%s ok=%d errors=%d throughput=%.0f req/s p50=%s p90=%s p99=%s max=%s\n",
		clients, nkeys, took.Round(time.Millisecond), len(lat), errs, float64(len(lat))/took.Seconds(),
		pct(0.50).Round(10*time.Microsecond), pct(0.90).Round(10*time.Microsecond), pct(0.99).Round(10*time.Microsecond),
		pct(1).Round(10*time.Microsecond))
	return nil
}

// paygKey creates an account called name holding balance and a
// pay-as-you-go key of it, and returns the key.
func paygKey(ctx context.Context, st *accounts.Store, name string, balance credits.Amount) (string, error) {
	a, err := st.CreateAccount(ctx, name, balance)
	if err != nil {
		return "", err
	}
	key, _, err := st.CreateKey(ctx, a.ID, accounts.PayAsYouGo)
	return key, err
}

// privateRedis starts a redis-server of our own on a free loopback port.
func privateRedis() (*testredis.Server, *redis.Client, func(), error) {
	dir, err := os.MkdirTemp("", "bulkd-load-")
	if err != nil {
		return nil, nil, nil, err
	}
	srv, err := testredis.StartProcess(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, nil, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 32})
	return srv, rdb, func() { _ = rdb.Close(); srv.Stop(); _ = os.RemoveAll(dir) }, nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func waitHealthy(base string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		res, err := http.Get(base + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("bulkd at %s did not become ready", base)
}
