package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/company"
	"github.com/bulkd/bulkd/internal/company/normalize"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/mailworld"
)

// fairMain measures fair scheduling across accounts (issue 19) with the
// real bulkd binary (standalone), a private Redis and the mail world:
//
//	go run ./hack/loadgen fair --bin bin/bulkd [--scenario deaddns|companies|both]
//
// deaddns: account A submits three 100,000-address verification jobs whose
// domains never answer DNS (the mail world drops their queries), account B
// 5 deliverable addresses 2 s after A's first submission. It prints B's
// completion time and A's throughput (time until A has answered
// --a-target rows) with B and, in a run of its own before, without B.
//
// companies: 50 accounts each submit a 10,000-row company job at the same
// moment; it prints the spread of their completion times.
//
// It passes no --fair-* flag unless --bulkd-flags says so, so the same
// command measures an older binary (the FIFO queue) for comparison.
func fairMain(args []string) error {
	fs := flag.NewFlagSet("fair", flag.ExitOnError)
	bin := fs.String("bin", "bin/bulkd", "bulkd binary")
	scenario := fs.String("scenario", "both", "deaddns, companies or both")
	workers := fs.Int("workers", 4, "bulkd --workers")
	bulkdFlags := fs.String("bulkd-flags", "", "more bulkd flags, space-separated (e.g. --fair-preempt=false)")
	// deaddns
	aJobs := fs.Int("a-jobs", 3, "deaddns: A's verification jobs")
	aRows := fs.Int("a-rows", 100_000, "deaddns: addresses per A job")
	deadDomains := fs.Int("dead-domains", 5000, "deaddns: domains of A's addresses (none answers DNS)")
	aTarget := fs.Int64("a-target", 16_000, "deaddns: A's throughput is measured as the time until A has this many rows answered")
	bRows := fs.Int("b-rows", 5, "deaddns: B's addresses")
	bAfter := fs.Duration("b-after", 2*time.Second, "deaddns: B submits this long after A's first submission")
	bWait := fs.Duration("b-wait", 5*time.Minute, "deaddns: how long to wait for B's job")
	alone := fs.Bool("alone", true, "deaddns: also run A alone (the throughput baseline)")
	// companies
	nAccounts := fs.Int("accounts", 50, "companies: accounts, one job each")
	rows := fs.Int("rows", 10_000, "companies: rows per job")
	dataset := fs.Int("dataset", 100_000, "companies: companies imported")
	kind := fs.String("kind", "network", "companies: rows are network (network URLs, store lookups only) or domain (redirect checks through a local website proxy)")
	_ = fs.Parse(args)
	extra := strings.Fields(*bulkdFlags)
	if *scenario == "deaddns" || *scenario == "both" {
		if err := deadDNSScenario(*bin, *workers, extra, *aJobs, *aRows, *deadDomains, *aTarget, *bRows, *bAfter, *bWait, *alone); err != nil {
			return err
		}
	}
	if *scenario == "companies" || *scenario == "both" {
		if err := companiesScenario(*bin, *workers, extra, *nAccounts, *rows, *dataset, *kind); err != nil {
			return err
		}
	}
	return nil
}

type deadDNSResult struct {
	aTook time.Duration // until A had aTarget rows answered
	steps []time.Duration
	rows  []int64
	bTook time.Duration // 0: B not submitted; <0: B did not complete
	bBusy string        // what B's status said when given up on
}

func deadDNSScenario(bin string, workers int, extra []string, aJobs, aRows, deadDomains int, aTarget int64, bRows int, bAfter, bWait time.Duration, alone bool) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	spec := mailworld.Bench(mailworld.BenchOptions{Domains: 50, PerDomain: 10, Seed: 1})
	avoid := map[string]bool{} // B's addresses: plain deliverable ones, no greylisting or catch-all
	for _, d := range spec.Domains {
		if d.Greylist > 0 || d.CatchAll {
			avoid[d.Name] = true
		}
	}
	for i := 0; i < deadDomains; i++ {
		spec.Domains = append(spec.Domains, mailworld.Domain{Name: fmt.Sprintf("company-%d.dead.test", i), DNS: mailworld.DNSTimeout})
	}
	w, err := mailworld.Start(ctx, spec)
	if err != nil {
		return err
	}
	defer w.Close()
	var bEmails []string
	for _, c := range w.Cases() {
		_, dom, _ := strings.Cut(c.Email, "@")
		if c.Status == "deliverable" && !avoid[dom] && len(bEmails) < bRows {
			bEmails = append(bEmails, c.Email)
		}
	}
	bBody, _ := json.Marshal(map[string]any{"emails": bEmails})
	var buf bytes.Buffer
	buf.WriteString(`{"emails":[`)
	for i := 0; i < aRows; i++ {
		if i > 0 {
			buf.WriteByte(',')
		}
		fmt.Fprintf(&buf, `"user.%d@company-%d.dead.test"`, i, i%deadDomains)
	}
	buf.WriteString("]}")
	fmt.Printf("deaddns: A %d jobs x %d addresses over %d domains that never answer DNS; B %d deliverable addresses %s after A's first submission; --workers %d %s\n",
		aJobs, aRows, deadDomains, len(bEmails), bAfter, workers, strings.Join(extra, " "))
	d := &deadDNS{bin: bin, workers: workers, extra: extra, w: w, aJobs: aJobs, aTarget: aTarget, aBody: buf.Bytes(),
		bBody: bBody, bN: len(bEmails), bAfter: bAfter, bWait: bWait}
	var base deadDNSResult
	if alone {
		if base, err = d.run(ctx, false); err != nil {
			return err
		}
		fmt.Printf("  A alone: %d rows answered after %s = %.0f rows/s (rows@time: %s)\n", aTarget, base.aTook.Round(time.Millisecond),
			float64(aTarget)/base.aTook.Seconds(), fmtSteps(base))
	}
	with, err := d.run(ctx, true)
	if err != nil {
		return err
	}
	if with.bTook < 0 {
		fmt.Printf("  B: NOT completed: %s\n", with.bBusy)
		return nil
	}
	fmt.Printf("  B's %d addresses: completed %s after submission (goal <= 2 s)\n", len(bEmails), with.bTook.Round(time.Millisecond))
	fmt.Printf("  A with B: %d rows answered after %s = %.0f rows/s (rows@time: %s)\n", aTarget, with.aTook.Round(time.Millisecond),
		float64(aTarget)/with.aTook.Seconds(), fmtSteps(with))
	if alone {
		drop := 1 - base.aTook.Seconds()/with.aTook.Seconds()
		fmt.Printf("  A's throughput with B against alone: %+.1f%% (goal: a drop of at most 10%%)\n", -100*drop)
	}
	return nil
}

// deadDNS is the deaddns scenario's world and parameters: account A's
// jobs of addresses whose domains never answer DNS, account B's small job
// of deliverable ones.
type deadDNS struct {
	bin           string
	workers       int
	extra         []string
	w             *mailworld.World
	aJobs         int
	aTarget       int64
	aBody, bBody  []byte
	bN            int
	bAfter, bWait time.Duration
}

// aProgress is A's progress until its target.
type aProgress struct {
	took  time.Duration
	steps []time.Duration
	rows  []int64
	err   error
}

// run runs A's jobs on a fresh Redis and bulkd, and B's when withB.
func (d *deadDNS) run(ctx context.Context, withB bool) (deadDNSResult, error) {
	var res deadDNSResult
	srv, rdb, cleanup, err := privateRedis()
	if err != nil {
		return res, err
	}
	defer cleanup()
	st := accounts.NewStore(rdb, nil)
	keyA, err := paygKey(ctx, st, "A", credits.Whole(1_000_000))
	if err != nil {
		return res, err
	}
	keyB, err := paygKey(ctx, st, "B", credits.Whole(1000))
	if err != nil {
		return res, err
	}
	flags := append([]string{"--workers", strconv.Itoa(d.workers), "--dns-server", d.w.DNSAddr(), "--smtp-port", strconv.Itoa(d.w.SMTPPort()),
		"--outbound-allow-cidrs", mailworld.AllowCIDRs, "--smtp-sessions-per-host", "3"}, d.extra...)
	b, err := startBulkd(d.bin, srv.URL, flags...)
	if err != nil {
		return res, err
	}
	defer b.stop()
	hc := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	t0 := time.Now()
	var ids []string
	for i := 0; i < d.aJobs; i++ {
		id, err := submitTo(hc, b.base+"/v1/bulk", keyA, d.aBody)
		if err != nil {
			return res, err
		}
		ids = append(ids, id)
	}
	fmt.Printf("  A's %d submissions took %s\n", d.aJobs, time.Since(t0).Round(time.Millisecond))
	stop := make(chan struct{})
	defer close(stop)
	aDone := d.pollA(hc, b.base, keyA, ids, t0, stop)
	if withB {
		time.Sleep(time.Until(t0.Add(d.bAfter)))
		tb := time.Now()
		id, err := submitTo(hc, b.base+"/v1/bulk", keyB, d.bBody)
		if err != nil {
			return res, err
		}
		if _, err := waitStatus(hc, b.base+"/v1/bulk/"+id, keyB, d.bWait, "complete"); err != nil {
			res.bTook = -1
			n, status, _ := verifyProgress(hc, b.base, keyB, id)
			res.bBusy = fmt.Sprintf("status %s, %d of %d processed after %s", status, n, d.bN, d.bWait)
			return res, nil // the old FIFO queue: A's target is hours away
		}
		res.bTook = time.Since(tb)
	}
	p := <-aDone
	res.aTook, res.steps, res.rows = p.took, p.steps, p.rows
	return res, p.err
}

// pollA polls A's jobs every 100 ms until they have answered aTarget rows
// (or stop closes), and sends what it saw.
func (d *deadDNS) pollA(hc *http.Client, base, keyA string, ids []string, t0 time.Time, stop chan struct{}) <-chan aProgress {
	aDone := make(chan aProgress, 1)
	go func() {
		var p aProgress
		var last int64
		for time.Since(t0) < 30*time.Minute {
			var sum int64
			for _, id := range ids {
				n, _, err := verifyProgress(hc, base, keyA, id)
				if err != nil {
					p.err = err
					aDone <- p
					return
				}
				sum += n
			}
			if sum > last {
				p.steps = append(p.steps, time.Since(t0))
				p.rows = append(p.rows, sum)
				last = sum
			}
			if sum >= d.aTarget {
				p.took = time.Since(t0)
				aDone <- p
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		p.err = errors.New("A did not reach its target within 30 minutes")
		aDone <- p
	}()
	return aDone
}

func fmtSteps(r deadDNSResult) string {
	var parts []string
	for i, d := range r.steps {
		parts = append(parts, fmt.Sprintf("%d@%.1fs", r.rows[i], d.Seconds()))
	}
	return strings.Join(parts, " ")
}

// verifyProgress reads a verification job's total_processed and status.
func verifyProgress(hc *http.Client, base, key, id string) (int64, string, error) {
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/bulk/"+id, nil)
	req.Header.Set("X-API-Key", key)
	res, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	var st struct {
		Status         string `json:"status"`
		TotalProcessed int64  `json:"total_processed"`
	}
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		return 0, "", err
	}
	return st.TotalProcessed, st.Status, nil
}

func companiesScenario(bin string, workers int, extra []string, nAccounts, rows, dataset int, kind string) error {
	srv, rdb, cleanup, err := privateRedis()
	if err != nil {
		return err
	}
	defer cleanup()
	ctx := context.Background()
	slugs, err := importCompanies(ctx, rdb, dataset)
	if err != nil {
		return err
	}
	st := accounts.NewStore(rdb, nil)
	keys := make([]string, nAccounts)
	bodies := make([][]byte, nAccounts)
	for i := range keys {
		if keys[i], err = paygKey(ctx, st, fmt.Sprintf("acct-%d", i), credits.Whole(int64(rows)*2)); err != nil {
			return err
		}
		vals := make([]string, rows)
		for r := range vals {
			switch {
			case kind == "domain": // redirect checks through the local website proxy
				vals[r] = fmt.Sprintf("site-%d-%d.example", i, r)
			case r%10 == 9: // 10% unknown companies
				vals[r] = fmt.Sprintf("https://www.linkedin.com/company/no-such-company-%d-%d", i, r)
			default: // 90% known, each account its own stretch of the dataset
				vals[r] = slugs[(i*rows+r)%len(slugs)]
			}
		}
		field := "network_url"
		if kind == "domain" {
			field = "domain"
		}
		bodies[i] = submission(vals, field)
	}
	flags := append([]string{"--workers", strconv.Itoa(workers)}, extra...)
	if kind == "domain" {
		proxy, _ := websiteProxy()
		defer proxy.Close()
		flags = append(flags, "--redirect-checks=true", "--http-proxy", "http://"+proxy.Addr)
	}
	b, err := startBulkd(bin, srv.URL, flags...)
	if err != nil {
		return err
	}
	defer b.stop()
	hc := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: nAccounts * 2}}
	ids := make([]string, nAccounts)
	errs := make([]error, nAccounts)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			ids[i], errs[i] = submit(hc, b.base, keys[i], bodies[i])
		}()
	}
	t0 := time.Now()
	close(gate)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	created, done, err := pollCompanies(hc, b.base, keys, ids, t0)
	if err != nil {
		return err
	}
	reportCompanies(created, done, ids, rows, kind, workers, extra)
	return nil
}

// importCompanies generates and imports dataset companies, and returns
// their network URLs.
func importCompanies(ctx context.Context, rdb *redis.Client, dataset int) ([]string, error) {
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(company.Generate(bufio.NewWriterSize(pw, 1<<20), dataset, 7, "linkedin.com"))
	}()
	if _, err := company.Import(ctx, pr, company.FormatJSONL, company.NewStore(rdb, "bulkd:"), normalize.New(normalize.DefaultHosts), nil); err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	pr2, pw2 := io.Pipe()
	go func() { pw2.CloseWithError(company.Generate(pw2, dataset, 7, "linkedin.com")) }()
	var slugs []string
	dec := json.NewDecoder(pr2)
	for {
		var r struct {
			NetworkURL string `json:"network_url"`
		}
		if err := dec.Decode(&r); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		slugs = append(slugs, r.NetworkURL)
	}
	return slugs, nil
}

// pollCompanies polls every job until it completes; the server's own
// created_at and completed_at, from t0, are the times returned.
func pollCompanies(hc *http.Client, base string, keys, ids []string, t0 time.Time) (created, done []time.Duration, err error) {
	created = make([]time.Duration, len(ids))
	done = make([]time.Duration, len(ids))
	left := len(ids)
	for deadline := time.Now().Add(10 * time.Minute); left > 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("%d jobs not completed within 10 minutes", left)
		}
		for i, id := range ids {
			if done[i] > 0 {
				continue
			}
			req, _ := http.NewRequest(http.MethodGet, base+"/v1/company-enrichment/bulk/"+id, nil)
			req.Header.Set("X-API-Key", keys[i])
			res, err := hc.Do(req)
			if err != nil {
				return nil, nil, err
			}
			var s struct {
				Status      string     `json:"status"`
				CreatedAt   time.Time  `json:"created_at"`
				CompletedAt *time.Time `json:"completed_at"`
			}
			_ = json.NewDecoder(res.Body).Decode(&s)
			res.Body.Close()
			created[i] = s.CreatedAt.Sub(t0)
			if s.Status == "completed" && s.CompletedAt != nil {
				done[i] = s.CompletedAt.Sub(t0)
				left--
			}
		}
	}
	return created, done, nil
}

// reportCompanies prints the companies scenario's completion times.
func reportCompanies(created, done []time.Duration, ids []string, rows int, kind string, workers int, extra []string) {
	nAccounts := len(ids)
	sorted := append([]time.Duration(nil), done...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	var sum time.Duration
	for _, d := range done {
		sum += d
	}
	mean := sum / time.Duration(nAccounts)
	dev := 0.0
	for _, d := range done {
		dev = max(dev, abs(d.Seconds()-mean.Seconds())/mean.Seconds())
	}
	lastIn := slices.Max(created)
	fmt.Printf("companies: %d accounts x %d %s rows submitted at once (server created_at from %s to %s after the start); --workers %d %s\n",
		nAccounts, rows, kind, slices.Min(created).Round(time.Millisecond), lastIn.Round(time.Millisecond), workers, strings.Join(extra, " "))
	fmt.Printf("  completion times from the common start: min %s, p50 %s, mean %s, max %s; farthest from the mean %.1f%% (goal: within 20%%); %d rows in %s = %.0f rows/s\n",
		sorted[0].Round(time.Millisecond), sorted[len(sorted)/2].Round(time.Millisecond), mean.Round(time.Millisecond), sorted[len(sorted)-1].Round(time.Millisecond),
		100*dev, nAccounts*rows, sorted[len(sorted)-1].Round(time.Millisecond), float64(nAccounts*rows)/sorted[len(sorted)-1].Seconds())
	order := make([]int, nAccounts)
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(x, y int) bool { return created[order[x]] < created[order[y]] })
	var line []string
	for _, i := range order {
		line = append(line, fmt.Sprintf("%.2f/%.2f", created[i].Seconds(), done[i].Seconds()))
		if done[i] == sorted[0] {
			line[len(line)-1] += "(" + ids[i][:8] + ")"
		}
	}
	fmt.Printf("  created/completed (s) in order of creation: %s\n", strings.Join(line, " "))
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}
