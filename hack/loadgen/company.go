package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/company"
	"github.com/bulkd/bulkd/internal/company/normalize"
	"github.com/bulkd/bulkd/internal/credits"
)

// companyMain measures the company-enrichment targets of issue 3:
// dataset import rate, 100,000-row submission latency and the API
// process's peak RSS, job completion time (redirect checks off and on),
// and results-page latency under concurrent readers.
func companyMain(args []string) error {
	fs := flag.NewFlagSet("company", flag.ExitOnError)
	bin := fs.String("bin", "bin/bulkd", "bulkd binary")
	dataset := fs.Int("dataset", 1_000_000, "companies generated and imported")
	rows := fs.Int("rows", 100_000, "distinct rows per submission")
	jobs := fs.Int("jobs", 5, "submissions measured")
	readers := fs.Int("readers", 20, "concurrent results-page readers")
	readFor := fs.Duration("read-for", 10*time.Second, "how long the readers run")
	redirectRows := fs.Int("redirect-rows", 20_000, "domain rows of the redirect-checks-on job (0 to skip)")
	workers := fs.Int("workers", 4, "bulkd --workers")
	liveReads := fs.Bool("live-reads", true, "also measure random pages with the row cache off")
	deadRows := fs.Int("dead-rows", 100_000, "domain rows that do not resolve (NXDOMAIN), redirect checks on, no proxy (0 to skip)")
	mixedRows := fs.Int("mixed-rows", 100_000, "rows of the mixed live and dead domains job (0 to skip)")
	mixedLive := fs.Int("mixed-live", 20_000, "live domains among --mixed-rows")
	liveRows := fs.Int("live-rows", 20_000, "live domain rows resolved by bulkd, no proxy (0 to skip)")
	onlyDomains := fs.Bool("only-domains", false, "skip the dataset, the network-URL jobs and the results pages: only the redirect-check scenarios")
	bulkdFlags := fs.String("bulkd-flags", "", "more bulkd flags for the domain scenarios, space-separated (experiments)")
	_ = fs.Parse(args)
	if *onlyDomains {
		*dataset, *jobs = 1000, 0
	}

	srv, rdb, cleanup, err := privateRedis()
	if err != nil {
		return err
	}
	defer cleanup()
	ctx := context.Background()

	// 1. Dataset: generate and import, streaming through a pipe.
	if err := importDataset(ctx, rdb, *dataset); err != nil {
		return err
	}
	slugs, err := companySlugs(*dataset, *rows)
	if err != nil {
		return err
	}
	body := submission(slugs, "network_url")
	fmt.Printf("submission body: %d rows, %.1f MB\n", *rows, float64(len(body))/1e6)

	key, err := paygKey(ctx, accounts.NewStore(rdb, nil), "load",
		credits.Whole(int64(*rows)*int64(*jobs+2)+int64(*redirectRows+*deadRows+*mixedRows+*liveRows)))
	if err != nil {
		return err
	}

	hc := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	if !*onlyDomains {
		if err := networkJobs(hc, *bin, srv.URL, key, body, *rows, *jobs, *workers, *readers, *readFor, *liveReads); err != nil {
			return err
		}
	}

	// 4. Redirect checks on, against a local website stand-in (proxy).
	if *redirectRows > 0 {
		if err := redirectJob(hc, *bin, srv.URL, key, *workers, *redirectRows); err != nil {
			return err
		}
	}

	// 5. Redirect checks on without a proxy: bulkd resolves every domain
	// itself (domains.go).
	var extra []string
	if *bulkdFlags != "" {
		extra = strings.Fields(*bulkdFlags)
	}
	return domainScenarios(ctx, *bin, srv.URL, key, *workers, *deadRows, *mixedRows, *mixedLive, *liveRows, extra)
}

// importDataset generates n companies and imports them, streaming
// through a pipe, and reports the rate.
func importDataset(ctx context.Context, rdb *redis.Client, n int) error {
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(company.Generate(bufio.NewWriterSize(pw, 1<<20), n, 7, "linkedin.com"))
	}()
	st := company.NewStore(rdb, "bulkd:")
	norm := normalize.New(normalize.DefaultHosts)
	stats, err := company.Import(ctx, pr, company.FormatJSONL, st, norm, nil)
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	mem, _ := rdb.Info(ctx, "memory").Result()
	fmt.Printf("import: %d companies in %s = %.0f companies/s (redis %s)\n", stats.Imported, stats.Elapsed.Round(time.Millisecond),
		float64(stats.Imported)/stats.Elapsed.Seconds(), infoField(mem, "used_memory_human"))
	return nil
}

// companySlugs are rows distinct inputs: slugs of generated companies
// (found) and invented ones (not found).
func companySlugs(dataset, rows int) ([]string, error) {
	slugs := make([]string, 0, rows)
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(company.Generate(pw, min(dataset, rows*9/10), 7, "linkedin.com")) }()
	dec := json.NewDecoder(pr)
	for {
		var r struct {
			NetworkURL string `json:"network_url"`
			Domain     string `json:"domain"`
		}
		if err := dec.Decode(&r); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		slugs = append(slugs, r.NetworkURL)
	}
	for i := len(slugs); i < rows; i++ {
		slugs = append(slugs, fmt.Sprintf("https://www.linkedin.com/company/no-such-company-%d", i))
	}
	return slugs, nil
}

// redirectJob measures a job of n domain rows with redirect checks on,
// against a local website stand-in (proxy).
func redirectJob(hc *http.Client, bin, redisURL, key string, workers, n int) error {
	proxy, count := websiteProxy()
	defer proxy.Close()
	b, err := startBulkd(bin, redisURL, "--workers", strconv.Itoa(workers), "--redirect-checks=true", "--http-proxy", "http://"+proxy.Addr)
	if err != nil {
		return err
	}
	doms := make([]string, n)
	for i := range doms {
		doms[i] = fmt.Sprintf("site-%d.example", i)
	}
	t0 := time.Now()
	id, err := submit(hc, b.base, key, submission(doms, "domain"))
	if err == nil {
		err = waitDone(hc, b.base, key, id, 600*time.Second)
	}
	b.stop()
	if err != nil {
		return err
	}
	el := time.Since(t0)
	fmt.Printf("redirect checks on: %d domain rows in %s = %.0f rows/s (%d website requests through the local proxy)\n",
		n, el.Round(time.Millisecond), float64(n)/el.Seconds(), count())
	return nil
}

// networkJobs measures the network-URL jobs (redirect checks off) and the
// results pages.
func networkJobs(hc *http.Client, bin, redisURL, key string, body []byte, rows, jobs, workers, readers int, readFor time.Duration, liveReads bool) error {
	// 2. Submissions and completion, redirect checks off.
	b, err := startBulkd(bin, redisURL, "--workers", strconv.Itoa(workers), "--redirect-checks=false")
	if err != nil {
		return err
	}
	var submitLat, doneLat []time.Duration
	var lastJob string
	var jobIDs []string
	for i := 0; i < jobs; i++ {
		t0 := time.Now()
		id, err := submit(hc, b.base, key, body)
		if err != nil {
			b.stop()
			return err
		}
		submitLat = append(submitLat, time.Since(t0))
		if err := waitDone(hc, b.base, key, id, 120*time.Second); err != nil {
			b.stop()
			return err
		}
		doneLat = append(doneLat, time.Since(t0))
		lastJob = id
		jobIDs = append(jobIDs, id)
	}
	rss := b.peakRSS()
	fmt.Printf("submit %d distinct rows: p50=%s min=%s max=%s (n=%d)\n", rows, pct(submitLat, 0.5), pct(submitLat, 0), pct(submitLat, 1), len(submitLat))
	fmt.Printf("submit -> completed (redirect checks off, %d workers): p50=%s min=%s max=%s = %.0f rows/s at p50\n", workers,
		pct(doneLat, 0.5), pct(doneLat, 0), pct(doneLat, 1), float64(rows)/pct(doneLat, 0.5).Seconds())
	fmt.Printf("bulkd peak RSS (VmHWM) after %d jobs: %s\n", jobs, rss)

	// 3. Results pages under concurrent readers. First every page once, in
	// order, shared among the readers (a client downloading its results:
	// each page is rendered from Redis and fills the row cache), then random
	// pages for readFor (the cache warm), then the same random reading with
	// the row cache off (every page rendered from Redis).
	var next atomic.Int64
	pagesPerJob := (rows + 499) / 500
	cold := readPages(hc, b.base, key, readers, time.Hour, func(*rand.Rand) (string, int, bool) {
		n := int(next.Add(1)) - 1 // the jobs one after the other, the last job last
		if n >= pagesPerJob*len(jobIDs) {
			return "", 0, false
		}
		return jobIDs[n/pagesPerJob], 500 * (n % pagesPerJob), true
	})
	report(fmt.Sprintf("results pages limit=500, each page of the %d jobs once in order (row cache cold), %d readers", len(jobIDs), readers), cold, 0)
	random := func(rnd *rand.Rand) (string, int, bool) { return lastJob, rnd.Intn(max(1, rows-500)), true }
	lat := readPages(hc, b.base, key, readers, readFor, random)
	report(fmt.Sprintf("results page limit=500, random offsets, %d readers for %s (row cache warm)", readers, readFor), lat, readFor)
	fmt.Printf("bulkd peak RSS (VmHWM) after the reads: %s; %s\n", b.peakRSS(), b.cacheStats(hc))
	b.stop()
	if liveReads {
		b, err = startBulkd(bin, redisURL, "--workers", strconv.Itoa(workers), "--redirect-checks=false", "--results-cache-bytes", "0")
		if err != nil {
			return err
		}
		lat = readPages(hc, b.base, key, readers, readFor, random)
		report(fmt.Sprintf("results page limit=500, random offsets, %d readers for %s (row cache off)", readers, readFor), lat, readFor)
		b.stop()
	}

	return nil
}

func submission(values []string, field string) []byte {
	var buf bytes.Buffer
	buf.WriteString(`{"input":[`)
	for i, v := range values {
		if i > 0 {
			buf.WriteByte(',')
		}
		q, _ := json.Marshal(v)
		fmt.Fprintf(&buf, `{"%s":%s}`, field, q)
	}
	buf.WriteString("]}")
	return buf.Bytes()
}

type bulkd struct {
	cmd     *exec.Cmd
	base    string
	metrics string // base URL of --metrics-listen
}

func startBulkd(bin, redisURL string, extra ...string) (*bulkd, error) {
	return startBulkdEnv(bin, redisURL, nil, extra...)
}

// launchBulkd runs bin with args (env nil: this process's environment)
// and waits until base answers /healthz.
func launchBulkd(bin string, args, env []string, base, metrics string) (*bulkd, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	b := &bulkd{cmd: cmd, base: base, metrics: metrics}
	if err := waitHealthy(b.base, 15*time.Second); err != nil {
		b.stop()
		return nil, err
	}
	return b, nil
}

func (b *bulkd) stop() {
	_ = b.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _, _ = b.cmd.Process.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-done
	}
}

func (b *bulkd) peakRSS() string {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", b.cmd.Process.Pid))
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func submit(hc *http.Client, base, key string, body []byte) (string, error) {
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/company-enrichment/bulk", bytes.NewReader(body))
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	res, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		return "", fmt.Errorf("submit: %d %s", res.StatusCode, raw)
	}
	var r struct {
		JobID string `json:"job_id"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return "", err
	}
	return r.JobID, nil
}

func waitDone(hc *http.Client, base, key, id string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/company-enrichment/bulk/"+id, nil)
		req.Header.Set("X-API-Key", key)
		res, err := hc.Do(req)
		if err != nil {
			return err
		}
		var st struct {
			Status string `json:"status"`
		}
		_ = json.NewDecoder(res.Body).Decode(&st)
		res.Body.Close()
		if st.Status == "completed" {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("job %s not completed within %s", id, d)
}

// readPages runs readers concurrent clients for at most d, each reading
// 500-row pages of the jobs and offsets next gives until it says stop, and
// returns the latency of every 200 answer.
func readPages(hc *http.Client, base, key string, readers int, d time.Duration, next func(*rand.Rand) (string, int, bool)) []time.Duration {
	var mu sync.Mutex
	var all []time.Duration
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	for r := 0; r < readers; r++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			rnd := rand.New(rand.NewSource(seed))
			var local []time.Duration
			for time.Now().Before(deadline) {
				id, off, ok := next(rnd)
				if !ok {
					break
				}
				req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/v1/company-enrichment/bulk/%s/results?limit=500&offset=%d", base, id, off), nil)
				req.Header.Set("X-API-Key", key)
				t0 := time.Now()
				res, err := hc.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode == 200 {
					local = append(local, time.Since(t0))
				}
			}
			mu.Lock()
			all = append(all, local...)
			mu.Unlock()
		}(int64(r))
	}
	wg.Wait()
	return all
}

// report prints a latency distribution; over (when set) is the time the
// readers ran, for the page rate.
func report(what string, lat []time.Duration, over time.Duration) {
	rate := ""
	if over > 0 {
		rate = fmt.Sprintf(", %.0f pages/s", float64(len(lat))/over.Seconds())
	}
	fmt.Printf("%s: %d pages%s, p50=%s p90=%s p99=%s max=%s\n", what, len(lat), rate, pct(lat, 0.5), pct(lat, 0.9), pct(lat, 0.99), pct(lat, 1))
}

// cacheStats reads the row cache's counters from /metrics.
func (b *bulkd) cacheStats(hc *http.Client) string {
	res, err := hc.Get(b.metrics + "/metrics")
	if err != nil {
		return "row cache: " + err.Error()
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var out []string
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "bulkd_results_cache_") {
			out = append(out, strings.TrimPrefix(line, "bulkd_results_cache_"))
		}
	}
	return "row cache: " + strings.Join(out, " ")
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(float64(len(s)-1)*p)].Round(100 * time.Microsecond)
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return "?"
}
