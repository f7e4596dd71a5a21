// Package privacy_test proves docs/privacy.md on a whole standalone bulkd
// (real Redis, real DNS and SMTP servers on loopback): a person's address
// and name, submitted in jobs of every family, are found zero times in
// every Redis key and value and in every log line after the job is
// deleted, after it expires, and after the person is erased.
package privacy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/admin"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/internal/serve"
	proof "github.com/bulkd/bulkd/test/privacy"
)

// The marker person. Their address, name and the domain of their mail.
const (
	markerFirst  = "Zelda"
	markerLast   = "Quistorpova"
	markerDomain = "privtest.example"
	markerEmail  = "zelda.quistorpova@privtest.example"
	secret       = "test-privacy-secret"
)

// markers are what must not be found: the address, the local part and the
// last name (case-folded).
var markers = []string{"zelda.quistorpova", "quistorpova"}

type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func world(t *testing.T) *mailworld.World {
	t.Helper()
	spec := mailworld.Spec{
		Hosts: []mailworld.Host{{Name: "mx.privtest.example"}},
		Domains: []mailworld.Domain{{Name: markerDomain, DNS: mailworld.DNSMX, MX: []string{"mx.privtest.example"},
			Users: []string{"zelda.quistorpova", "john.smith", "anna.berg"}}},
	}
	w, err := mailworld.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func start(t *testing.T, logs *logBuf, opts ...bulkdtest.Option) *bulkdtest.Env {
	t.Helper()
	return startIn(t, logs, world(t), opts...)
}

// startIn starts bulkd against the mail world w.
func startIn(t *testing.T, logs *logBuf, w *mailworld.World, opts ...bulkdtest.Option) *bulkdtest.Env {
	t.Helper()
	bulkdtest.LogTo = logs
	t.Cleanup(func() { bulkdtest.LogTo = nil })
	opts = append([]bulkdtest.Option{bulkdtest.WithMailWorld(w), bulkdtest.WithConfig(func(c *config.Config) {
		c.PrivacySecret = secret
		c.VerifyRetryDelays = "" // no greylisting here: answers are final
		c.RateLimit = 100000     // the test polls
	})}, opts...)
	return bulkdtest.Start(t, opts...)
}

// scan reads every key and every value in Redis (every type) and the
// logs, and fails for each marker found.
func scan(t *testing.T, env *bulkdtest.Env, logs *logBuf, after string) {
	t.Helper()
	f := &proof.Finder{Markers: markers}
	keys, err := proof.ScanRedis(context.Background(), env.Redis, f)
	if err != nil {
		t.Fatal(err)
	}
	f.Check("the logs", logs.String())
	for i, where := range f.Found {
		if i < 5 {
			t.Errorf("after %s: marker found in %s", after, where)
		}
	}
	t.Logf("after %s: %d keys and %d bytes of logs scanned, marker found %d times", after, keys, len(logs.String()), len(f.Found))
}

func toString(v any) string {
	s, _ := v.(string)
	return s
}

// submissions of every family, each naming the marker.
type submission struct {
	path string
	body any
}

func markerJobs() []submission {
	return []submission{
		{"/v1/bulk", map[string]any{"emails": []string{markerEmail, "john.smith@" + markerDomain, "anna.berg@" + markerDomain}}},
		{"/v1/bulk-lookup", map[string]any{"input": []map[string]string{
			{"first_name": markerFirst, "last_name": markerLast, "domain": markerDomain},
			{"first_name": "John", "last_name": "Smith", "domain": markerDomain}}}},
		{"/v1/company-enrichment/bulk", map[string]any{"input": []map[string]string{
			{"network_url": "https://www.linkedin.com/company/zelda-quistorpova-consulting"}, {"domain": "example.com"}}}},
	}
}

func submit(t *testing.T, env *bulkdtest.Env, key string, s submission) string {
	t.Helper()
	r := env.PostJSON(s.path, key, s.body)
	if r.Status != http.StatusOK {
		t.Fatalf("POST %s: %d %s", s.path, r.Status, r.Body)
	}
	var out struct {
		JobID string `json:"job_id"`
	}
	r.Decode(t, &out)
	return out.JobID
}

func waitDone(t *testing.T, env *bulkdtest.Env, key, path, id string) {
	t.Helper()
	bulkdtest.Eventually(t, 60*time.Second, 50*time.Millisecond, "job "+id+" done", func() bool {
		r := env.Get(path+"/"+id, key)
		var st struct {
			Status string `json:"status"`
		}
		_ = json.Unmarshal(r.Body, &st)
		return st.Status == "completed" || st.Status == "complete"
	})
}

func reconcile(t *testing.T, env *bulkdtest.Env, accounts ...string) {
	t.Helper()
	for _, a := range accounts {
		rec, err := env.Parts.Engine.Billing.Reconcile(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		if err := rec.Err(); err != nil {
			t.Errorf("account %s: ledger and balance disagree: %v", a, err)
		}
	}
}

type deleted struct {
	JobID           string   `json:"job_id"`
	Status          string   `json:"status"`
	PreviousStatus  string   `json:"previous_status"`
	TotalRows       int64    `json:"total_rows"`
	Unprocessed     int64    `json:"unprocessed_inputs"`
	CreditsRefunded float64  `json:"credits_refunded"`
	Removed         []string `json:"removed"`
}

func del(t *testing.T, env *bulkdtest.Env, key, path, id string) deleted {
	t.Helper()
	r := env.Do(http.MethodDelete, path+"/"+id, key, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("DELETE %s/%s: %d %s", path, id, r.Status, r.Body)
	}
	var d deleted
	r.Decode(t, &d)
	return d
}

// TestDeleteLeavesNothing: jobs of every family, one stopped before any
// row was processed and the others completed, are deleted; the marker is
// gone from Redis and the logs, each deleted job answers 404, the one
// stopped early is refunded exactly what it was charged, the ledgers match
// the balances and another account's job is untouched.
func TestDeleteLeavesNothing(t *testing.T) {
	logs := &logBuf{}
	env := start(t, logs, bulkdtest.NoWorkers())
	acct, key := env.Account(credits.Whole(100))
	other, otherKey := env.Account(credits.Whole(100))
	otherJob := submit(t, env, otherKey, submission{"/v1/bulk", map[string]any{"emails": []string{"john.smith@" + markerDomain}}})

	// Stopped before it ran: every input refunded.
	before := env.Balance(acct)
	early := submit(t, env, key, markerJobs()[0])
	charged := before - env.Balance(acct)
	d := del(t, env, key, "/v1/bulk", early)
	if d.Status != "deleted" || d.Unprocessed != 3 || d.CreditsRefunded != float64(charged)/credits.Scale {
		t.Fatalf("delete of a job not started: %+v, charged %s", d, charged)
	}
	if got := env.Balance(acct); got != before {
		t.Fatalf("balance after deleting a job not started: %s, want %s", got, before)
	}

	env.StartWorkers()
	ids := map[string]string{}
	for _, s := range markerJobs() {
		id := submit(t, env, key, s)
		ids[id] = s.path
		waitDone(t, env, key, s.path, id)
		if r := env.Get(s.path+"/"+id+"/results", key); r.Status != http.StatusOK { // fills the row cache
			t.Fatalf("results: %d %s", r.Status, r.Body)
		}
	}
	waitDone(t, env, otherKey, "/v1/bulk", otherJob)
	// Another key of the same account cannot delete them.
	key2 := env.Key(acct, accounts.PayAsYouGo)
	for id, path := range ids {
		if r := env.Do(http.MethodDelete, path+"/"+id, key2, nil); r.Status != http.StatusNotFound {
			t.Fatalf("DELETE with another key: %d %s", r.Status, r.Body)
		}
	}
	for id, path := range ids {
		start := time.Now()
		d := del(t, env, key, path, id)
		t.Logf("DELETE %s: %+v in %s", path, d, time.Since(start))
		for _, p := range []string{path + "/" + id, path + "/" + id + "/results"} {
			if r := env.Get(p, key); r.Status != http.StatusNotFound {
				t.Fatalf("GET %s after delete: %d %s", p, r.Status, r.Body)
			}
		}
		if r := env.Do(http.MethodDelete, path+"/"+id, key, nil); r.Status != http.StatusNotFound {
			t.Fatalf("second DELETE: %d %s", r.Status, r.Body)
		}
	}
	scan(t, env, logs, "delete")
	reconcile(t, env, acct, other)
	if r := env.Get("/v1/bulk/"+otherJob+"/results", otherKey); r.Status != http.StatusOK || !bytes.Contains(r.Body, []byte("john.smith@")) {
		t.Fatalf("the other account's job: %d %s", r.Status, r.Body)
	}
}

// TestExpiryLeavesNothing: jobs kept for 2 s are gone, with every key
// naming the marker, once their retention ends.
func TestExpiryLeavesNothing(t *testing.T) {
	logs := &logBuf{}
	env := start(t, logs)
	_, key := env.Account(credits.Whole(100))
	env.Parts.Engine.Retention = 3 * time.Second
	for _, s := range markerJobs() {
		id := submit(t, env, key, s)
		waitDone(t, env, key, s.path, id)
		bulkdtest.Eventually(t, 10*time.Second, 100*time.Millisecond, "job expired", func() bool {
			return env.Get(s.path+"/"+id, key).Status == http.StatusNotFound
		})
	}
	scan(t, env, logs, "expiry")
}

// TestEraseLeavesNothing: the marker's address and name, in jobs of two
// accounts, are erased by `bulkd admin erase`; their rows answer
// suppressed in place, the other rows are untouched, the finder forgot
// the pattern it learned from the address alone, a new submission of the
// address answers suppressed without being charged, and the audit log
// holds the erasure as hashes only.
func TestEraseLeavesNothing(t *testing.T) {
	logs := &logBuf{}
	env := start(t, logs)
	ctx := context.Background()
	a, keyA := env.Account(credits.Whole(100))
	b, keyB := env.Account(credits.Whole(100))
	type job struct{ key, path, id string }
	var js []job
	for _, s := range markerJobs()[:2] { // the families whose inputs name people
		id := submit(t, env, keyA, s)
		waitDone(t, env, keyA, s.path, id)
		js = append(js, job{keyA, s.path, id})
		_ = env.Get(s.path+"/"+id+"/results", keyA) // cached rows too
	}
	idB := submit(t, env, keyB, submission{"/v1/bulk", map[string]any{"emails": []string{"ZELDA.Quistorpova@privtest.example", "anna.berg@" + markerDomain}}})
	waitDone(t, env, keyB, "/v1/bulk", idB)
	js = append(js, job{keyB, "/v1/bulk", idB})
	if n, _ := env.Redis.Exists(ctx, "bulkd:finder:pattern:"+markerDomain).Result(); n != 1 {
		t.Log("note: no pattern learned for the domain")
	}

	run := func(args ...string) string {
		var out, errb bytes.Buffer
		aenv := admin.Env{Stdout: &out, Stderr: &errb, Now: time.Now, Extra: serve.AdminCommands()}
		t.Setenv(config.EnvName("privacy-secret"), secret)
		if err := admin.Run(ctx, env.Redis, aenv, args); err != nil {
			t.Fatalf("bulkd admin %v: %v (%s)", args, err, errb.String())
		}
		logs.Write(errb.Bytes()) // the admin's own diagnostics are logs too
		return out.String()
	}
	startErase := time.Now()
	rep := run("erase", "--email", markerEmail, "--actor", "dpo@test")
	t.Logf("erase --email: %s in %s", strings.TrimSpace(rep), time.Since(startErase))
	rep = run("erase", "--name", markerFirst, markerLast, "--domain", markerDomain, "--actor", "dpo@test")
	t.Logf("erase --name: %s", strings.TrimSpace(rep))

	scan(t, env, logs, "erase")
	for _, j := range js {
		r := env.Get(j.path+"/"+j.id+"/results", j.key)
		if r.Status != http.StatusOK || !bytes.Contains(r.Body, []byte(`"suppressed"`)) {
			t.Fatalf("results of %s after erase: %d %s", j.path, r.Status, r.Body)
		}
		if !bytes.Contains(r.Body, []byte("@"+markerDomain)) && !bytes.Contains(r.Body, []byte("Smith")) {
			t.Fatalf("the other rows of %s are gone: %s", j.path, r.Body)
		}
	}
	if m, _ := env.Redis.HGetAll(ctx, "bulkd:finder:pattern:"+markerDomain).Result(); len(m) > 0 {
		for f, v := range m {
			t.Logf("pattern left for the domain: %s=%s", f, v)
		}
	}

	// Submitted again: suppressed, not charged, never processed.
	before := env.Balance(a)
	id := submit(t, env, keyA, submission{"/v1/bulk", map[string]any{"emails": []string{markerEmail, "john.smith@" + markerDomain}}})
	if paid := before - env.Balance(a); paid != credits.Amount(credits.Scale/5) {
		t.Fatalf("a submission naming a suppressed address paid %s, want 0.2 (the other address only)", paid)
	}
	waitDone(t, env, keyA, "/v1/bulk", id)
	r := env.Get("/v1/bulk/"+id+"/results", keyA)
	if !bytes.Contains(r.Body, []byte(`"status":"suppressed"`)) {
		t.Fatalf("the suppressed address's row: %s", r.Body)
	}
	lookupID := submit(t, env, keyA, markerJobs()[1])
	waitDone(t, env, keyA, "/v1/bulk-lookup", lookupID)
	scan(t, env, logs, "a suppressed submission")
	reconcile(t, env, a, b)

	var audit []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(run("privacy", "audit")), "\n") {
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatal(err)
		}
		audit = append(audit, e)
	}
	if len(audit) != 2 || audit[0]["action"] != "erase" || audit[0]["actor"] != "dpo@test" || len(toString(audit[0]["subject"])) != 64 {
		t.Fatalf("audit log: %v", audit)
	}
}

// TestDeleteLargeJob: a 100,000-row job, queued and not started, is gone
// (every key, its refund paid) within 5 s of the DELETE's answer; in
// fact the answer comes after the keys are gone.
func TestDeleteLargeJob(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 rows")
	}
	logs := &logBuf{}
	env := start(t, logs, bulkdtest.NoWorkers())
	acct, key := env.Account(credits.Whole(100000))
	emails := make([]string, 100000)
	for i := range emails {
		emails[i] = "person" + strconv.Itoa(i) + "@" + markerDomain
	}
	emails[0] = markerEmail
	before := env.Balance(acct)
	id := submit(t, env, key, submission{"/v1/bulk", map[string]any{"emails": emails}})
	start := time.Now()
	d := del(t, env, key, "/v1/bulk", id)
	took := time.Since(start)
	t.Logf("DELETE of a 100,000-row job: %s (unprocessed %d, refunded %v)", took, d.Unprocessed, d.CreditsRefunded)
	if took > 5*time.Second {
		t.Errorf("the DELETE took %s, want under 5 s", took)
	}
	if env.Balance(acct) != before {
		t.Fatalf("balance %s after deleting, want %s", env.Balance(acct), before)
	}
	n := 0
	iter := env.Redis.Scan(context.Background(), 0, "bulkd:job:{"+id+"}*", 1000).Iterator()
	for iter.Next(context.Background()) {
		n++
	}
	if n != 0 {
		t.Fatalf("%d keys of the job left", n)
	}
	scan(t, env, logs, "deleting a 100,000-row job")
	reconcile(t, env, acct)
}

// TestAccountRetention: an account's retention (bulkd admin account
// retention) sets its new jobs' expiry, never past the deployment's.
func TestAccountRetention(t *testing.T) {
	env := start(t, &logBuf{}, bulkdtest.NoWorkers(), bulkdtest.WithConfig(func(c *config.Config) { c.Retention = 10 * 24 * time.Hour }))
	ctx := context.Background()
	acct, key := env.Account(credits.Whole(100))
	run := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		err := admin.Run(ctx, env.Redis, admin.Env{Stdout: &out, Stderr: &errb, Now: time.Now}, args)
		return strings.TrimSpace(out.String()), err
	}
	ttl := func() time.Duration {
		id := submit(t, env, key, submission{"/v1/bulk", map[string]any{"emails": []string{"john.smith@" + markerDomain}}})
		d, err := env.Redis.PTTL(ctx, "bulkd:job:{"+id+"}").Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	near := func(got, want time.Duration) bool { return got > want-time.Minute && got <= want }
	if out, err := run("account", "retention", acct); err != nil || out != "default" {
		t.Fatalf("retention of a new account: %q %v", out, err)
	}
	if d := ttl(); !near(d, 10*24*time.Hour) {
		t.Fatalf("default retention: a job's TTL is %s", d)
	}
	if out, err := run("account", "retention", acct, "2"); err != nil || out != "2" {
		t.Fatalf("set 2 days: %q %v", out, err)
	}
	if d := ttl(); !near(d, 2*24*time.Hour) {
		t.Fatalf("2 days: a job's TTL is %s", d)
	}
	if _, err := run("account", "retention", acct, "31"); err == nil {
		t.Fatal("31 days accepted")
	}
	if out, err := run("account", "retention", acct, "20"); err != nil || out != "20" {
		t.Fatalf("set 20 days: %q %v", out, err)
	}
	if d := ttl(); !near(d, 10*24*time.Hour) { // the deployment's maximum wins
		t.Fatalf("20 days under a 10-day maximum: a job's TTL is %s", d)
	}
}

// TestEraseThroughput measures the erasure's scan: 10 stored jobs of
// 10,000 addresses each (100,000 rows), the marker in one of them.
func TestEraseThroughput(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 rows")
	}
	env := start(t, &logBuf{}, bulkdtest.NoWorkers())
	ctx := context.Background()
	_, key := env.Account(credits.Whole(100000))
	for j := 0; j < 10; j++ {
		emails := make([]string, 10000)
		for i := range emails {
			emails[i] = "person" + strconv.Itoa(j*10000+i) + "@" + markerDomain
		}
		if j == 7 {
			emails[5000] = markerEmail
		}
		submit(t, env, key, submission{"/v1/bulk", map[string]any{"emails": emails}})
	}
	var out, errb bytes.Buffer
	t.Setenv(config.EnvName("privacy-secret"), secret)
	start := time.Now()
	if err := admin.Run(ctx, env.Redis, admin.Env{Stdout: &out, Stderr: &errb, Now: time.Now, Extra: serve.AdminCommands()},
		[]string{"erase", "--email", markerEmail}); err != nil {
		t.Fatal(err, errb.String())
	}
	took := time.Since(start)
	t.Logf("erase over 10 jobs, 100,000 rows: %s (%.0f rows/s): %s", took, 100000/took.Seconds(), strings.TrimSpace(out.String()))
	var rep struct {
		Inputs int `json:"inputs_erased"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || rep.Inputs != 1 {
		t.Fatalf("report %s (%v)", out.String(), err)
	}
}
