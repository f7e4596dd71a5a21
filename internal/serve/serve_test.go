package serve

import (
	"bytes"
	"context"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/testredis"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// The demo account and its keys are created once; a restart reuses them and
// does not print them again.
func TestDemoIsCreatedOnce(t *testing.T) {
	rdb, _ := testredis.Client(t)
	ctx := context.Background()
	st, bl := accounts.NewStore(rdb, nil), billing.New(rdb, nil)
	file := filepath.Join(t.TempDir(), "var", "demo-keys.env")
	var out bytes.Buffer
	if err := Demo(ctx, st, bl, file, &out, quietLog()); err != nil {
		t.Fatal(err)
	}
	vals := parseEnvFile(mustRead(t, file))
	if !strings.Contains(out.String(), vals["BULKD_PAYG_KEY"]) || !strings.Contains(out.String(), vals["BULKD_UNLIMITED_KEY"]) {
		t.Fatalf("keys not shown: %s", out.String())
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o600 {
		t.Fatalf("keys file mode %v", fi.Mode())
	}
	p, err := st.Authenticate(ctx, vals["BULKD_UNLIMITED_KEY"])
	if err != nil || !p.Account.PlanActive(time.Now()) || p.Account.Balance.String() != "1000000" {
		t.Fatalf("demo principal %+v %v", p, err)
	}
	out.Reset()
	if err := Demo(ctx, st, bl, file, &out, quietLog()); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 {
		t.Fatalf("second start printed %q", out.String())
	}
	if ids, _ := st.ListAccounts(ctx); len(ids) != 1 {
		t.Fatalf("%d accounts after two starts", len(ids))
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Shutdown lets an in-flight request finish: a slow client upload that is
// under way when the signal arrives still gets its answer.
func TestGracefulShutdownFinishesInFlight(t *testing.T) {
	_, srv := testredis.Client(t)
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.MetricsListen = "0" // none: the default port may be taken by another test
	cfg.RedisURL = srv.URL
	cfg.Demo = true
	cfg.DemoKeysFile = filepath.Join(t.TempDir(), "keys.env")
	cfg.ShutdownTimeout = 10 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, quietLog(), io.Discard, ready) }()
	addr := <-ready
	key := parseEnvFile(mustRead(t, cfg.DemoKeysFile))["BULKD_PAYG_KEY"]

	pr, pw := io.Pipe()
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/company-enrichment/bulk", pr)
	req.Header.Set("X-API-Key", key)
	resc := make(chan *http.Response, 1)
	go func() {
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
		}
		resc <- res
	}()
	_, _ = pw.Write([]byte(`{"input":[{"domain":"a.example"},`))
	time.Sleep(100 * time.Millisecond)
	cancel() // SIGTERM arrives while the body is still being sent
	time.Sleep(100 * time.Millisecond)
	_, _ = pw.Write([]byte(`{"domain":"b.example"}]}`))
	_ = pw.Close()
	res := <-resc
	if res == nil || res.StatusCode != 200 {
		t.Fatalf("in-flight request: %v", res)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Fatal("still serving after shutdown")
	}
}

// /metrics is served on --metrics-listen and only there (issue 18, item
// 4): the API's address answers it 404, the metrics address answers
// nothing else, and both stop at shutdown. `bulkd apiserver` runs the same
// RunWith.
func TestMetricsOnTheirOwnListener(t *testing.T) {
	_, srv := testredis.Client(t)
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.MetricsListen = "127.0.0.1:0"
	cfg.RedisURL = srv.URL
	ctx, cancel := context.WithCancel(context.Background())
	ready, metricsReady := make(chan string, 1), make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- RunWith(ctx, cfg, quietLog(), io.Discard, ready, Options{MetricsReady: metricsReady})
	}()
	var api, metrics string
	for api == "" || metrics == "" {
		select {
		case api = <-ready:
		case metrics = <-metricsReady:
		case err := <-done:
			t.Fatalf("Run: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("not serving after 30 s")
		}
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	get := func(url string) (int, string) {
		t.Helper()
		res, err := hc.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, _ := get("http://" + api + "/healthz"); code != 200 {
		t.Fatalf("API /healthz: %d", code)
	}
	if code, body := get("http://" + api + "/metrics"); code != 404 || strings.Contains(body, "bulkd_") {
		t.Fatalf("API /metrics: %d %.200s", code, body)
	}
	code, body := get("http://" + metrics + "/metrics")
	if code != 200 || !strings.Contains(body, `bulkd_http_requests_total{method="GET",route="/healthz",status="200"} 1`) ||
		!strings.Contains(body, `route="unmatched",status="404"`) {
		t.Fatalf("metrics listener /metrics: %d\n%s", code, body)
	}
	for _, path := range []string{"/healthz", "/v1/credits", "/openapi.json"} {
		if code, _ := get("http://" + metrics + path); code != 404 {
			t.Errorf("metrics listener %s: %d, want 404", path, code)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if _, err := hc.Get("http://" + metrics + "/metrics"); err == nil {
		t.Fatal("metrics still served after shutdown")
	}
}

func TestFlagsOverrideEnvironment(t *testing.T) {
	t.Setenv("BULKD_LISTEN", "127.0.0.1:9999")
	t.Setenv("BULKD_RATE_LIMIT", "7")
	t.Setenv("BULKD_REDIRECT_CHECKS", "false")
	cfg := config.Default()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	cfg.Register(fs)
	if err := fs.Parse([]string{"--rate-limit", "9"}); err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "127.0.0.1:9999" || cfg.RateLimit != 9 || cfg.RedirectChecks {
		t.Fatalf("%+v", cfg)
	}
	if err := cfg.Validate(); err != nil || cfg.InstanceID == "" {
		t.Fatal(err)
	}
	bad := config.Default()
	bad.LogFormat = "xml"
	if bad.Validate() == nil {
		t.Fatal("bad log format accepted")
	}
}
