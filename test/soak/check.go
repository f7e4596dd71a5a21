package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
)

// The proofs after the run: every accepted job finished, with one answered
// row per row submitted (no pending row, no row counted twice), the
// answers right for the worlds' truth, each job charged exactly what its
// submission said (verification: its unknown addresses refunded once), no
// job charged that no client was given, and every account's balance equal
// to its ledger.

// Checks is what the proofs found.
type Checks struct {
	Jobs, Rows            int64
	JobsByFamily          map[string]int64
	NotFinished           int64
	PendingRows           int64
	WrongRowCount         int64
	CounterMismatch       int64            // Redis counters that disagree with the answers (double counting)
	Wrong                 map[string]int64 // rows whose answer contradicts the world's truth, by family
	ErrorRows             map[string]int64 // rows answered "error" (company) or "unknown" with a processing error (verification)
	Missed                int64            // lookup: findable people not found (soft)
	ChargeMismatch        int64
	DuplicateJobIDs       int64
	Orphans               int64 // committed jobs no client was given: a second charge for one submission
	RollbacksPending      int64 // abandoned submissions the janitor had not rolled back yet
	UnexplainedCharges    int64 // ledger charges of jobs no client has, not reversed
	AccountsReconciled    int
	ReconcileFailures     int
	QuotaMismatch         int64
	Examples              []string
	MissedExamples        []string
	RefundedVerify        credits.Amount
	ChargedCredits        credits.Amount
	QuotaUnits            int64
	ReadErrors            int64
	LedgerEntries         int64
	PendingMarksAfter     int64
	ReclaimingMarksAfter  int64
	AnswersByOutcome      map[string]int64
	VerifyUnknownByReason map[string]int64
	mu                    sync.Mutex
}

func (c *Checks) example(format string, args ...any) {
	if len(c.Examples) < 25 {
		c.Examples = append(c.Examples, fmt.Sprintf(format, args...))
	}
}

func (r *runner) check(ctx context.Context, rep *Report) {
	c := &Checks{JobsByFamily: map[string]int64{}, Wrong: map[string]int64{}, ErrorRows: map[string]int64{},
		AnswersByOutcome: map[string]int64{}, VerifyUnknownByReason: map[string]int64{}}
	rep.Checks = c
	accepted := map[string]*job{}
	for _, j := range r.jobs {
		if prev, ok := accepted[j.id]; ok {
			if prev != j {
				c.DuplicateJobIDs++
				c.example("job %s was given to two logical submissions", j.id)
			}
			continue
		}
		accepted[j.id] = j
	}

	// Each key's jobs, read back through the API, keys in parallel (each
	// key within its own rate limit).
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, k := range r.keys {
		wg.Add(1)
		sem <- struct{}{}
		go func(k *keyClient) {
			defer wg.Done()
			defer func() { <-sem }()
			for _, j := range k.jobs {
				r.checkJob(ctx, c, j)
			}
		}(k)
	}
	wg.Wait()

	// Counters in Redis: each answer counted once.
	for _, j := range accepted {
		r.checkCounters(ctx, c, j)
	}
	r.checkLedgers(ctx, c, accepted)
	r.checkOrphans(ctx, c, accepted)
	c.PendingMarksAfter, _ = r.rdb.ZCard(ctx, "bulkd:jobs:pending").Result()
	c.ReclaimingMarksAfter, _ = r.rdb.ZCard(ctx, "bulkd:jobs:reclaiming").Result()
}

// get reads one API resource for a key, waiting out 429/503 and retrying
// connection errors, for at most a minute.
func (r *runner) get(ctx context.Context, k *keyClient, path string) (int, []byte) {
	deadline := time.Now().Add(time.Minute)
	for rep := k.home; ; rep = 1 - rep {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.reps[rep].base()+path, nil)
		req.Header.Set("X-API-Key", k.key)
		res, err := r.hc.Do(req)
		if err == nil {
			b, rerr := io.ReadAll(res.Body)
			res.Body.Close()
			switch {
			case rerr != nil:
			case res.StatusCode == http.StatusTooManyRequests || res.StatusCode == http.StatusServiceUnavailable:
				sleepCtx(ctx, retryAfter(res.Header))
				continue
			default:
				return res.StatusCode, b
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0, nil
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

func (r *runner) checkJob(ctx context.Context, c *Checks, j *job) {
	code, b := r.get(ctx, j.kc, j.fam.path+"/"+j.id)
	var st struct {
		Status string `json:"status"`
	}
	if code != http.StatusOK || json.Unmarshal(b, &st) != nil {
		c.mu.Lock()
		c.ReadErrors++
		c.example("status of %s job %s: %d %.200s", j.fam.name, j.id, code, b)
		c.mu.Unlock()
		return
	}
	var rows []map[string]any
	for off := 0; ; off += 500 {
		code, b := r.get(ctx, j.kc, fmt.Sprintf("%s/%s/results?limit=500&offset=%d", j.fam.path, j.id, off))
		var page struct {
			TotalRows int64            `json:"total_rows"`
			Results   []map[string]any `json:"results"`
		}
		if code != http.StatusOK || json.Unmarshal(b, &page) != nil {
			c.mu.Lock()
			c.ReadErrors++
			c.example("results of %s job %s at %d: %d %.200s", j.fam.name, j.id, off, code, b)
			c.mu.Unlock()
			return
		}
		rows = append(rows, page.Results...)
		if int64(off+500) >= page.TotalRows || len(page.Results) == 0 {
			break
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	c.Jobs++
	c.JobsByFamily[j.fam.name]++
	c.Rows += int64(len(rows))
	if st.Status != j.fam.completed {
		c.NotFinished++
		c.example("%s job %s: status %q after the drain", j.fam.name, j.id, st.Status)
	}
	want := 0
	switch j.fam.kind {
	case famCompany:
		want = len(j.company)
	case famVerify:
		want = len(j.verify)
	default:
		want = len(j.lookup)
	}
	if len(rows) != want || int64(want) != j.totalRows {
		c.WrongRowCount++
		c.example("%s job %s: %d result rows, submitted %d (total_rows %d)", j.fam.name, j.id, len(rows), want, j.totalRows)
		return
	}
	switch j.fam.kind {
	case famCompany:
		checkCompanyRows(c, j, rows)
	case famVerify:
		checkVerifyRows(c, j, rows)
	default:
		checkLookupRows(c, j, rows)
	}
}

// str is row's field k as a string ("" when absent).
func str(row map[string]any, k string) string { s, _ := row[k].(string); return s }

// checkCompanyRows checks a company job's rows against the truth; c is
// locked.
func checkCompanyRows(c *Checks, j *job, rows []map[string]any) {
	var sum float64
	for i, row := range rows {
		t := j.company[i]
		res := str(row, "result")
		c.AnswersByOutcome["company/"+res]++
		cr, _ := row["credits_consumed"].(float64)
		sum += cr
		switch {
		case res == "pending":
			c.PendingRows++
		case res == "error":
			c.ErrorRows["company"]++
			c.example("company job %s row %d %q: error (its shard failed for good)", j.id, i, t.input)
		case res != t.result || str(row, "input") != t.input || int(cr) != t.credits:
			c.Wrong["company"]++
			c.example("company job %s row %d %q: result %s credits %v, want %s %d", j.id, i, t.input, res, cr, t.result, t.credits)
		case t.redirect != nil && t.result != "invalid_url" && row["is_redirect"] != *t.redirect:
			c.Wrong["company"]++
			c.example("company job %s row %d %q: is_redirect %v, want %v", j.id, i, t.input, row["is_redirect"], *t.redirect)
		}
	}
	if credits.Amount(sum*1000+0.5) != j.charge {
		c.ChargeMismatch++
		c.example("company job %s: rows' credits_consumed add up to %v, the submission charged %s", j.id, sum, j.charge)
	}
}

// checkVerifyRows checks a verification job's rows against the truth; c
// is locked.
func checkVerifyRows(c *Checks, j *job, rows []map[string]any) {
	for i, row := range rows {
		t := j.verify[i]
		s, reason := str(row, "status"), str(row, "reason")
		c.AnswersByOutcome["verify/"+s]++
		switch {
		case s == "pending":
			c.PendingRows++
		case s == "unknown":
			c.VerifyUnknownByReason[reason]++
			if reason == "processing_error" {
				c.ErrorRows["verify"]++
				c.example("verify job %s %s: unknown/processing_error (its shard failed for good)", j.id, t.email)
			} else if t.status != "unknown" {
				c.Wrong["verify"]++
				c.example("verify job %s %s: unknown/%s, want %s/%s", j.id, t.email, reason, t.status, t.reason)
			}
		case s != t.status || reason != t.reason:
			c.Wrong["verify"]++
			c.example("verify job %s %s: %s/%s, want %s/%s", j.id, t.email, s, reason, t.status, t.reason)
		}
	}
}

// checkLookupRows checks a lookup job's rows against the truth; c is
// locked.
func checkLookupRows(c *Checks, j *job, rows []map[string]any) {
	for i, row := range rows {
		t := j.lookup[i]
		s, sub, email := str(row, "status"), str(row, "substatus"), strings.ToLower(str(row, "email"))
		c.AnswersByOutcome["lookup/"+s+"/"+sub]++
		switch {
		case s == "pending":
			c.PendingRows++
		case sub == "processing_error":
			c.ErrorRows["lookup"]++
			c.example("lookup job %s %s %s @ %s: %s/%s (its shard failed for good)", j.id, t.FirstName, t.LastName, t.Domain, s, sub)
		case t.Reason != "":
			if s != "not_found" || sub != t.Reason {
				c.Wrong["lookup"]++
				c.example("lookup job %s %s %s @ %s: %s/%s, want not_found/%s", j.id, t.FirstName, t.LastName, t.Domain, s, sub, t.Reason)
			}
		case t.CatchAll:
		case email != "" && email != strings.ToLower(t.Email):
			c.Wrong["lookup"]++
			c.example("lookup job %s %s %s @ %s: %s, the person's address is %q", j.id, t.FirstName, t.LastName, t.Domain, email, t.Email)
		case t.Findable && (s != "found" || sub != "verified"):
			c.Missed++
			if len(c.MissedExamples) < 5 {
				c.MissedExamples = append(c.MissedExamples, fmt.Sprintf("%s %s @ %s: %s/%s, findable as %s", t.FirstName, t.LastName, t.Domain, s, sub, t.Email))
			}
		}
	}
}

// checkCounters compares a job's counters in Redis with its answers: rows
// and distinct inputs processed, rows per outcome, nothing left retrying.
func (r *runner) checkCounters(ctx context.Context, c *Checks, j *job) {
	pipe := r.rdb.Pipeline()
	meta := pipe.HGetAll(ctx, "bulkd:job:{"+j.id+"}")
	ans := pipe.HLen(ctx, "bulkd:job:{"+j.id+"}:ans")
	retry := pipe.ZCard(ctx, "bulkd:job:{"+j.id+"}:retry")
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		c.ReadErrors++
		c.example("counters of %s: %v", j.id, err)
		return
	}
	m := meta.Val()
	n := func(k string) int64 { v, _ := strconv.ParseInt(m[k], 10, 64); return v }
	var outs int64
	for k, v := range m {
		if strings.HasPrefix(k, "out:") {
			x, _ := strconv.ParseInt(v, 10, 64)
			outs += x
		}
	}
	var bad []string
	if n("rows_processed") != n("total_rows") {
		bad = append(bad, fmt.Sprintf("rows_processed %d of %d rows", n("rows_processed"), n("total_rows")))
	}
	if n("distinct_processed") != n("distinct") || ans.Val() != n("distinct") {
		bad = append(bad, fmt.Sprintf("distinct_processed %d, %d answers stored, %d distinct inputs", n("distinct_processed"), ans.Val(), n("distinct")))
	}
	if outs+n("total_invalid") != n("total_rows") {
		bad = append(bad, fmt.Sprintf("rows by outcome %d + invalid %d != %d rows", outs, n("total_invalid"), n("total_rows")))
	}
	if n("retrying") != 0 || retry.Val() != 0 {
		bad = append(bad, fmt.Sprintf("retrying %d, retry set %d", n("retrying"), retry.Val()))
	}
	if len(bad) > 0 {
		c.CounterMismatch++
		c.example("job %s (%s) counters: %s", j.id, j.fam.name, strings.Join(bad, "; "))
	}
}

// ledgerJob is what an account's ledger says about one job.
type ledgerJob struct {
	firstAt                time.Time
	keyID                  string
	charges, refunds       int
	charged, refunded      credits.Amount // charged negative
	quotaUnits, quotaCount int64
	released               int64
}

// checkLedgers reads every account's ledger: each accepted job charged
// once, exactly its submission's amount (verification: its unknown
// addresses refunded once, as the job says); every other job's charge
// reversed; the balance equal to the ledger (billing.Reconcile).
func (r *runner) checkLedgers(ctx context.Context, c *Checks, accepted map[string]*job) {
	bl := billing.New(r.rdb, nil)
	pending := map[string]bool{}
	for _, set := range []string{"bulkd:jobs:pending", "bulkd:jobs:reclaiming"} {
		ms, _ := r.rdb.ZRange(ctx, set, 0, -1).Result()
		for _, m := range ms {
			id, _, _ := strings.Cut(m, "|")
			pending[id] = true
		}
	}
	for _, a := range r.accounts {
		byJob := ledgerByJob(ctx, bl, c, a.id)
		r.checkAccountJobs(c, a.id, byJob, accepted, pending)
		for id, j := range accepted {
			if j.kc.acct == a && byJob[id] == nil && (j.charge != 0 || j.fam.quota) {
				c.ChargeMismatch++
				c.example("%s job %s: no ledger entry", j.fam.name, id)
			}
		}
		rec, err := bl.Reconcile(ctx, a.id)
		c.AccountsReconciled++
		if err != nil {
			c.ReconcileFailures++
			c.example("reconcile %s: %v", a.id, err)
		} else if err := rec.Err(); err != nil {
			c.ReconcileFailures++
			c.example("%v", err)
		}
	}
	r.checkVerifyRefunds(ctx, c, accepted)
}

// ledgerByJob reads account's whole ledger, by job.
func ledgerByJob(ctx context.Context, bl *billing.Billing, c *Checks, account string) map[string]*ledgerJob {
	byJob := map[string]*ledgerJob{}
	after := ""
	for {
		es, err := bl.Entries(ctx, account, after, 1000)
		if err != nil {
			c.ReadErrors++
			c.example("ledger of %s: %v", account, err)
			return byJob
		}
		for _, e := range es {
			c.LedgerEntries++
			if e.JobID == "" {
				continue
			}
			lj := byJob[e.JobID]
			if lj == nil {
				lj = &ledgerJob{firstAt: e.Time, keyID: e.KeyID}
				byJob[e.JobID] = lj
			}
			lj.add(c, e)
		}
		if len(es) < 1000 {
			return byJob
		}
		after = es[len(es)-1].ID
	}
}

// add counts one of the job's ledger entries.
func (lj *ledgerJob) add(c *Checks, e billing.Entry) {
	switch e.Unit {
	case "credits":
		amt, err := credits.Parse(e.Amount)
		if err != nil {
			c.example("ledger entry %s: amount %q", e.ID, e.Amount)
			return
		}
		if e.Kind == billing.KindCharge {
			lj.charges++
			lj.charged += amt
		} else {
			lj.refunds++
			lj.refunded += amt
		}
	default:
		u, _ := strconv.ParseInt(e.Amount, 10, 64)
		if e.Kind == billing.KindQuotaConsume {
			lj.quotaCount++
			lj.quotaUnits += u
		} else {
			lj.released += u
		}
	}
}

// checkAccountJobs checks what account's ledger says about each job
// against what its client was told (accepted); pending are the
// submissions being rolled back.
func (r *runner) checkAccountJobs(c *Checks, account string, byJob map[string]*ledgerJob, accepted map[string]*job, pending map[string]bool) {
	for id, lj := range byJob {
		j, ok := accepted[id]
		if !ok {
			if lj.charged+lj.refunded != 0 || lj.quotaUnits+lj.released != 0 {
				if pending[id] {
					c.RollbacksPending++
				} else {
					c.UnexplainedCharges++
					c.example("account %s: job %s, which no client was given, is charged %s credits / %d searches net (charged at %.3fs; %s)", account, id,
						-(lj.charged + lj.refunded), lj.quotaUnits+lj.released, lj.firstAt.Sub(r.t0).Seconds(), r.submissionsAround(lj.keyID, lj.firstAt.Sub(r.t0)))
				}
			}
			continue
		}
		switch {
		case j.fam.quota:
			c.QuotaUnits += lj.quotaUnits
			if lj.quotaCount != 1 || lj.quotaUnits != j.totalRows || lj.released != 0 || lj.charges != 0 {
				c.ChargeMismatch++
				c.example("unlimited job %s: %d quota entries for %d searches, %d released, %d credit charges; want one of %d", id, lj.quotaCount,
					lj.quotaUnits, lj.released, lj.charges, j.totalRows)
			}
		default:
			c.ChargedCredits += -lj.charged
			ok := lj.charges == 1 && -lj.charged == j.charge
			if j.fam.kind == famVerify {
				c.RefundedVerify += lj.refunded
				ok = ok && lj.refunds <= 1
			} else {
				ok = ok && lj.refunds == 0
			}
			if !ok {
				c.ChargeMismatch++
				c.example("%s job %s: %d charges of %s, %d refunds of %s; the submission said %s", j.fam.name, id, lj.charges, -lj.charged,
					lj.refunds, lj.refunded, j.charge)
			}
		}
	}
}

// checkVerifyRefunds: each verification job's refunded amount (its hash)
// is its unknown addresses at their price, once.
func (r *runner) checkVerifyRefunds(ctx context.Context, c *Checks, accepted map[string]*job) {
	for _, j := range accepted {
		if j.fam.kind != famVerify {
			continue
		}
		m, err := r.rdb.HMGet(ctx, "bulkd:job:{"+j.id+"}", "refunded", "out:unknown", "price").Result()
		if err != nil || len(m) != 3 {
			continue
		}
		num := func(v any) int64 { s, _ := v.(string); x, _ := strconv.ParseInt(s, 10, 64); return x }
		if num(m[0]) != num(m[1])*num(m[2]) {
			c.ChargeMismatch++
			c.example("verify job %s: refunded %d milli-credits for %d unknown at %d", j.id, num(m[0]), num(m[1]), num(m[2]))
		}
	}
}

// checkOrphans looks for jobs in Redis that no client was given: a
// committed one is a submission charged twice (its first answer lost and
// the retry not recognised as the same request).
func (r *runner) checkOrphans(ctx context.Context, c *Checks, accepted map[string]*job) {
	var cursor uint64
	for {
		keys, next, err := r.rdb.Scan(ctx, cursor, "bulkd:job:{*}", 1000).Result()
		if err != nil {
			c.ReadErrors++
			return
		}
		for _, k := range keys {
			id := strings.TrimSuffix(strings.TrimPrefix(k, "bulkd:job:{"), "}")
			if strings.ContainsAny(id, "{}:") || accepted[id] != nil {
				continue
			}
			acct, _ := r.rdb.HGet(ctx, k, "account").Result()
			mark := id + "|" + acct
			_, e1 := r.rdb.ZScore(ctx, "bulkd:jobs:pending", mark).Result()
			_, e2 := r.rdb.ZScore(ctx, "bulkd:jobs:reclaiming", mark).Result()
			if e1 == nil || e2 == nil {
				continue // being rolled back (counted from the ledger)
			}
			c.Orphans++
			m, _ := r.rdb.HGetAll(ctx, k).Result()
			ms, _ := strconv.ParseInt(m["created_at"], 10, 64)
			at := time.UnixMilli(ms).Sub(r.t0)
			c.example("job %s (account %s, status %s, created at %.3fs) is in Redis but no client was given it; %s", id, acct, m["status"],
				at.Seconds(), r.submissionsAround(m["key"], at))
		}
		cursor = next
		if cursor == 0 {
			return
		}
	}
}

// submissionsAround describes the submissions of key keyID in flight
// around at: which requests they made, to which replica, with what answer.
func (r *runner) submissionsAround(keyID string, at time.Duration) string {
	var out []string
	for _, k := range r.keys {
		if accounts.KeyIDOf(k.key) != keyID {
			continue
		}
		k.mu.Lock()
		for _, j := range k.subs {
			if len(j.tries) == 0 {
				continue
			}
			first, last := j.tries[0], j.tries[len(j.tries)-1]
			if first.at > at+2*time.Second || last.at+last.took < at-2*time.Second {
				continue
			}
			var ts []string
			for _, t := range j.tries {
				ts = append(ts, t.String())
			}
			out = append(out, fmt.Sprintf("%s submission idem %s -> job %q: %s", j.fam.name, j.idem, j.id, strings.Join(ts, ", ")))
		}
		k.mu.Unlock()
	}
	if len(out) == 0 {
		return "no submission of its key in flight then"
	}
	return strings.Join(out, " | ")
}

// sortedKeys lists a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
