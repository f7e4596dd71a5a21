package main

// loadgen admission: what 20 concurrent 64 MiB submissions do to a real
// bulkd's memory with admission control at its default bound and with it
// effectively off (--max-decoding-bytes far above anything sent), and how
// long clients that honour Retry-After take to get every body accepted.
//
//	go run ./hack/loadgen admission --bin bin/bulkd [--bodies 20] [--body-mib 64]

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/credits"
)

func admissionMain(args []string) error {
	fs := flag.NewFlagSet("admission", flag.ExitOnError)
	bin := fs.String("bin", "bin/bulkd", "bulkd binary")
	bodies := fs.Int("bodies", 20, "concurrent submissions")
	bodyMiB := fs.Int("body-mib", 64, "size of each submission body, MiB (at most --max-body-bytes)")
	bound := fs.Int64("max-decoding-bytes", 0, "bulkd --max-decoding-bytes of the bounded runs (0: bulkd's default)")
	nAccounts := fs.Int("accounts", 1, "accounts the bodies are spread over (each account has its share of the bound)")
	_ = fs.Parse(args)

	srv, rdb, cleanup, err := privateRedis()
	if err != nil {
		return err
	}
	defer cleanup()
	ctx := context.Background()
	st := accounts.NewStore(rdb, nil)
	body := bigCompanyBody(*bodyMiB << 20)
	fmt.Printf("%d concurrent bodies of %d bytes (100,000 distinct network URLs each) from %d accounts\n", *bodies, len(body), max(*nAccounts, 1))

	for _, sc := range []struct {
		name  string
		bound int64
		retry bool
	}{
		{"admission off", 1 << 40, false},
		{"admission on", *bound, false},
		{"admission on, clients retry", *bound, true},
	} {
		if err := rdb.FlushDB(ctx).Err(); err != nil {
			return err
		}
		// Each scenario on fresh accounts.
		keys := make([]string, max(*nAccounts, 1))
		for i := range keys {
			if keys[i], err = paygKey(ctx, st, fmt.Sprintf("admission-%d", i), credits.Whole(1_000_000_000)); err != nil {
				return err
			}
		}
		// No workers' memory in the numbers: only the submissions run.
		b, err := startBulkd(*bin, srv.URL, "--max-decoding-bytes", strconv.FormatInt(sc.bound, 10), "--workers", "1")
		if err != nil {
			return err
		}
		res := admissionRun(b, keys, body, *bodies, sc.retry)
		fmt.Printf("%-28s bound=%s  %s  peak RSS %s  peak heap in use %d MiB  (rejections %s)\n", sc.name,
			boundName(sc.bound), res, b.peakRSS(), res.peakHeap>>20, metricValue(b.metrics, "bulkd_admission_rejections_total"))
		b.stop()
	}
	return nil
}

func boundName(n int64) string {
	if n == 0 {
		return "default"
	}
	return fmt.Sprintf("%d MiB", n>>20)
}

// bigCompanyBody is a company submission of about size bytes: 100,000
// distinct, valid network URLs, each padded with a long query string (which
// the normalizer drops) to the longest rows a 64 MiB body can hold within
// the 100,000-row limit.
func bigCompanyBody(size int) []byte {
	const rows = 100_000
	per := size/rows - len(`{"network_url":"https://www.linkedin.com/company/generated-company-0000000/?ref="},`)
	pad := strings.Repeat("x", max(per, 1))
	var buf bytes.Buffer
	buf.Grow(size)
	buf.WriteString(`{"input":[`)
	for i := range rows {
		if i > 0 {
			buf.WriteByte(',')
		}
		fmt.Fprintf(&buf, `{"network_url":"https://www.linkedin.com/company/generated-company-%07d/?ref=%s"}`, i, pad)
	}
	buf.WriteString("]}")
	return buf.Bytes()
}

type admissionResult struct {
	codes    map[string]int
	took     time.Duration
	peakHeap int64
}

func (r admissionResult) String() string {
	return fmt.Sprintf("answers %v in %s", r.codes, r.took.Round(10*time.Millisecond))
}

// admissionRun sends n concurrent submissions of body and samples the
// server's heap while they run. With retry, a client turned away with 503
// or 429 waits Retry-After and sends again until it is accepted.
func admissionRun(b *bulkd, keys []string, body []byte, n int, retry bool) admissionResult {
	hc := &http.Client{Timeout: 5 * time.Minute}
	res := admissionResult{codes: map[string]int{}}
	var mu sync.Mutex
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if h := int64(metricFloat(b.metrics, "go_memstats_heap_inuse_bytes")); h > res.peakHeap {
				res.peakHeap = h
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		key := keys[i%len(keys)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				req, _ := http.NewRequest(http.MethodPost, b.base+"/v1/company-enrichment/bulk", bytes.NewReader(body))
				req.Header.Set("X-API-Key", key)
				req.Header.Set("Content-Type", "application/json")
				r, err := hc.Do(req)
				code, wait := "error", 0
				if err == nil {
					raw, _ := io.ReadAll(r.Body)
					r.Body.Close()
					code = strconv.Itoa(r.StatusCode)
					if r.StatusCode != 200 && r.StatusCode != 503 && r.StatusCode != 429 {
						fmt.Fprintf(os.Stderr, "submission: %d %.300s\n", r.StatusCode, raw)
					}
					wait, _ = strconv.Atoi(r.Header.Get("Retry-After"))
				} else {
					fmt.Fprintln(os.Stderr, "submission:", err)
				}
				mu.Lock()
				res.codes[code]++
				mu.Unlock()
				// 503 server_busy, and 429 account_busy: the bodies are all
				// one account's, which has a share of the budget.
				if !retry || (code != "503" && code != "429") {
					return
				}
				time.Sleep(time.Duration(max(wait, 1)) * time.Second)
			}
		}()
	}
	wg.Wait()
	res.took = time.Since(start)
	close(stop)
	<-sampled
	return res
}

var metricLine = regexp.MustCompile(`(?m)^(\S+) (\S+)$`)

func metricValue(base, name string) string {
	return strconv.FormatFloat(metricFloat(base, name), 'f', -1, 64)
}

// metricFloat reads one unlabelled metric from /metrics at base, bulkd's
// --metrics-listen (0 when absent).
func metricFloat(base, name string) float64 {
	r, err := http.Get(base + "/metrics")
	if err != nil {
		return 0
	}
	defer r.Body.Close()
	raw, _ := io.ReadAll(r.Body)
	for _, m := range metricLine.FindAllSubmatch(raw, -1) {
		if string(m[1]) == name {
			f, _ := strconv.ParseFloat(string(m[2]), 64)
			return f
		}
	}
	return 0
}
