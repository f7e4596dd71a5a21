//go:build e2ecluster

package cluster_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/webhook"
	"github.com/bulkd/bulkd/test/companyapi"
)

// webhookPort is where the suite's receiver listens on the node address
// (hack/local-cluster/e2e.sh opens NODE_IP/32 with --webhook-allow-cidrs).
const webhookPort = "18081"

// (k) A job submitted through the Service with a webhook_url: its
// completion event reaches a receiver that refuses the first attempt,
// signed with the account's secret, the same event id on every attempt.
func TestWebhookThroughTheCluster(t *testing.T) {
	nodeIP := os.Getenv("E2E_NODE_IP")
	if nodeIP == "" {
		nodeIP = "10.254.0.1"
	}
	type delivery struct {
		header http.Header
		body   []byte
	}
	var mu sync.Mutex
	var got []delivery
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		mu.Lock()
		got = append(got, delivery{r.Header.Clone(), b})
		n := len(got)
		mu.Unlock()
		if n == 1 {
			http.Error(w, "not yet", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	ln, err := net.Listen("tcp", net.JoinHostPort(nodeIP, webhookPort))
	if err != nil {
		t.Fatalf("receiver: %v", err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	acct, key := account(t, credits.Whole(100))
	rows := companyapi.ScenarioRows()[:5]
	a := clusterAPI(t)
	status, body := a.Do(http.MethodPost, "/v1/company-enrichment/bulk", key, map[string]any{
		"input": rows, "webhook_url": "http://" + net.JoinHostPort(nodeIP, webhookPort) + "/hook"})
	if status != http.StatusOK {
		t.Fatalf("submit: %d %s", status, body)
	}
	var sub struct {
		JobID string `json:"job_id"`
	}
	if err := json.Unmarshal(body, &sub); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitFor(t, 3*time.Minute, "the webhook accepted on its second attempt", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= 2
	})
	timing(t, "(k) submit -> webhook delivered (second attempt)", time.Since(start))
	secret, err := webhook.NewSecrets(h.rdb).Current(context.Background(), acct)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, d := range got[:2] {
		if err := webhook.Verify(d.header.Get("X-Bulkd-Signature"), secret, d.body, 10*time.Minute, time.Now()); err != nil {
			t.Errorf("attempt %d: signature: %v", i+1, err)
		}
		var ev struct {
			EventID string `json:"event_id"`
			Type    string `json:"type"`
			JobID   string `json:"job_id"`
			Status  string `json:"status"`
		}
		if err := json.Unmarshal(d.body, &ev); err != nil {
			t.Fatalf("attempt %d: %v: %s", i+1, err, d.body)
		}
		if ev.JobID != sub.JobID || ev.Type != "job.completed" || ev.Status != "completed" || ev.EventID != d.header.Get("X-Bulkd-Event-Id") {
			t.Errorf("attempt %d: event %s (headers %v)", i+1, d.body, d.header)
		}
	}
	if got[0].header.Get("X-Bulkd-Event-Id") != got[1].header.Get("X-Bulkd-Event-Id") {
		t.Errorf("the retry has another event id")
	}
}
