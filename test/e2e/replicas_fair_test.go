package e2e

// Several `bulkd serve` replicas on one Redis (the standalone scale-out
// path, issue 27 item 5): an account's small job must not wait behind a
// big account's work because the big work reached the other replicas too.
// Each replica's executor (jobs.Local) schedules what it holds with
// internal/fairshare; the shards of every running job are picked up by
// every replica (the resume pass, every --lease-ttl) and leases keep two
// replicas off one shard, so a replica that took a job's submission is not
// the only one to run it. docs/architecture.md ("Scheduling shards across
// accounts", Replicas) says what is global and what is per process.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/bulkd/bulkd/test/companyapi"
)

// slowWeb answers every website check after a delay, so a shard of big
// account's rows holds its worker for a while. It counts the checks of
// each account's hosts ("<account>-...example"); each replica has its own,
// so the counts say which replica ran whose rows.
type slowWeb struct {
	delay time.Duration
	mu    sync.Mutex
	hits  map[string]int // account prefix -> website checks
}

func (w *slowWeb) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	host := r.URL.Hostname()
	if host == "" {
		host, _, _ = strings.Cut(r.Host, ":")
	}
	acct, _, _ := strings.Cut(strings.TrimPrefix(host, "www."), "-")
	w.mu.Lock()
	w.hits[acct]++
	w.mu.Unlock()
	select {
	case <-time.After(w.delay):
	case <-r.Context().Done():
		return
	}
	_, _ = io.WriteString(rw, "<html><body>welcome</body></html>")
}

func (w *slowWeb) count(acct string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.hits[acct]
}

// TestReplicasShareFairness: two replicas on one Redis, 2 workers each.
// Account A submits three jobs of 100,000 rows to replica 1; once both
// replicas run A's shards, account B submits 5 rows to replica 2. B's job
// completes within 15 s (goal of issue 27), while A's jobs are still far
// from done.
func TestReplicasShareFairness(t *testing.T) {
	if testing.Short() {
		t.Skip("submits 300,000 rows to two bulkd processes")
	}
	tStart := time.Now()
	bin := restartBuild(t)
	srv, err := testredis.StartProcess(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()

	as := accounts.NewStore(rdb, nil)
	newKey := func(name string, grant int64) string {
		acct, err := as.CreateAccount(ctx, name, credits.Whole(grant))
		if err != nil {
			t.Fatal(err)
		}
		key, _, err := as.CreateKey(ctx, acct.ID, accounts.PayAsYouGo)
		if err != nil {
			t.Fatal(err)
		}
		return key
	}
	keyA, keyB := newKey("replicas big account", 400_000), newKey("replicas small account", 100)

	// 5 ms a website check: a shard of 1,000 rows holds its worker for
	// seconds, A's 300 shards for far longer than the test.
	webs := [2]*slowWeb{}
	var replicas [2]*restartProc
	for i := range replicas {
		webs[i] = &slowWeb{delay: 5 * time.Millisecond, hits: map[string]int{}}
		ps := httptest.NewServer(webs[i])
		t.Cleanup(ps.Close)
		replicas[i] = restartServe(t, bin, bulkdtest.FreeAddr(t), "--redis-url", srv.URL, "--workers", "2",
			"--shard-size", "1000", "--lease-ttl", "2s", "--redirect-checks=true", "--http-proxy", ps.URL,
			"--instance-id", fmt.Sprintf("fair-r%d", i+1), "--rate-limit", "1000", "--log-format", "text", "--log-level", "warn")
	}
	r1, r2 := restartAPI(t, replicas[0]), restartAPI(t, replicas[1])

	t.Logf("built bulkd and started two replicas in %s", time.Since(tStart).Round(time.Millisecond))
	tSubmit := time.Now()
	var bigJobs []string
	for j := 0; j < 3; j++ {
		rows := make([]companyapi.Row, 100_000)
		for i := range rows {
			rows[i] = companyapi.Domain(fmt.Sprintf("a-%d-%d.example", j, i))
		}
		sub := r1.Submit(keyA, rows)
		if sub.TotalRows != 100_000 {
			t.Fatalf("A's job %d: %+v", j, sub)
		}
		bigJobs = append(bigJobs, sub.JobID)
	}

	t.Logf("A's 3 x 100,000 rows submitted in %s", time.Since(tSubmit).Round(time.Millisecond))
	// Both replicas busy with A: replica 2 found A's shards on its own
	// (its resume pass) and runs them through its own website proxy.
	waitFor(t, 30*time.Second, "both replicas running A's shards", func() bool {
		return webs[0].count("a") > 0 && webs[1].count("a") > 0
	})

	small := []companyapi.Row{}
	for i := 0; i < 5; i++ {
		small = append(small, companyapi.Domain(fmt.Sprintf("b-%d.example", i)))
	}
	t0 := time.Now()
	sub := r2.Submit(keyB, small)
	st := r2.Wait(keyB, sub.JobID, 15*time.Second)
	took := time.Since(t0)
	if st.TotalProcessed != 5 {
		t.Fatalf("B's job: %+v", st)
	}
	t.Logf("B's 5 rows completed %s after submission; A's rows checked so far: replica 1 %d, replica 2 %d",
		took.Round(time.Millisecond), webs[0].count("a"), webs[1].count("a"))
	if took > 15*time.Second {
		t.Fatalf("B's job took %s behind A's 300,000 rows, want <= 15s", took)
	}

	// A is still running, on both replicas: B did not get its turn by A's
	// work being over, or stopped.
	var processed int64
	for _, id := range bigJobs {
		code, st := r1.Status(keyA, id)
		if code != http.StatusOK {
			t.Fatalf("A's job %s: status %d", id, code)
		}
		if st.Status == "completed" || st.Status == "failed" {
			t.Fatalf("A's job %s already %s: the test proves nothing", id, st.Status)
		}
		processed += st.TotalProcessed
	}
	if processed >= 300_000 {
		t.Fatalf("A's rows all processed (%d)", processed)
	}
	b, _ := json.Marshal(map[string]any{"a_processed": processed, "b_took_ms": took.Milliseconds()})
	t.Logf("%s", b)
}

// waitFor polls ok every 100 ms until it holds, or fails the test after d.
func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
