package main

// loadgen stalled: issue 18's item 2 on a real bulkd. Account A opens
// --uploads uploads declaring --body-mib MiB each, paced under its key's
// rate limit (bulkd's default 20 requests/s), each sending its headers and
// its first row and then nothing; meanwhile account B submits a 45-byte
// body every 250 ms and, once, a whole --body-mib MiB body at full speed.
// It prints B's statuses and latencies, how A's uploads ended, and the
// server's peak bytes under admission.
//
//	go run ./hack/loadgen stalled --bin bin/bulkd [--uploads 120] [--body-mib 64] [--gomemlimit 691MiB]
//
// --gomemlimit sets GOMEMLIMIT as the chart's 768 MiB apiserver has it
// (90%), which sizes the default admission budget. The binary may be one
// from before --metrics-listen (the numbers before the fix): then its
// metrics are read from the API's address.

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/credits"
)

func stalledMain(args []string) error {
	fs := flag.NewFlagSet("stalled", flag.ExitOnError)
	bin := fs.String("bin", "bin/bulkd", "bulkd binary")
	uploads := fs.Int("uploads", 120, "A's stalled uploads")
	bodyMiB := fs.Int("body-mib", 64, "declared size of A's uploads and size of B's large body, MiB")
	pace := fs.Duration("pace", 60*time.Millisecond, "time between two of A's uploads (under A's 20 requests/s)")
	gomemlimit := fs.String("gomemlimit", "", "GOMEMLIMIT of bulkd (the chart's 768 MiB container: 691MiB); empty: none")
	_ = fs.Parse(args)

	srv, rdb, cleanup, err := privateRedis()
	if err != nil {
		return err
	}
	defer cleanup()
	ctx := context.Background()
	st := accounts.NewStore(rdb, nil)
	keyA, err := paygKey(ctx, st, "stalled-a", credits.Whole(1_000_000_000))
	if err != nil {
		return err
	}
	keyB, err := paygKey(ctx, st, "stalled-b", credits.Whole(1_000_000_000))
	if err != nil {
		return err
	}
	b, err := startBulkdCompat(*bin, srv.URL, *gomemlimit)
	if err != nil {
		return err
	}
	defer b.stop()
	fmt.Printf("bulkd %s, GOMEMLIMIT=%q: max decoding bytes %s MiB, per account %s MiB\n", *bin, *gomemlimit,
		mibOf(metricFloat(b.metrics, "bulkd_admission_max_bytes")), mibOf(metricFloat(b.metrics, "bulkd_admission_account_max_bytes")))

	const bulk = "/v1/company-enrichment/bulk"
	addr := strings.TrimPrefix(b.base, "http://")
	declared := *bodyMiB << 20
	stopPeak := samplePeak(b)
	// A's uploads, each answered (or not) in its own goroutine.
	start := time.Now()
	ua := startUploads(addr, bulk, keyA, declared, *uploads, *pace)
	var mu sync.Mutex

	// B: a 45-byte submission every 250 ms while A's uploads go on, and one
	// large body at full speed a second in.
	hc := &http.Client{Timeout: 2 * time.Minute}
	small := []byte(`{"input":[{"domain":"small-b.example"}]}     `)
	var bCodes = map[int]int{}
	var bLat []time.Duration
	var wgB sync.WaitGroup
	wgB.Add(1)
	var bigCode int
	var bigTook time.Duration
	go func() {
		defer wgB.Done()
		time.Sleep(time.Second)
		body := bigCompanyBody(declared)
		t0 := time.Now()
		code, _ := post(hc, b.base+bulk, keyB, body)
		bigCode, bigTook = code, time.Since(t0)
	}()
	during := time.Duration(*uploads)*(*pace) + 2*time.Second
	for time.Since(start) < during {
		t0 := time.Now()
		code, _ := post(hc, b.base+bulk, keyB, small)
		d := time.Since(t0)
		mu.Lock()
		bCodes[code]++
		bLat = append(bLat, d)
		mu.Unlock()
		time.Sleep(250 * time.Millisecond)
	}
	wgB.Wait()
	ua.wg.Wait()
	peak := stopPeak()
	sort.Slice(ua.times, func(i, j int) bool { return ua.times[i] < ua.times[j] })
	fmt.Printf("A: %d uploads declaring %d MiB, one every %v: ended %v; answered after p50 %v, max %v\n",
		*uploads, *bodyMiB, *pace, ua.ends, pct(ua.times, 0.5), pct(ua.times, 1))
	fmt.Printf("B: %d submissions of 45 bytes during them: statuses %v, latency p50 %v, p99 %v, max %v\n",
		len(bLat), bCodes, pct(bLat, 0.5), pct(bLat, 0.99), pct(bLat, 1))
	fmt.Printf("B: one %d MiB body at full speed during them: %d in %v\n", *bodyMiB, bigCode, bigTook.Round(10*time.Millisecond))
	fmt.Printf("peak bulkd_admission_bytes %s MiB; bulkd peak RSS %s\n", mibOf(peak), b.peakRSS())
	return nil
}

// samplePeak samples b's bulkd_admission_bytes every 100 ms until the
// returned stop is called, which returns the peak.
func samplePeak(b *bulkd) (stop func() float64) {
	done := make(chan struct{})
	var peak float64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peak = max(peak, metricFloat(b.metrics, "bulkd_admission_bytes"))
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() float64 {
		close(done)
		<-sampled
		return peak
	}
}

// stalledUploads are account A's stalled uploads: how each ended, and
// when those answered (4xx, 5xx) were.
type stalledUploads struct {
	mu    sync.Mutex
	wg    sync.WaitGroup
	ends  map[string]int
	times []time.Duration
}

// startUploads starts n stalled uploads declaring declared bytes, one
// every pace, each in its own goroutine.
func startUploads(addr, path, key string, declared, n int, pace time.Duration) *stalledUploads {
	u := &stalledUploads{ends: map[string]int{}}
	go func() {
		for range n {
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				end, took := stalledUpload(addr, path, key, declared)
				u.mu.Lock()
				u.ends[end]++
				if strings.HasPrefix(end, "4") || strings.HasPrefix(end, "5") {
					u.times = append(u.times, took)
				}
				u.mu.Unlock()
			}()
			time.Sleep(pace)
		}
	}()
	return u
}

func mibOf(f float64) string { return fmt.Sprintf("%.1f", f/(1<<20)) }

// post sends body and returns the status (-1 on a transport error).
func post(hc *http.Client, url, key string, body []byte) (int, string) {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(string(body)))
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	res, err := hc.Do(req)
	if err != nil {
		return -1, err.Error()
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(raw)
}

// stalledUpload sends a POST's headers declaring declared bytes and its
// first row, then nothing, and reports how it ended ("408", "503", ...,
// or "no answer" when the connection ended or 90 s passed without one) and when.
func stalledUpload(addr, path, key string, declared int) (string, time.Duration) {
	start := time.Now()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "dial error", 0
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(90 * time.Second))
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: bulkd\r\nX-API-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		path, key, declared, `{"input":[{"domain":"a.example"},`)
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return "no answer", time.Since(start)
	}
	res.Body.Close()
	return fmt.Sprint(res.StatusCode), time.Since(start)
}

// startBulkdCompat starts `bulkd serve` with its default admission
// settings (and its default rate limit) and a metrics listener when the
// binary has one.
func startBulkdCompat(bin, redisURL, gomemlimit string) (*bulkd, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := []string{"serve", "--listen", addr, "--redis-url", redisURL, "--log-level", "error", "--workers", "1"}
	metrics := "http://" + addr
	if out, _ := exec.Command(bin, "serve", "-h").CombinedOutput(); strings.Contains(string(out), "-metrics-listen") {
		maddr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		args = append(args, "--metrics-listen", maddr)
		metrics = "http://" + maddr
	}
	var env []string
	if gomemlimit != "" {
		env = append(os.Environ(), "GOMEMLIMIT="+gomemlimit)
	}
	return launchBulkd(bin, args, env, "http://"+addr, metrics)
}
