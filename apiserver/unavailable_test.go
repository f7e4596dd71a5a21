package apiserver_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/credits"
)

// TestRedisAwayIs503 is what the soak suite (test/soak) found: while Redis
// restarts, every request failed with 500 Internal server error. Redis
// being away is no fault of the request: the answer is 503
// temporarily_unavailable with Retry-After, which a client waits out and
// retries (a charging POST with the same Idempotency-Key).
func TestRedisAwayIs503(t *testing.T) {
	a := newTestAPI(t)
	_, key := a.account(credits.Whole(10), accounts.PayAsYouGo)
	if r := a.get("/v1/credits", key); r.Status != http.StatusOK {
		t.Fatalf("with Redis up: %d %s", r.Status, r.Body)
	}
	// Redis goes away (SHUTDOWN: the process exits, nothing listens).
	_ = a.Redis.ShutdownNoSave(context.Background()).Err()

	for _, path := range []string{"/v1/credits", "/v1/company-enrichment/bulk/00000000-0000-0000-0000-000000000000"} {
		r := a.get(path, key)
		checkError(t, r, http.StatusServiceUnavailable, "temporarily_unavailable")
		if got := r.Header.Get("Retry-After"); got != "1" {
			t.Errorf("%s: Retry-After %q, want 1", path, got)
		}
	}
	// A submission too (a charging POST): 503, not 500.
	r := a.do(http.MethodPost, "/v1/company-enrichment/bulk", `{"input":[{"domain":"example.com"}]}`, "X-Api-Key", key)
	checkError(t, r, http.StatusServiceUnavailable, "temporarily_unavailable")
}
