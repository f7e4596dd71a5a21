//go:build e2ecluster

package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/test/companyapi"
)

// Helpers of the tests that change the release while jobs run (failover,
// upgrade, Kueue): helm against the cluster, a job of every family, and
// the ledger check.

// helm runs the helm CLI e2e.sh built against the cluster's release.
func helm(t *testing.T, args ...string) string {
	t.Helper()
	bin := os.Getenv("E2E_HELM")
	if bin == "" {
		t.Skip("E2E_HELM is not set (run with make e2e)")
	}
	args = append(args, "--kubeconfig", os.Getenv("E2E_KUBECONFIG"), "-n", h.ns)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// releaseRevision is the release's current revision.
func releaseRevision(t *testing.T) int {
	t.Helper()
	var st struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal([]byte(helm(t, "status", release, "-o", "json")), &st); err != nil || st.Version == 0 {
		t.Fatalf("helm status: %v %+v", err, st)
	}
	return st.Version
}

// upgradeRelease runs helm upgrade with the release's values and sets
// (--set a=b ...; --set-string for config.*, the ConfigMap's strings),
// waiting for every Deployment to be rolled out.
func upgradeRelease(t *testing.T, sets ...string) time.Duration {
	t.Helper()
	start := time.Now()
	args := []string{"upgrade", release, os.Getenv("E2E_CHART"), "--reuse-values", "--wait", "--timeout", "5m"}
	for _, s := range sets {
		flag := "--set"
		if strings.HasPrefix(s, "config.") {
			flag = "--set-string"
		}
		args = append(args, flag, s)
	}
	helm(t, args...)
	return time.Since(start)
}

// restoreReleaseAtEnd puts the release back at its current revision when
// the test ends, so the tests after it see the chart as e2e.sh installed it.
func restoreReleaseAtEnd(t *testing.T) {
	t.Helper()
	rev := releaseRevision(t)
	t.Cleanup(func() {
		helm(t, "rollback", release, fmt.Sprint(rev), "--wait", "--timeout", "5m")
	})
}

// ledgerBalanced checks an account's money: the balance equals its
// opening balance plus every ledger movement (billing.Reconcile), no job
// was charged twice, and the ledger moved exactly want in all.
func ledgerBalanced(t *testing.T, accountID string, want credits.Amount) {
	t.Helper()
	ctx := context.Background()
	bl := h.parts.API.Billing
	r, err := bl.Reconcile(ctx, accountID)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Breaks) > 0 || r.Balance != r.Opening+r.Archived.Credits+r.Ledger {
		t.Errorf("account %s: balance %s, opening %s + archived %s + ledger %s; breaks %v", accountID, r.Balance, r.Opening, r.Archived.Credits, r.Ledger, r.Breaks)
	}
	es, err := bl.Entries(ctx, accountID, "", 10_000)
	if err != nil {
		t.Fatal(err)
	}
	charges := map[string]int{}
	var moved credits.Amount
	for _, e := range es {
		if e.Kind == billing.KindCharge {
			charges[e.JobID]++
		}
		if e.Unit == "credits" {
			a, err := credits.Parse(e.Amount)
			if err != nil {
				t.Fatalf("ledger entry %s: amount %q", e.ID, e.Amount)
			}
			moved += a
		}
	}
	for job, n := range charges {
		if n > 1 {
			t.Errorf("account %s: job %s charged %d times", accountID, job, n)
		}
	}
	if moved != -want {
		t.Errorf("account %s: the ledger moved %s, want %s", accountID, moved, -want)
	}
}

// familyWorlds are the mail worlds of the email families (verification:
// a small Bench; lookup: a small People world) and their ConfigMaps, so
// that a job of every family can run at once.
type familyWorlds struct {
	verify *mailworld.World
	people []mailworld.PersonCase
}

func startFamilyWorlds(t *testing.T) *familyWorlds {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	vspec := mailworld.Bench(mailworld.BenchOptions{Domains: 20, PerDomain: 5, RTT: 5 * time.Millisecond, MaxConnsPerHost: 3, Seed: 7})
	freshDomains(t, vspec)
	vw, err := mailworld.Start(ctx, vspec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = vw.Close() })
	spec, people := mailworld.People(mailworld.PeopleOptions{Domains: 8, PerDomain: 5, RTT: 5 * time.Millisecond, Greylist: time.Second, Seed: 3})
	freshDomains(t, spec)
	lw, err := mailworld.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lw.Close() })
	for _, c := range []struct {
		name string
		w    *mailworld.World
	}{{envOr("E2E_VERIFY_CONFIGMAP", "bulkd-verify-e2e"), vw}, {envOr("E2E_LOOKUP_CONFIGMAP", "bulkd-lookup-e2e"), lw}} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: h.ns}, Data: map[string]string{
			"BULKD_DNS_SERVER":           c.w.DNSAddr(),
			"BULKD_SMTP_PORT":            fmt.Sprint(c.w.SMTPPort()),
			"BULKD_OUTBOUND_ALLOW_CIDRS": mailworld.AllowCIDRs,
			"BULKD_VERIFY_RETRY_DELAYS":  "2s,2s,2s",
		}}
		if err := h.k8s.Create(ctx, cm); apierrors.IsAlreadyExists(err) {
			err = h.k8s.Update(ctx, cm)
		} else if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.k8s.Delete(context.Background(), cm) })
	}
	return &familyWorlds{verify: vw, people: people}
}

// familyJob is one submitted job of one family, on an account of its own.
type familyJob struct {
	family   v1alpha1.Family
	id, key  string
	account  string
	path     string // the API path of the family's jobs: status at path + "/" + id
	done     string // the status the API says when it is done
	charge   credits.Amount
	opening  credits.Amount
	distinct int
}

// submitEveryFamily submits one job of each family: companyRows company
// rows, the verification world's addresses and the People world's people.
func (w *familyWorlds) submitEveryFamily(t *testing.T, tag string, companyRows int) []*familyJob {
	t.Helper()
	a := clusterAPI(t)
	var out []*familyJob

	opening := int64(100_000 + companyRows)
	acct, key := account(t, credits.Whole(opening))
	var rows []in
	for i := range companyRows {
		rows = append(rows, nu(fmt.Sprintf("https://www.linkedin.com/company/%s-%06d", tag, i)))
	}
	sub := a.Submit(key, rows)
	out = append(out, &familyJob{family: v1alpha1.FamilyCompanyEnrichment, id: sub.JobID, key: key, account: acct, path: companyapi.BulkPath,
		done: "completed", charge: credits.Whole(int64(companyRows)), opening: credits.Whole(opening), distinct: companyRows})

	acct, key = account(t, credits.Whole(opening))
	var emails []string
	for _, c := range w.verify.Cases() {
		emails = append(emails, c.Email)
	}
	code, body := a.Do(http.MethodPost, "/v1/bulk", key, map[string]any{"emails": emails})
	var vs struct {
		JobID       string `json:"job_id"`
		TotalEmails int    `json:"total_emails"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &vs) != nil {
		t.Fatalf("verification submit: %d %s", code, body)
	}
	out = append(out, &familyJob{family: v1alpha1.FamilyEmailVerification, id: vs.JobID, key: key, account: acct, path: "/v1/bulk",
		done: "complete", charge: credits.Amount(200 * int64(vs.TotalEmails)), opening: credits.Whole(opening), distinct: vs.TotalEmails})

	acct, key = account(t, credits.Whole(opening))
	type person struct {
		FirstName string `json:"first_name"`
		LastName  string `json:"last_name"`
		Domain    string `json:"domain"`
	}
	var people []person
	for _, p := range w.people {
		people = append(people, person{p.FirstName, p.LastName, p.Domain})
	}
	code, body = a.Do(http.MethodPost, "/v1/bulk-lookup", key, map[string]any{"input": people})
	var ls struct {
		JobID     string `json:"job_id"`
		TotalRows int    `json:"total_rows"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &ls) != nil {
		t.Fatalf("lookup submit: %d %s", code, body)
	}
	out = append(out, &familyJob{family: v1alpha1.FamilyEmailLookup, id: ls.JobID, key: key, account: acct, path: "/v1/bulk-lookup",
		done: "completed", charge: credits.Whole(int64(ls.TotalRows)), opening: credits.Whole(opening), distinct: ls.TotalRows})
	return out
}

// waitDone waits for the job to be done by the API and its BulkJob to be
// Completed, then checks its money: charged once, exactly its price.
func (j *familyJob) waitDone(t *testing.T, d time.Duration) {
	t.Helper()
	a := clusterAPI(t)
	waitFor(t, d, fmt.Sprintf("%s job %s done", j.family, j.id), func() bool {
		code, body := a.Do(http.MethodGet, j.path+"/"+j.id, j.key, nil)
		var st struct {
			Status string `json:"status"`
		}
		return code == http.StatusOK && json.Unmarshal(body, &st) == nil && st.Status == j.done
	})
	waitFor(t, time.Minute, "BulkJob "+j.id+" Completed", func() bool {
		bj, err := bulkJob(t, j.id)
		return err == nil && bj.Status.Phase == v1alpha1.PhaseCompleted
	})
	if j.family == v1alpha1.FamilyCompanyEnrichment {
		exactlyOnce(t, j.id, a.Wait(j.key, j.id, time.Minute))
	}
	if b := balance(t, j.account); b != j.opening-j.charge {
		t.Errorf("%s job %s: balance %s, want %s", j.family, j.id, b, j.opening-j.charge)
	}
	ledgerBalanced(t, j.account, j.charge)
}

// apiProbe asks the API (through its Service, like a client) every 100 ms
// until stopped, and counts the answers by status code.
type apiProbe struct {
	mu         sync.Mutex
	codes      map[int]int
	retryAfter int // 503s that carried Retry-After
	errs       []string
	stop, done chan struct{}
}

func probeAPI(t *testing.T, key, path string) *apiProbe {
	p := &apiProbe{codes: map[int]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	c := &http.Client{Timeout: 5 * time.Second}
	go func() {
		defer close(p.done)
		for {
			req, _ := http.NewRequest(http.MethodGet, h.apiURL+path, nil)
			req.Header.Set("X-API-Key", key)
			res, err := c.Do(req)
			p.mu.Lock()
			if err != nil {
				p.errs = append(p.errs, time.Now().Format("15:04:05.000")+" "+err.Error())
			} else {
				p.codes[res.StatusCode]++
				if res.StatusCode == http.StatusServiceUnavailable && res.Header.Get("Retry-After") != "" {
					p.retryAfter++
				}
				res.Body.Close()
			}
			p.mu.Unlock()
			select {
			case <-p.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return p
}

// Stop ends the probe and returns the answers: total, non-2xx ones that
// are not a 503 with Retry-After, and transport errors.
func (p *apiProbe) Stop() (total, bad int, errs []string) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	for code, n := range p.codes {
		total += n
		if code/100 != 2 {
			bad += n
		}
	}
	return total + len(p.errs), bad - p.retryAfter, p.errs
}
