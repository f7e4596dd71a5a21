package e2e

// Failure injection for company submissions (SPEC section 3: a submission
// rejected or failed by infrastructure creates no job and reverses any
// upfront charge; section 7: a 500 refunds what was deducted before it).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/company"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/jobs"
)

const refundSubmitPath = "/v1/company-enrichment/bulk"

// refundBody is a small realistic submission: 3 distinct inputs (one of
// them written twice), one invalid row. It costs 3 credits.
var refundBody = map[string]any{"input": []map[string]any{
	{"network_url": "https://www.linkedin.com/company/northwind-traders"},
	{"domain": "northwind.example"},
	{"network_url": "linkedin.com/company/northwind-traders/about"},
	{"domain": "nobody.example"},
	{"network_url": "https://www.linkedin.com/in/some-person"},
}}

const refundCharge = 3

type refundEnv struct {
	*bulkdtest.Env
	acct, key string
	opening   credits.Amount
}

func refundStart(t *testing.T) *refundEnv {
	t.Helper()
	env := bulkdtest.Start(t)
	env.PutCompanies(company.Record{Name: new("Northwind Traders"),
		NetworkURL: new("https://www.linkedin.com/company/northwind-traders"),
		Website:    new("https://www.northwind.example"), Domain: new("northwind.example")})
	opening := credits.Whole(50)
	acct, key := env.Account(opening)
	return &refundEnv{Env: env, acct: acct, key: key, opening: opening}
}

// wantInternal checks a 500 with the generic detail (nothing about the
// cause leaks) and no job id.
func refundWantInternal(t *testing.T, r bulkdtest.Response) {
	t.Helper()
	if r.Status != http.StatusInternalServerError {
		t.Fatalf("status %d, want 500: %s", r.Status, r.Body)
	}
	var body map[string]any
	if err := json.Unmarshal(r.Body, &body); err != nil {
		t.Fatalf("500 body %s: %v", r.Body, err)
	}
	if body["detail"] != apierr.ErrInternal.Detail {
		t.Errorf("detail %q, want the generic %q", body["detail"], apierr.ErrInternal.Detail)
	}
	if _, ok := body["job_id"]; ok || len(body) != 1 {
		t.Errorf("500 body %s, want only the detail", r.Body)
	}
}

func (e *refundEnv) ledger(t *testing.T) []billing.Entry {
	t.Helper()
	es, err := e.Parts.API.Billing.Entries(context.Background(), e.acct, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// jobKeys scans every key of every job.
func (e *refundEnv) jobKeys(t *testing.T) []string {
	t.Helper()
	var out []string
	iter := e.Redis.Scan(context.Background(), 0, "bulkd:job:*", 100).Iterator()
	for iter.Next(context.Background()) {
		out = append(out, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkRolledBack checks that nothing of a failed submission remains: the
// balance is exactly the opening one, no job key is left (a worker that
// had picked a shard up may hold its lease for a moment), no job is
// active, no submission mark is pending, and the ledger shows either
// nothing or the charge followed by its refund. It returns the job id the
// ledger names ("" when nothing was charged).
func (e *refundEnv) checkRolledBack(t *testing.T, charged bool) string {
	t.Helper()
	ctx := context.Background()
	if bal := e.Balance(e.acct); bal != e.opening {
		t.Errorf("balance %s, want %s unchanged", bal, e.opening)
	}
	deadline := time.Now().Add(5 * time.Second)
	for keys := e.jobKeys(t); len(keys) > 0; keys = e.jobKeys(t) {
		if time.Now().After(deadline) {
			t.Errorf("job keys left in Redis: %v", keys)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := e.Redis.SCard(ctx, "bulkd:jobs:active").Val(); n != 0 {
		t.Errorf("%d jobs left in the active set", n)
	}
	if n := e.Redis.ZCard(ctx, "bulkd:{jobs}:pending").Val(); n != 0 {
		t.Errorf("%d submission marks left pending: %v", n, e.Redis.ZRange(ctx, "bulkd:{jobs}:pending", 0, -1).Val())
	}
	es := e.ledger(t)
	if !charged {
		if len(es) != 0 {
			t.Errorf("ledger %+v, want no movement", es)
		}
		return ""
	}
	want := fmt.Sprint(refundCharge)
	if len(es) != 2 || es[0].Kind != billing.KindCharge || es[1].Kind != billing.KindRefund ||
		es[0].JobID == "" || es[0].JobID != es[1].JobID || es[0].Amount != "-"+want || es[1].Amount != want ||
		es[1].After != e.opening.String() {
		t.Errorf("ledger %+v, want a charge of %s followed by its refund", es, want)
		return ""
	}
	return es[0].JobID
}

// checkStillWorks submits the same body cleanly afterwards: the account
// and the engine are not wedged, and the charge is exactly the job's.
func (e *refundEnv) checkStillWorks(t *testing.T) {
	t.Helper()
	r := e.PostJSON(refundSubmitPath, e.key, refundBody)
	if r.Status != http.StatusOK {
		t.Fatalf("clean submission after the failure: %d %s", r.Status, r.Body)
	}
	var sub struct {
		JobID           string  `json:"job_id"`
		CreditsConsumed float64 `json:"credits_consumed"`
	}
	r.Decode(t, &sub)
	st := e.WaitFor(refundSubmitPath+"/"+sub.JobID, e.key, 10*time.Second)
	if st["total_processed"] != float64(5) || sub.CreditsConsumed != refundCharge {
		t.Errorf("clean job: %v, credits %v", st, sub.CreditsConsumed)
	}
	if bal := e.Balance(e.acct); bal != e.opening-credits.Whole(refundCharge) {
		t.Errorf("balance %s after a clean job", bal)
	}
}

func TestRefundFailpointAtEachStep(t *testing.T) {
	steps := []struct {
		step    string
		charged bool // the charge had been taken when the step failed
	}{
		{jobs.StepMark, false},
		{jobs.StepCharge, false},
		{jobs.StepStore, true},
		{jobs.StepEnqueue, true},
		{jobs.StepCommit, true},
	}
	for _, s := range steps {
		t.Run(s.step, func(t *testing.T) {
			e := refundStart(t)
			var fired atomic.Int32
			e.Parts.Engine.SetFailpoint(func(step string) error {
				if step == s.step && fired.Add(1) == 1 {
					return errors.New("injected failure at " + step)
				}
				return nil
			})
			r := e.PostJSON(refundSubmitPath, e.key, refundBody)
			refundWantInternal(t, r)
			if fired.Load() != 1 {
				t.Fatalf("failpoint %s fired %d times", s.step, fired.Load())
			}
			if id := e.checkRolledBack(t, s.charged); id != "" {
				if g := e.Get(refundSubmitPath+"/"+id, e.key); g.Status != http.StatusNotFound {
					t.Errorf("status of the rolled-back job: %d %s", g.Status, g.Body)
				}
			}
			e.checkStillWorks(t)
		})
	}
}

// redisFault is a go-redis hook on the server's real connection that makes
// one chosen command (or MULTI/EXEC) fail once, either before it reaches
// Redis (a broken connection) or after Redis applied it (the reply was
// lost: the write happened but the caller sees an error).
type redisFault struct {
	armed     atomic.Bool
	afterSend bool // apply, then report an error
	match     func(args []any) bool
	tx        bool // match a MULTI/EXEC block, not a single command
	fired     atomic.Int32
}

var errConnReset = errors.New("read tcp 127.0.0.1:40000->127.0.0.1:6380: read: connection reset by peer")

func (f *redisFault) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *redisFault) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if f.tx || !f.match(cmd.Args()) {
			return next(ctx, cmd)
		}
		if f.afterSend {
			// Only a command Redis applied loses its reply (a NOSCRIPT
			// answer to EVALSHA, retried as EVAL, does not count).
			if err := next(ctx, cmd); err != nil || !f.armed.CompareAndSwap(true, false) {
				return err
			}
		} else if !f.armed.CompareAndSwap(true, false) {
			return next(ctx, cmd)
		}
		f.fired.Add(1)
		cmd.SetErr(errConnReset)
		return errConnReset
	}
}

func (f *redisFault) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !f.tx || len(cmds) == 0 || cmds[0].Name() != "multi" {
			return next(ctx, cmds)
		}
		hit := false
		for _, c := range cmds {
			hit = hit || f.match(c.Args())
		}
		if !hit {
			return next(ctx, cmds)
		}
		if f.afterSend {
			if err := next(ctx, cmds); err != nil || !f.armed.CompareAndSwap(true, false) {
				return err
			}
		} else if !f.armed.CompareAndSwap(true, false) {
			return next(ctx, cmds)
		}
		f.fired.Add(1)
		for _, c := range cmds {
			c.SetErr(errConnReset)
		}
		return errConnReset
	}
}

func argString(args []any, i int) string {
	if i >= len(args) {
		return ""
	}
	s, _ := args[i].(string)
	return s
}

// isJobMetaHSet matches the HSET of a job's metadata hash (the store
// transaction writes it first).
func isJobMetaHSet(args []any) bool {
	k := argString(args, 1)
	return strings.EqualFold(argString(args, 0), "hset") && strings.HasPrefix(k, "bulkd:job:{") && strings.HasSuffix(k, "}")
}

// isScriptOn matches a billing script run by its key count, keys and
// argument count: the charge script takes 6 arguments, the reverse one 4.
func isScriptOn(nargs int) func(args []any) bool {
	return func(args []any) bool {
		name := strings.ToLower(argString(args, 0))
		if name != "evalsha" && name != "eval" {
			return false
		}
		return len(args) == 3+3+nargs && strings.HasSuffix(argString(args, 5), ":ledger")
	}
}

func TestRefundRedisFailures(t *testing.T) {
	cases := []struct {
		name    string
		fault   *redisFault
		charged bool
	}{
		// The job-store MULTI/EXEC breaks on the wire after the charge.
		{"store tx connection reset", &redisFault{tx: true, match: isJobMetaHSet}, true},
		// The job-store MULTI/EXEC is applied but its reply is lost: the
		// job's keys exist and must be deleted by the rollback.
		{"store tx reply lost", &redisFault{tx: true, afterSend: true, match: isJobMetaHSet}, true},
		// The charge script is applied but its reply is lost: the engine
		// cannot tell, so it must reverse the charge it may have taken.
		{"charge reply lost", &redisFault{afterSend: true, match: isScriptOn(6)}, true},
		// The charge script never reaches Redis: nothing to reverse.
		{"charge connection reset", &redisFault{match: isScriptOn(6)}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := refundStart(t)
			e.Redis.AddHook(c.fault)
			c.fault.armed.Store(true)
			r := e.PostJSON(refundSubmitPath, e.key, refundBody)
			refundWantInternal(t, r)
			if c.fault.fired.Load() != 1 {
				t.Fatalf("fault fired %d times", c.fault.fired.Load())
			}
			e.checkRolledBack(t, c.charged)
			e.checkStillWorks(t)
		})
	}
}

// The refund itself fails during the rollback: the submission still
// answers 500, its mark stays, and the janitor finishes the rollback.
func TestRefundRollbackFinishedByJanitor(t *testing.T) {
	e := refundStart(t)
	ctx := context.Background()
	reverseFault := &redisFault{match: isScriptOn(4)}
	e.Redis.AddHook(reverseFault)
	reverseFault.armed.Store(true)
	e.Parts.Engine.SetFailpoint(func(step string) error {
		if step == jobs.StepCommit {
			return errors.New("injected failure at commit")
		}
		return nil
	})
	r := e.PostJSON(refundSubmitPath, e.key, refundBody)
	refundWantInternal(t, r)
	if reverseFault.fired.Load() != 1 {
		t.Fatalf("reverse fault fired %d times", reverseFault.fired.Load())
	}
	e.Parts.Engine.SetFailpoint(nil)
	if bal := e.Balance(e.acct); bal != e.opening-credits.Whole(refundCharge) {
		t.Fatalf("balance %s: the refund failed, the charge should still be held", bal)
	}
	if n := e.Redis.ZCard(ctx, "bulkd:{jobs}:pending").Val(); n != 1 {
		t.Fatalf("%d pending marks, want the incomplete rollback's mark kept", n)
	}
	n, err := e.Parts.Engine.ReclaimAbandoned(ctx, 0)
	if err != nil || n != 1 {
		t.Fatalf("janitor: %d, %v", n, err)
	}
	e.checkRolledBack(t, true)
	e.checkStillWorks(t)
}

// refundPost sends a submission from another goroutine (no t.Fatal there).
func refundPost(url, key string) <-chan bulkdtest.Response {
	ch := make(chan bulkdtest.Response, 1)
	go func() {
		b, _ := json.Marshal(refundBody)
		req, _ := http.NewRequest(http.MethodPost, url+refundSubmitPath, bytes.NewReader(b))
		req.Header.Set("X-API-Key", key)
		req.Header.Set("Content-Type", "application/json")
		res, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			ch <- bulkdtest.Response{Status: -1, Body: []byte(err.Error())}
			return
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		ch <- bulkdtest.Response{Status: res.StatusCode, Header: res.Header, Body: body}
	}()
	return ch
}

// The crash: a process stops between the charge and the commit (here it
// hangs at the commit step, its job stored and already being processed).
// The janitor leaves a young submission alone, reclaims it once it is old
// enough: the charge is reversed, the job's data and mark are gone. When
// the hung process wakes up, its commit finds the mark gone: it answers 500
// and refunds nothing a second time. A committed job is never reclaimed.
func TestRefundAbandonedSubmissionReclaimed(t *testing.T) {
	e := refundStart(t)
	ctx := context.Background()

	// A committed job first: the janitor must never touch it.
	ok := e.PostJSON(refundSubmitPath, e.key, refundBody)
	if ok.Status != http.StatusOK {
		t.Fatalf("clean submission: %d %s", ok.Status, ok.Body)
	}
	var committed struct {
		JobID string `json:"job_id"`
	}
	ok.Decode(t, &committed)

	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.Parts.Engine.SetFailpoint(func(step string) error {
		if step == jobs.StepCommit {
			once.Do(func() { close(reached) })
			<-release
		}
		return nil
	})
	resp := refundPost(e.URL, e.key)
	select {
	case <-reached:
	case r := <-resp:
		t.Fatalf("submission returned before the commit step: %d %s", r.Status, r.Body)
	case <-time.After(10 * time.Second):
		t.Fatal("submission never reached the commit step")
	}
	afterCommitted := e.opening - credits.Whole(refundCharge)
	if bal := e.Balance(e.acct); bal != afterCommitted-credits.Whole(refundCharge) {
		t.Fatalf("balance %s while the submission hangs, want both charges taken", bal)
	}
	if n := e.Redis.ZCard(ctx, "bulkd:{jobs}:pending").Val(); n != 1 {
		t.Fatalf("%d pending marks while the submission hangs, want 1", n)
	}
	es := e.ledger(t)
	hung := es[len(es)-1].JobID
	if hung == committed.JobID || es[len(es)-1].Kind != billing.KindCharge {
		t.Fatalf("ledger %+v", es)
	}

	// The janitor's own threshold leaves a young submission alone.
	if n, err := e.Parts.Engine.ReclaimAbandoned(ctx, 2*time.Minute); err != nil || n != 0 {
		t.Fatalf("janitor on a young submission: %d, %v", n, err)
	}
	n, err := e.Parts.Engine.ReclaimAbandoned(ctx, 0)
	if err != nil || n != 1 {
		t.Fatalf("janitor: %d, %v", n, err)
	}
	if bal := e.Balance(e.acct); bal != afterCommitted {
		t.Errorf("balance %s after the reclaim, want %s", bal, afterCommitted)
	}
	if n := e.Redis.ZCard(ctx, "bulkd:{jobs}:pending").Val(); n != 0 {
		t.Errorf("%d pending marks after the reclaim", n)
	}
	checkGone := func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			var left []string
			for _, k := range e.jobKeys(t) {
				if strings.Contains(k, hung) {
					left = append(left, k)
				}
			}
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("keys of the reclaimed job left: %v", left)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if e.Redis.SIsMember(ctx, "bulkd:jobs:active", hung).Val() {
			t.Error("reclaimed job still active")
		}
		if g := e.Get(refundSubmitPath+"/"+hung, e.key); g.Status != http.StatusNotFound {
			t.Errorf("status of the reclaimed job: %d %s", g.Status, g.Body)
		}
	}
	checkGone()

	// The hung process wakes up and tries to commit.
	close(release)
	select {
	case r := <-resp:
		refundWantInternal(t, r)
	case <-time.After(10 * time.Second):
		t.Fatal("submission did not return after its failpoint was released")
	}
	e.Parts.Engine.SetFailpoint(nil)
	checkGone()
	if bal := e.Balance(e.acct); bal != afterCommitted {
		t.Errorf("balance %s after the woken submission, want %s (no second refund)", bal, afterCommitted)
	}
	var moves []string
	for _, en := range e.ledger(t) {
		moves = append(moves, en.Kind+" "+en.JobID+" "+en.Amount)
	}
	want := []string{
		"charge " + committed.JobID + " -3",
		"charge " + hung + " -3",
		"refund " + hung + " 3",
	}
	if strings.Join(moves, "\n") != strings.Join(want, "\n") {
		t.Errorf("ledger\n%s\nwant\n%s", strings.Join(moves, "\n"), strings.Join(want, "\n"))
	}

	// The committed job is untouched and completes, charged once.
	if n, err := e.Parts.Engine.ReclaimAbandoned(ctx, 0); err != nil || n != 0 {
		t.Errorf("janitor after everything: %d, %v", n, err)
	}
	st := e.WaitFor(refundSubmitPath+"/"+committed.JobID, e.key, 10*time.Second)
	if st["total_processed"] != float64(5) || st["total_rows"] != float64(5) {
		t.Errorf("committed job: %v", st)
	}
}
