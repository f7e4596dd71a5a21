package serve

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/bulkd/bulkd/internal/verify/lists"
)

// A running bulkd takes a list an operator syncs without a restart: the
// single check flags the new disposable domain once the sync is announced.
// Before the watcher, lists were read at process start only.
func TestListsSyncReachesRunningProcess(t *testing.T) {
	rdb, srv := testredis.Client(t)
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.MetricsListen = "0"
	cfg.RedisURL = srv.URL
	cfg.Demo = true
	cfg.DemoKeysFile = filepath.Join(t.TempDir(), "keys.env")
	cfg.DNSServer = "127.0.0.1:1" // nothing answers: dns_error at once; the list flags come anyway
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, quietLog(), io.Discard, ready) }()
	t.Cleanup(func() { cancel(); <-done })
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	key := parseEnvFile(mustRead(t, cfg.DemoKeysFile))["BULKD_PAYG_KEY"]
	disposable := func(email string) bool {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/verify?timeout=10&email="+email, nil)
		req.Header.Set("X-API-Key", key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var body struct {
			IsDisposable *bool `json:"is_disposable"`
		}
		if err := json.NewDecoder(res.Body).Decode(&body); err != nil || res.StatusCode != 200 || body.IsDisposable == nil {
			t.Fatalf("verify %s: %d %v", email, res.StatusCode, err)
		}
		return *body.IsDisposable
	}
	if disposable("a@burner.example") {
		t.Fatal("burner.example is disposable before the sync")
	}
	if _, err := lists.Sync(ctx, rdb, strings.NewReader("burner.example\n"), lists.SyncOptions{Kind: lists.Disposable, Mode: lists.Add, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for i := 0; !disposable("b" + strings.Repeat("x", i) + "@burner.example"); i++ {
		if i == 50 {
			t.Fatal("the running process did not take the synced list")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
