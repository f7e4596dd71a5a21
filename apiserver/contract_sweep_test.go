package apiserver_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/apicontract"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/idempotency"
)

// documentedOp is one /v1 operation of the document, with the statuses it
// documents.
type documentedOp struct {
	method, path string // path with its {job_id} filled in
	statuses     map[string]bool
}

// v1Operations lists the document's /v1 operations, so that the answers
// every operation shares (authentication, key family, rate limit, the data
// store failing) are produced on each of them, including operations other
// helpers add to the document later.
func v1Operations(t *testing.T) []documentedOp {
	t.Helper()
	c, err := apicontract.Default()
	if err != nil {
		t.Fatal(err)
	}
	var ops []documentedOp
	for path, item := range c.Doc().Paths.Map() {
		if !strings.HasPrefix(path, "/v1/") {
			continue
		}
		for method, op := range item.Operations() {
			st := map[string]bool{}
			for code := range op.Responses.Map() {
				st[code] = true
			}
			ops = append(ops, documentedOp{method: method,
				path: strings.ReplaceAll(path, "{job_id}", "6f1d7a38-0c7e-4d8a-9b8e-2f3a4b5c6d7e"), statuses: st})
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].path+ops[i].method < ops[j].path+ops[j].method })
	return ops
}

// send is one request to env with key (none when empty); a body is sent on
// every method but GET.
func send(t *testing.T, env *bulkdtest.Env, op documentedOp, key string) int {
	t.Helper()
	var body io.Reader
	if op.method != http.MethodGet {
		body = bytes.NewReader([]byte(`{}`))
	}
	req, err := http.NewRequest(op.method, env.URL+op.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return res.StatusCode
}

// unlimitedRoute is whether op takes unlimited-plan keys (SPEC 5).
func unlimitedRoute(op documentedOp) bool { return strings.HasPrefix(op.path, "/v1/unlimited/") }

// TestEveryOperationsSharedAnswers produces, on every documented /v1
// operation, the answers they all share, each checked against the document
// by the contract check: 401 without a key, 403 wrong_key_plan with the
// other family's key, 402 with a lapsed plan (unlimited routes), 429 past
// the key's rate limit, 500 when the process's own Redis client is closed
// (a fault of the process, not of Redis), and 503 temporarily_unavailable
// when Redis is away.
func TestEveryOperationsSharedAnswers(t *testing.T) {
	ctx := context.Background()
	env := bulkdtest.Start(t, bulkdtest.NoWorkers(), bulkdtest.WithConfig(func(c *config.Config) { c.RateLimit = 1 }))
	// A fresh key for every request: each key has its own limit of 1 a
	// second, so only the requests meant to be 429 are. An account holds
	// 20 keys, so each key gets an account of its own.
	keyOn := func(unlimited bool, state accounts.PlanState) string {
		id, k := env.Account(credits.Whole(100))
		if !unlimited {
			return k
		}
		if err := env.Parts.API.Accounts.SetPlan(ctx, id, accounts.PlanStarter, state, time.Time{}); err != nil {
			t.Fatal(err)
		}
		return env.Key(id, accounts.Unlimited)
	}
	key := func(unlimited bool) string { return keyOn(unlimited, accounts.StateActive) }
	ops := v1Operations(t)
	if len(ops) < 19 {
		t.Fatalf("%d /v1 operations in the document", len(ops))
	}
	for _, op := range ops {
		if got := send(t, env, op, ""); got != http.StatusUnauthorized {
			t.Errorf("%s %s without a key: %d, want 401", op.method, op.path, got)
		}
		if op.statuses["403"] && op.path != "/v1/content-spam-check" {
			if got := send(t, env, op, key(!unlimitedRoute(op))); got != http.StatusForbidden {
				t.Errorf("%s %s with the other family's key: %d, want 403", op.method, op.path, got)
			}
		}
		if op.statuses["402"] {
			if got := send(t, env, op, keyOn(true, accounts.StateLapsed)); got != http.StatusPaymentRequired {
				t.Errorf("%s %s with a lapsed plan: %d, want 402", op.method, op.path, got)
			}
		}
		k := key(unlimitedRoute(op))
		send(t, env, op, k)
		if got := send(t, env, op, k); got != http.StatusTooManyRequests {
			t.Errorf("%s %s twice in a second at 1 a second: %d, want 429", op.method, op.path, got)
		}
	}

	// The process's own client closed (shutting down, or a bug): 500.
	keys := map[bool]string{true: key(true), false: key(false)}
	_ = env.Redis.Close()
	for _, op := range ops {
		if got := send(t, env, op, keys[unlimitedRoute(op)]); got != http.StatusInternalServerError {
			t.Errorf("%s %s with the Redis client closed: %d, want 500", op.method, op.path, got)
		}
	}
}

// TestEveryOperationAnswers503WhenRedisIsAway: issue 26 found the 503
// temporarily_unavailable that every /v1 path answers while Redis cannot
// serve documented on no GET operation.
func TestEveryOperationAnswers503WhenRedisIsAway(t *testing.T) {
	env := bulkdtest.Start(t, bulkdtest.NoWorkers())
	acct, payg := env.Account(credits.Whole(100))
	unl := env.Key(acct, accounts.Unlimited)
	_ = env.Redis.ShutdownNoSave(context.Background()).Err()
	for _, op := range v1Operations(t) {
		k := payg
		if unlimitedRoute(op) {
			k = unl
		}
		for _, key := range []string{k, ""} {
			if got := send(t, env, op, key); got != http.StatusServiceUnavailable && !(key == "" && got == http.StatusUnauthorized) {
				t.Errorf("%s %s (key %v) with Redis away: %d, want 503", op.method, op.path, key != "", got)
			}
		}
	}
}

// TestEveryBodyAndIdempotencyAnswer produces, on every documented
// operation that has them, the answers of the machinery every request body
// and every charging request goes through: 408 for a body that stalls
// past the grace (admission control), and 409 idempotency_in_progress for
// an Idempotency-Key another request of the API key still holds.
func TestEveryBodyAndIdempotencyAnswer(t *testing.T) {
	ctx := context.Background()
	env := bulkdtest.Start(t, bulkdtest.NoWorkers(), bulkdtest.WithConfig(func(c *config.Config) {
		c.BodyGrace = 300 * time.Millisecond
	}))
	acct, payg := env.Account(credits.Whole(100))
	unl := env.Key(acct, accounts.Unlimited)
	if err := env.Parts.API.Accounts.SetPlan(ctx, acct, accounts.PlanStarter, accounts.StateActive, time.Time{}); err != nil {
		t.Fatal(err)
	}
	idem := idempotency.New(env.Redis, idempotency.Options{}, time.Now)
	for i, op := range v1Operations(t) {
		key := payg
		if unlimitedRoute(op) {
			key = unl
		}
		if op.statuses["408"] {
			u := startUpload(t, env, op.path, key, 1000, []byte(`{"a":`))
			r, closing := u.answer(t, 10*time.Second)
			if r.Status != http.StatusRequestTimeout || !closing {
				t.Errorf("%s %s, a body that stalls: %d (closing %v), want 408: %s", op.method, op.path, r.Status, closing, r.Body)
			}
		}
		if op.statuses["409"] {
			// Another request (another owner) holds the key's claim.
			p, err := env.Parts.API.Accounts.Authenticate(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			ik := fmt.Sprintf("held-%d", i)
			if _, err := idem.Claim(ctx, idempotency.Key(p.Key.ID, ik), "another-request"); err != nil {
				t.Fatal(err)
			}
			var body io.Reader
			if op.method != http.MethodGet {
				body = strings.NewReader(`{}`)
			}
			req, _ := http.NewRequest(op.method, env.URL+op.path, body)
			req.Header.Set("X-API-Key", key)
			req.Header.Set("Idempotency-Key", ik)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
			// The verification results' 409 is another one (a job not
			// complete), produced by the tests of that family.
			if res.StatusCode != http.StatusConflict && !strings.HasSuffix(op.path, "/results") {
				t.Errorf("%s %s with an Idempotency-Key in use: %d, want 409", op.method, op.path, res.StatusCode)
			}
		}
	}
}
