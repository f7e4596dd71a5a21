package kube_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/test/lookupapi"
)

// lookupConfigMap is the email lookup family's own ConfigMap (its profile
// in startController): where the mail world is, and the retry delays.
const lookupConfigMap = "bulkd-lookup"

const (
	lookupPath          = "/v1/bulk-lookup"
	unlimitedLookupPath = "/v1/unlimited/bulk-lookup"
)

// The People worlds of the two tests: 20 domains of 5 people (one
// greylisting domain, two catch-all, three without mail). Their domain
// names are disjoint (checked), so what one test's finder learned in the
// shared Redis (patterns, catch-all probes) says nothing about the other's.
const (
	lookupSeedMetered   = 1
	lookupSeedUnlimited = 2
	lookupGreylist      = time.Second
)

func peopleWorld(seed int64) (mailworld.Spec, []mailworld.PersonCase) {
	return mailworld.People(mailworld.PeopleOptions{Domains: 20, PerDomain: 5, RTT: -1, Greylist: lookupGreylist, Seed: seed})
}

// startPeople runs the People world of seed and points the lookup family's
// pods at it: its DNS server and SMTP port, and retry delays longer than
// its greylisting period, so a retry round gets past it.
func startPeople(t *testing.T, seed int64) (*mailworld.World, []mailworld.PersonCase) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	spec, people := peopleWorld(seed)
	w, err := mailworld.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: lookupConfigMap, Namespace: namespace}, Data: map[string]string{
		"BULKD_DNS_SERVER":           w.DNSAddr(),
		"BULKD_SMTP_PORT":            fmt.Sprint(w.SMTPPort()),
		"BULKD_OUTBOUND_ALLOW_CIDRS": mailworld.AllowCIDRs, // the world is on loopback
		"BULKD_VERIFY_RETRY_DELAYS":  "1500ms,1500ms,1500ms",
	}}
	if err := h.k8s.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.k8s.Delete(context.Background(), cm) })
	return w, people
}

// TestLookupWorldsDisjoint: the two tests' worlds share no domain.
func TestLookupWorldsDisjoint(t *testing.T) {
	a, _ := peopleWorld(lookupSeedMetered)
	b, _ := peopleWorld(lookupSeedUnlimited)
	names := map[string]bool{}
	for _, d := range a.Domains {
		names[d.Name] = true
	}
	for _, d := range b.Domains {
		if names[d.Name] {
			t.Errorf("domain %s is in both lookup worlds: pick another seed", d.Name)
		}
	}
}

type lookupIn = lookupapi.In

type lookupRow = lookupapi.Row

type lookupStatus = lookupapi.Status

// lookupRun is what a bulk lookup in Kubernetes mode came to.
type lookupRun struct {
	id       string
	status   lookupStatus // the API's, completed
	statuses []string     // the API's statuses seen, in order, without repeats
	retrying bool         // the API showed rows waiting for a retry
	phases   map[v1alpha1.BulkJobPhase]bool
	bj       *v1alpha1.BulkJob // Completed
	rows     []lookupRow
}

// submission is the world's people, then duplicates of a few of them
// (other case, stray blanks), which are the same rows.
func submission(people []mailworld.PersonCase) []lookupIn {
	var in []lookupIn
	for _, p := range people {
		in = append(in, lookupIn{FirstName: p.FirstName, LastName: p.LastName, Domain: p.Domain})
	}
	for _, p := range people[:5] {
		in = append(in, lookupIn{FirstName: "  " + strings.ToUpper(p.FirstName), LastName: strings.ToLower(p.LastName) + " ", Domain: strings.ToUpper(p.Domain)})
	}
	return in
}

// runLookup submits rows to path with key and follows the job to the end:
// its BulkJob (family email_lookup, the unique rows, the metering) and the
// API's status until completed; then reads every result.
func runLookup(t *testing.T, path, key string, in []lookupIn, unique int, charge credits.Amount, metering v1alpha1.Metering) *lookupRun {
	t.Helper()
	a := h.kubeAPI(t)
	code, body := a.Do(http.MethodPost, path, key, map[string]any{"input": in})
	if code != http.StatusOK {
		t.Fatalf("submit: %d %s", code, body)
	}
	var sub struct {
		JobID           string         `json:"job_id"`
		Status          string         `json:"status"`
		TotalRows       int            `json:"total_rows"`
		CreditsConsumed credits.Amount `json:"credits_consumed"`
	}
	if err := json.Unmarshal(body, &sub); err != nil {
		t.Fatal(err)
	}
	if sub.Status != "submitted" || sub.TotalRows != unique || sub.CreditsConsumed != charge {
		t.Fatalf("submission %s: want %d unique rows, %s credits", body, unique, charge)
	}
	r := &lookupRun{id: sub.JobID, phases: map[v1alpha1.BulkJobPhase]bool{}}
	bj := h.bulkJob(t, r.id)
	if bj.Spec.Family != v1alpha1.FamilyEmailLookup || bj.Labels[v1alpha1.LabelFamily] != "email_lookup" || bj.Spec.Metering != metering ||
		bj.Spec.Rows != int64(unique) || bj.Spec.DistinctInputs != int64(unique) || bj.Spec.Shards != int32((unique+shardSize-1)/shardSize) {
		t.Fatalf("BulkJob %s: %+v", r.id, bj.Spec)
	}

	start := time.Now()
	waitFor(t, 60*time.Second, "the lookup job completed", func() bool {
		code, body := a.Do(http.MethodGet, path+"/"+r.id, key, nil)
		var st lookupStatus
		if code != http.StatusOK || json.Unmarshal(body, &st) != nil {
			t.Fatalf("status: %d %s", code, body)
		}
		if n := len(r.statuses); n == 0 || r.statuses[n-1] != st.Status {
			r.statuses = append(r.statuses, st.Status)
		}
		if st.Summary["total_retrying"] > 0 {
			r.retrying = true
		}
		if bj, err := r.get(); err == nil && bj.Status.Phase != "" {
			r.phases[bj.Status.Phase] = true
		}
		r.status = st
		return st.Status == "completed"
	})
	t.Logf("submit -> completed %v; API statuses %v, BulkJob phases %v", time.Since(start).Round(10*time.Millisecond), r.statuses, r.phases)
	r.bj = h.waitBulkJob(t, r.id, 10*time.Second, "Completed", completed)

	// Every row, in submission order (pages of 30).
	for off := 0; ; off += 30 {
		code, body := a.Do(http.MethodGet, fmt.Sprintf("%s/%s/results?limit=30&offset=%d", path, r.id, off), key, nil)
		if code != http.StatusOK {
			t.Fatalf("results: %d %s", code, body)
		}
		var page struct {
			TotalRows      int         `json:"total_rows"`
			TotalProcessed int         `json:"total_processed"`
			Results        []lookupRow `json:"results"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		if page.TotalRows != unique || page.TotalProcessed != unique {
			t.Fatalf("results page at %d: total_rows %d, total_processed %d, want %d", off, page.TotalRows, page.TotalProcessed, unique)
		}
		r.rows = append(r.rows, page.Results...)
		if off+30 >= page.TotalRows || len(page.Results) == 0 {
			break
		}
	}
	return r
}

func (r *lookupRun) get() (*v1alpha1.BulkJob, error) {
	var bj v1alpha1.BulkJob
	err := h.k8s.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: r.id}, &bj)
	return &bj, err
}

// check asserts what every bulk lookup must come to: the status counts
// add up, the BulkJob says the same by outcome name, greylisted rows went
// through retry Jobs, every row is the world's truth.
func (r *lookupRun) check(t *testing.T, people []mailworld.PersonCase, charge credits.Amount) {
	t.Helper()
	unique := int64(len(people))
	st := r.status
	found, notFound := st.Summary["total_found"], st.Summary["total_not_found"]
	if st.JobID != r.id || st.TotalRows != unique || st.TotalProcessed != unique || found+notFound != st.TotalProcessed ||
		st.Summary["total_retrying"] != 0 || st.Summary["total_pending"] != 0 || st.CreditsConsumed != charge ||
		st.CompletedAt == nil || st.CompletedAt.Before(st.CreatedAt) {
		t.Errorf("completed status %+v", st)
	}
	// running, then completed: nothing else.
	if !slices.Equal(r.statuses, []string{"running", "completed"}) {
		t.Errorf("API statuses %v, want running then completed", r.statuses)
	}

	greylisted := 0
	for _, p := range people {
		if p.Greylisted {
			greylisted++
		}
	}
	s := r.bj.Status
	want := []v1alpha1.OutcomeCount{{Name: "found", Rows: found}, {Name: "not_found", Rows: notFound}}
	if s.ProcessedRows != unique || s.Progress != "100%" || s.Retrying != 0 || s.NextRetryTime != nil || s.ShardsFailed != 0 ||
		s.ShardProgress != fmt.Sprintf("%d/%d", r.bj.Spec.Shards, r.bj.Spec.Shards) || !slices.Equal(s.Outcomes, want) {
		t.Errorf("BulkJob status %+v, want outcomes %v", s, want)
	}
	if greylisted > 0 && (s.RetryRounds < 1 || !r.retrying || !r.phases[v1alpha1.PhaseRetrying]) {
		t.Errorf("%d rows of a greylisting domain, yet retry rounds %d, API retrying %v, phases %v", greylisted, s.RetryRounds, r.retrying, r.phases)
	}
	t.Logf("BulkJob: outcomes %v, shards %s, retry rounds %d", s.Outcomes, s.ShardProgress, s.RetryRounds)

	// The shard Job and every retry Job: the BulkJob's, with the family's
	// label and ConfigMap; every retry Job ran `bulkd processor --retries`.
	var list batchv1.JobList
	if err := h.k8s.List(context.Background(), &list, client.InNamespace(namespace), client.MatchingLabels{v1alpha1.LabelJobID: r.id}); err != nil {
		t.Fatal(err)
	}
	retryJobs := 0
	for _, j := range list.Items {
		c := j.Spec.Template.Spec.Containers[0]
		if !metav1.IsControlledBy(&j, r.bj) || j.Labels[v1alpha1.LabelFamily] != "email_lookup" ||
			!slices.ContainsFunc(c.EnvFrom, func(e corev1.EnvFromSource) bool {
				return e.ConfigMapRef != nil && e.ConfigMapRef.Name == lookupConfigMap
			}) {
			t.Errorf("Job %s: labels %v, envFrom %+v", j.Name, j.Labels, c.EnvFrom)
		}
		if _, ok := j.Labels[v1alpha1.LabelRetryRound]; ok {
			retryJobs++
			if !slices.Contains(c.Args, "--retries") {
				t.Errorf("retry Job %s: args %v", j.Name, c.Args)
			}
		}
	}
	if len(list.Items) != 1+retryJobs || int32(retryJobs) != s.RetryRounds {
		t.Errorf("%d Jobs, %d of them retry Jobs, for %d retry rounds", len(list.Items), retryJobs, s.RetryRounds)
	}
	for _, run := range h.agent.History(r.id) {
		if run.ExitCode != 0 {
			t.Errorf("shard attempt %+v", run)
		}
	}

	// The rows: every unique row once, in submission order, the world's
	// truth.
	n := lookupapi.CheckAgainstTruth(t, people, r.rows)
	if int64(n.Found) != found {
		t.Errorf("%d found rows, the status says %d", n.Found, found)
	}
	t.Logf("%d/%d findable people found at their address (%d on the greylisting domain); %d rows found in all",
		n.FoundFindable, n.Findable, n.GreyFound, n.Found)
}

// Email lookup in Kubernetes mode, pay as you go: POST /v1/bulk-lookup
// makes a BulkJob of family email_lookup; real `bulkd processor` pods (the
// node agent) find the people with the family's settings (its ConfigMap:
// the mail world); the greylisting domain's rows wait for a retry (the
// BulkJob is Retrying, the API still running with total_retrying) and retry
// Jobs answer them; the job completes with every findable person found at
// the true address and no wrong address. Duplicates are one row, charged
// once: exactly 1 credit per unique row, kept at completion.
func TestEmailLookupBulkKube(t *testing.T) {
	w, people := startPeople(t, lookupSeedMetered)
	const initial = 500
	acct, key := h.account(t, credits.Whole(initial))
	unique := len(people)
	charge := credits.Whole(int64(unique))
	r := runLookup(t, lookupPath, key, submission(people), unique, charge, v1alpha1.MeteringCredits)
	r.check(t, people, charge)
	if got := h.balance(t, acct); got != credits.Whole(initial)-charge {
		t.Errorf("balance %s, want %s (1 credit per unique row)", got, credits.Whole(initial)-charge)
	}
	// Another key's job is not found; the results of a finished job stay.
	_, other := h.account(t, credits.Whole(1))
	if code, _ := h.kubeAPI(t).Do(http.MethodGet, lookupPath+"/"+r.id, other, nil); code != http.StatusNotFound {
		t.Errorf("another account's GET: %d, want 404", code)
	}
	ws := w.Stats()
	t.Logf("mail world: %d sessions, %d RCPTs, %d greylisted, %d refused with 421", ws.Sessions, ws.Rcpts, ws.Greylisted, ws.Rejected421)
	if ws.Rejected421 != 0 || ws.Greylisted == 0 {
		t.Errorf("mail world stats %+v: want no 421 and some greylisting", ws)
	}
}

// Email lookup in Kubernetes mode on an unlimited plan: POST
// /v1/unlimited/bulk-lookup takes the unique rows from the daily bulk
// search quota (GET /v1/unlimited/usage), no credits; the BulkJob is
// metered unlimited_quota and runs like any other.
func TestEmailLookupUnlimitedKube(t *testing.T) {
	w, people := startPeople(t, lookupSeedUnlimited)
	ctx := context.Background()
	acct, _ := h.account(t, 0)
	if err := h.parts.API.Accounts.SetPlan(ctx, acct, accounts.PlanStarter, accounts.StateActive, time.Now().Add(30*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	key, _, err := h.parts.API.Accounts.CreateKey(ctx, acct, accounts.Unlimited)
	if err != nil {
		t.Fatal(err)
	}
	type usage struct {
		BulkSearchesUsed      int64 `json:"bulk_searches_used"`
		BulkSearchesLimit     int64 `json:"bulk_searches_limit"`
		BulkSearchesRemaining int64 `json:"bulk_searches_remaining"`
	}
	readUsage := func() usage {
		code, body := h.kubeAPI(t).Do(http.MethodGet, "/v1/unlimited/usage", key, nil)
		var u usage
		if code != http.StatusOK || json.Unmarshal(body, &u) != nil {
			t.Fatalf("usage: %d %s", code, body)
		}
		return u
	}
	before := readUsage()
	if before.BulkSearchesUsed != 0 {
		t.Fatalf("usage before %+v", before)
	}
	unique := len(people)
	r := runLookup(t, unlimitedLookupPath, key, submission(people), unique, 0, v1alpha1.MeteringUnlimitedQuota)
	r.check(t, people, 0)
	if u := readUsage(); u.BulkSearchesUsed != int64(unique) || u.BulkSearchesRemaining != u.BulkSearchesLimit-int64(unique) {
		t.Errorf("usage after %+v, want %d bulk searches used", u, unique)
	}
	if got := h.balance(t, acct); got != 0 {
		t.Errorf("credits moved on an unlimited account: balance %s", got)
	}
	if ws := w.Stats(); ws.Rejected421 != 0 {
		t.Errorf("%d sessions refused with 421", ws.Rejected421)
	}
}
