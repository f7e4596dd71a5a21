package soak

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Report is what a run saw and proved.
type Report struct {
	Config  Config
	Load    time.Duration // the load phase as run
	Drain   time.Duration
	Drained bool
	Machine string

	Endpoints []EndpointStats
	Total     EndpointStats // the load phase, all endpoints

	// Answers that are not the API's ordinary ones, by where they fell.
	ServerErrors map[string]map[int]int64 // window ("outside", "redis_restart", ...) -> status -> count
	ConnErrors   map[string]map[string]int64

	Submissions, Accepted, Replayed, SubmitRetries, GaveUp int64
	Rejected                                               map[int]int64
	Pauses                                                 int64
	Paused                                                 time.Duration
	SkippedBusy, SkippedPaused, Ticks                      int64
	NoRetryAfter                                           int64
	Unexpected                                             []string
	JobLatency                                             map[string][2]time.Duration // family -> p50, p99 of accepted -> seen finished

	Events []*faultEvent
	Checks *Checks
}

// EndpointStats are one endpoint's requests in the load phase.
type EndpointStats struct {
	Name                                           string
	Requests, OK, R429, R4xx, R5xx, Conn, Timeouts int64
	P50, P99, Max                                  time.Duration // of 2xx answers
	DrainRequests                                  int64
	lat                                            []int32
}

func (r *runner) report(load, drain time.Duration, drained bool) *Report {
	rep := &Report{Config: r.cfg, Load: load, Drain: drain, Drained: drained, Rejected: map[int]int64{},
		ServerErrors: map[string]map[int]int64{}, ConnErrors: map[string]map[string]int64{}, JobLatency: map[string][2]time.Duration{}}
	rep.Machine = machine()
	r.eventsMu.Lock()
	rep.Events = append(rep.Events, r.events...)
	r.eventsMu.Unlock()
	sort.Slice(rep.Events, func(a, b int) bool { return rep.Events[a].at < rep.Events[b].at })

	eps := make([]EndpointStats, numEndpoints)
	for i := range eps {
		eps[i].Name = endpointNames[i]
	}
	total := &rep.Total
	total.Name = "all"
	jobLat := map[string][]time.Duration{}
	for _, k := range r.keys {
		k.mu.Lock()
		st := k.stats
		rep.Submissions += st.submissions
		rep.Accepted += st.accepted
		rep.Replayed += st.replayed
		rep.SubmitRetries += st.submitRetries
		rep.GaveUp += st.gaveUp
		rep.Pauses += st.pauses
		rep.Paused += st.paused
		rep.SkippedBusy += st.skippedBusy
		rep.SkippedPaused += st.skippedPaused
		rep.Ticks += st.ticks
		rep.NoRetryAfter += st.noRetryAfter
		for c, n := range st.rejected {
			rep.Rejected[c] += n
		}
		rep.Unexpected = append(rep.Unexpected, st.unexpected...)
		for _, j := range k.jobs {
			if j.done {
				jobLat[j.fam.name] = append(jobLat[j.fam.name], j.doneSeen-j.accepted)
			}
		}
		for _, s := range k.samples {
			e := &eps[s.ep]
			if s.phase == phaseDrain {
				e.DrainRequests++
			} else {
				for _, x := range []*EndpointStats{e, total} {
					x.Requests++
					switch {
					case s.status >= 200 && s.status < 300:
						x.OK++
						x.lat = append(x.lat, s.dur)
					case s.status == 429:
						x.R429++
					case s.status >= 500:
						x.R5xx++
					case s.status > 0:
						x.R4xx++
					case s.status == errTimeout:
						x.Timeouts++
					default:
						x.Conn++
					}
				}
			}
			if s.status >= 500 || s.status < 0 {
				w := r.window(s)
				if s.status >= 500 {
					if rep.ServerErrors[w] == nil {
						rep.ServerErrors[w] = map[int]int64{}
					}
					rep.ServerErrors[w][int(s.status)]++
				} else {
					if rep.ConnErrors[w] == nil {
						rep.ConnErrors[w] = map[string]int64{}
					}
					rep.ConnErrors[w][fmt.Sprintf("%s to %s", errName(s.status), r.reps[s.rep].name)]++
				}
			}
		}
		k.mu.Unlock()
	}
	for i := range eps {
		eps[i].finish()
	}
	total.finish()
	rep.Endpoints = eps
	for f, l := range jobLat {
		sort.Slice(l, func(a, b int) bool { return l[a] < l[b] })
		rep.JobLatency[f] = [2]time.Duration{l[len(l)/2], l[int(float64(len(l)-1)*0.99)]}
	}
	return rep
}

// killedInFlight: a connection error the target allows, one to a replica
// the suite killed, in its window: a request in flight when it died (cut)
// or sent before the balancer noticed (refused).
func killedInFlight(window, what string) bool {
	kind, target, ok := strings.Cut(window, " ")
	if !ok || (kind != "replica_kill" && kind != "processor_kill") {
		return false
	}
	return strings.HasSuffix(what, " to "+target) &&
		(strings.HasPrefix(what, errName(errRefused)) || strings.HasPrefix(what, errName(errCut)))
}

func errName(s int16) string {
	switch s {
	case errRefused:
		return "connection refused"
	case errCut:
		return "connection cut in flight"
	case errTimeout:
		return "timeout"
	}
	return "other connection error"
}

// window names the fault a sample fell in: from a second before it was
// injected (a request in flight when it struck) until a few seconds after
// the system had recovered; "outside" otherwise. Windows may overlap (a
// processor kept down while Redis restarts): a connection error belongs to
// the kill of the replica it was sent to, if one holds it; anything else to
// the fault that struck last before it.
func (r *runner) window(s sample) string {
	at := time.Duration(s.start) * time.Millisecond
	end := at + time.Duration(s.dur)*time.Microsecond
	in := func(e *faultEvent) bool {
		until := max(e.back, e.recover)
		if until == 0 {
			until = e.at + time.Minute
		}
		return end >= e.at-time.Second && at <= until+3*time.Second
	}
	if s.status < 0 {
		for _, e := range r.events {
			if strings.HasSuffix(e.kind, "_kill") && e.target == r.reps[s.rep].name && in(e) {
				return e.kind + " " + e.target
			}
		}
	}
	for i := len(r.events) - 1; i >= 0; i-- {
		if e := r.events[i]; in(e) {
			return e.kind + " " + e.target
		}
	}
	return "outside"
}

func (e *EndpointStats) finish() {
	sort.Slice(e.lat, func(a, b int) bool { return e.lat[a] < e.lat[b] })
	p := func(q float64) time.Duration {
		if len(e.lat) == 0 {
			return 0
		}
		return time.Duration(e.lat[int(float64(len(e.lat)-1)*q)]) * time.Microsecond
	}
	e.P50, e.P99, e.Max = p(0.5), p(0.99), p(1)
	e.lat = nil
}

func machine() string {
	load, _ := os.ReadFile("/proc/loadavg")
	return fmt.Sprintf("%d CPUs (runtime.NumCPU), %s/%s, load average at the end %s", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH,
		strings.Join(strings.Fields(string(load))[:min(3, len(strings.Fields(string(load))))], " "))
}

// Failures lists what broke a promise of the suite.
func (rep *Report) Failures() []string {
	var f []string
	add := func(format string, args ...any) { f = append(f, fmt.Sprintf(format, args...)) }
	for w, m := range rep.ServerErrors {
		for code, n := range m {
			// 503 temporarily_unavailable with Retry-After while Redis
			// restarts is the API's designed answer (docs/api.md): the
			// client waits and retries. Any other 5xx, or a 503 anywhere
			// else, misses the target.
			if code == 503 && strings.HasPrefix(w, "redis_restart") {
				continue
			}
			add("%d answers %d (window: %s)", n, code, w)
		}
	}
	if rep.NoRetryAfter > 0 {
		add("%d answers 429 or 503 without Retry-After", rep.NoRetryAfter)
	}
	for w, m := range rep.ConnErrors {
		for what, n := range m {
			if !killedInFlight(w, what) {
				add("%d x %s (window: %s)", n, what, w)
			}
		}
	}
	if !rep.Drained {
		add("not every accepted job finished within the drain time %s", rep.Config.Drain)
	}
	if rep.GaveUp > 0 {
		add("%d submissions given up after retrying for %s", rep.GaveUp, rep.Config.SubmitGiveUp)
	}
	for code, n := range rep.Rejected {
		add("%d submissions rejected with %d", n, code)
	}
	if len(rep.Unexpected) > 0 {
		add("unexpected answers, e.g. %s", strings.Join(rep.Unexpected[:min(3, len(rep.Unexpected))], " | "))
	}
	c := rep.Checks
	if c == nil {
		return append(f, "no checks ran")
	}
	if c.Jobs != rep.Accepted-c.DuplicateJobIDs {
		add("%d jobs checked of %d accepted", c.Jobs, rep.Accepted)
	}
	for _, x := range []struct {
		n    int64
		what string
	}{
		{c.NotFinished, "jobs not finished"}, {c.PendingRows, "rows still pending"}, {c.WrongRowCount, "jobs with a wrong number of result rows"},
		{c.CounterMismatch, "jobs whose Redis counters disagree with their answers"}, {c.ChargeMismatch, "jobs charged other than their submission said"},
		{c.DuplicateJobIDs, "job ids given to two submissions"}, {c.Orphans, "jobs in Redis no client was given (charged twice)"},
		{c.UnexplainedCharges, "charges of jobs no client has, not reversed"}, {c.ReadErrors, "read errors during the checks"},
		{int64(c.ReconcileFailures), "accounts whose balance is not their ledger"},
		{c.Wrong["company"], "company rows answered against the dataset's truth"},
		{c.ErrorRows["company"], "company rows answered error (work lost: their shard failed for good)"},
		{c.ErrorRows["verify"], "verification rows answered unknown/processing_error (work lost)"},
		{c.ErrorRows["lookup"], "lookup rows answered processing_error (work lost)"},
		{c.Wrong["verify"], "verification rows answered against the mail world's truth"},
		{c.Wrong["lookup"], "lookup rows with a wrong address or reason"},
	} {
		if x.n > 0 {
			add("%d %s", x.n, x.what)
		}
	}
	return f
}

// Markdown renders the report for docs/reliability.md.
func (rep *Report) Markdown() string {
	var b strings.Builder
	cfg := rep.Config
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("Machine: %s. Everything shares it: redis-server, both bulkd replicas, the clients, the mail world and the website stand-in.\n\n", rep.Machine)
	w("Load: %d keys over %d accounts (%d unlimited-plan accounts), each key paced at %d requests/s (bulkd --rate-limit %d), at most %d requests in flight per key, for %s; a submission every %s per key on average (exponential), status polls every %s per running job, results pages of %d rows. Faults: kill -9 of replica r0 at %s (down %s), kill -9 of the replica holding the most shard leases at %s (down %s, lease TTL %s), Redis SIGTERM at %s (down %s).\n\n",
		cfg.Keys, cfg.Accounts, cfg.UnlimitedAccounts, cfg.RPS, cfg.RPS, cfg.InFlight, rep.Load.Round(time.Second), cfg.SubmitEvery, cfg.PollEvery, cfg.PageLimit,
		cfg.ReplicaKillAt, cfg.ReplicaDown, cfg.ProcessorKillAt, cfg.ProcessorDown, cfg.LeaseTTL, cfg.RedisRestartAt, cfg.RedisDown)
	t := rep.Total
	w("Throughput (load phase): **%.0f requests/s** sent, %.0f/s answered 2xx (%d requests: %d 2xx, %d 429, %d other 4xx, %d 5xx, %d connection errors, %d timeouts). Paced ticks skipped: %d with %d requests already in flight, %d waiting out a Retry-After (%d pauses, %s in all).\n\n",
		float64(t.Requests)/rep.Load.Seconds(), float64(t.OK)/rep.Load.Seconds(), t.Requests, t.OK, t.R429, t.R4xx, t.R5xx, t.Conn, t.Timeouts,
		rep.SkippedBusy, cfg.InFlight, rep.SkippedPaused, rep.Pauses, rep.Paused.Round(time.Second))
	w("| endpoint | requests | 2xx | 429 | other 4xx | 5xx | conn. errors | p50 | p99 | max |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, e := range rep.Endpoints {
		if e.Requests == 0 {
			continue
		}
		w("| %s | %d | %d | %d | %d | %d | %d | %s | %s | %s |\n", e.Name, e.Requests, e.OK, e.R429, e.R4xx, e.R5xx, e.Conn+e.Timeouts,
			ms(e.P50), ms(e.P99), ms(e.Max))
	}
	w("| **all** | %d | %d | %d | %d | %d | %d | %s | %s | %s |\n\n", t.Requests, t.OK, t.R429, t.R4xx, t.R5xx, t.Conn+t.Timeouts, ms(t.P50), ms(t.P99), ms(t.Max))
	w("Latencies are of 2xx answers, measured by the client (connection reuse, queueing on the shared cores included).\n\n")
	w("Submissions: %d logical submissions, %d accepted (%d of them by a replayed answer), %d extra requests (retries after 429/503/409, connection errors, 5xx; each retried submission counted once), %d given up, rejected %v.\n\n",
		rep.Submissions, rep.Accepted, rep.Replayed, rep.SubmitRetries, rep.GaveUp, rep.Rejected)
	for _, f := range sortedKeys(rep.JobLatency) {
		l := rep.JobLatency[f]
		w("- %s jobs, accepted -> seen finished by the polling client: p50 %s, p99 %s\n", f, l[0].Round(10*time.Millisecond), l[1].Round(10*time.Millisecond))
	}
	var redis503, other5xx int64
	for win, m := range rep.ServerErrors {
		for code, n := range m {
			if code == 503 && strings.HasPrefix(win, "redis_restart") {
				redis503 += n
			} else {
				other5xx += n
			}
		}
	}
	w("\n5xx: **%d** other than the 503 temporarily_unavailable of the Redis restart (%d, each with Retry-After; answers 429/503 without Retry-After: %d). By window: %s. Connection errors by window (a connection refused or cut by a replica the suite killed is its in-flight or not-yet-rerouted requests, not a 5xx): %s.\n\n",
		other5xx, redis503, rep.NoRetryAfter, fmtCounts(rep.ServerErrors), fmtCounts(rep.ConnErrors))

	w("### Fault matrix\n\n| fault | at | what happened | back / recovered | errors seen in its window |\n| --- | --- | --- | --- | --- |\n")
	for _, e := range rep.Events {
		win := e.kind + " " + e.target
		var errs []string
		for code, n := range rep.ServerErrors[win] {
			errs = append(errs, fmt.Sprintf("%d x %d", n, code))
		}
		for what, n := range rep.ConnErrors[win] {
			errs = append(errs, fmt.Sprintf("%d x %s", n, what))
		}
		sort.Strings(errs)
		if len(errs) == 0 {
			errs = []string{"none"}
		}
		back := "-"
		if e.back > 0 {
			back = fmt.Sprintf("process back after %s", (e.back - e.at).Round(10*time.Millisecond))
		}
		if e.recover > 0 && e.recover != e.back {
			back += fmt.Sprintf("; recovered after %s", (e.recover - e.at).Round(10*time.Millisecond))
		}
		w("| %s %s | %s | %s | %s | %s |\n", e.kind, e.target, e.at.Round(100*time.Millisecond), strings.Join(e.notes, "; "), back, strings.Join(errs, ", "))
	}
	c := rep.Checks
	if c != nil {
		w("\n### Proofs after the run\n\n")
		w("- %d jobs (%v) read back through the API after a drain of %s: %d not finished, %d result rows, %d pending, %d jobs with a wrong row count.\n",
			c.Jobs, c.JobsByFamily, rep.Drain.Round(time.Second), c.NotFinished, c.Rows, c.PendingRows, c.WrongRowCount)
		w("- Redis counters (rows_processed, distinct_processed, stored answers, rows by outcome, retry set) agree with the answers: %d jobs disagree.\n", c.CounterMismatch)
		w("- Ledger: %d entries; every accepted job charged once, exactly its submission's amount (%s credits in all; %d daily searches), verification unknowns refunded once (%s credits): %d mismatches. Jobs in Redis no client was given: %d; charges of such jobs not reversed: %d (rollbacks still with the janitor: %d; pending marks left %d, reclaiming %d).\n",
			c.LedgerEntries, c.ChargedCredits, c.QuotaUnits, c.RefundedVerify, c.ChargeMismatch, c.Orphans, c.UnexplainedCharges, c.RollbacksPending,
			c.PendingMarksAfter, c.ReclaimingMarksAfter)
		w("- billing.Reconcile: %d accounts, %d whose balance is not opening + ledger.\n", c.AccountsReconciled, c.ReconcileFailures)
		w("- Answers against the worlds' truth: wrong %v, error/processing_error rows %v, lookup findable people not found %d. Verification unknowns by reason: %v.\n",
			c.Wrong, c.ErrorRows, c.Missed, c.VerifyUnknownByReason)
		if len(c.MissedExamples) > 0 {
			w("\nLookup misses (the finder's, not the faults': people asked about alone, outside a job with their colleagues) e.g.: %s\n", strings.Join(c.MissedExamples, "; "))
		}
		if len(c.Examples) > 0 {
			w("\nExamples:\n\n")
			for _, e := range c.Examples {
				w("- %s\n", e)
			}
		}
	}
	if f := rep.Failures(); len(f) > 0 {
		w("\n**Failures:**\n\n")
		for _, x := range f {
			w("- %s\n", x)
		}
	} else {
		w("\nNo failures.\n")
	}
	return b.String()
}

func ms(d time.Duration) string {
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.0f ms", float64(d)/1e6)
}

// fmtCounts prints counts per window and per what ("w1: 3 x 500, 1 x
// 502; w2: ..."), windows and items sorted; "none" when there are none.
func fmtCounts[K comparable](m map[string]map[K]int64) string {
	if len(m) == 0 {
		return "none"
	}
	var out []string
	for _, w := range sortedKeys(m) {
		var parts []string
		for what, n := range m[w] {
			parts = append(parts, fmt.Sprintf("%d x %v", n, what))
		}
		sort.Strings(parts)
		out = append(out, w+": "+strings.Join(parts, ", "))
	}
	return strings.Join(out, "; ")
}
