//go:build e2ecluster

package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/test/lookupapi"
)

// (e) Email lookup on the real cluster. The suite's People world (60
// company domains of 5 people: employees under one address pattern per
// domain, catch-all, greylisting and mail-less domains; authoritative DNS
// and SMTP hosts on 127.x.y.z) listens on the loopback of the cluster's
// network namespace; the email_lookup family's pods run with hostNetwork
// (e2e.sh's processor.families) and their ConfigMap, created here, points
// them at it. A pay-as-you-go job of 300 people (plus duplicates) runs as a
// BulkJob of family email_lookup: a shard pod, then retry pods for the
// greylisting domains' people; every answer must be the world's. Then an
// unlimited-plan submission of 100 of them, metered by the daily bulk
// search quota, answered with the patterns the first job learned (shared
// through Redis).
func TestEmailLookupBulk(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	spec, people := mailworld.People(mailworld.PeopleOptions{Domains: 60, PerDomain: 5, RTT: 10 * time.Millisecond, Greylist: time.Second, Seed: 3})
	freshDomains(t, spec)
	w, err := mailworld.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	greylisted := 0
	for _, p := range people {
		if p.Greylisted {
			greylisted++
		}
	}
	if greylisted == 0 {
		t.Fatal("the world has no greylisting domain with people: pick another seed")
	}

	// The family's ConfigMap, read by its pods when they start.
	cmName := envOr("E2E_LOOKUP_CONFIGMAP", "bulkd-lookup-e2e")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cmName, Namespace: h.ns}, Data: map[string]string{
		"BULKD_DNS_SERVER":           w.DNSAddr(),
		"BULKD_SMTP_PORT":            fmt.Sprint(w.SMTPPort()),
		"BULKD_OUTBOUND_ALLOW_CIDRS": mailworld.AllowCIDRs, // hostNetwork pods, the world on the node's loopback
		"BULKD_VERIFY_RETRY_DELAYS":  "2s,2s,2s",
	}}
	if err := h.k8s.Create(ctx, cm); apierrors.IsAlreadyExists(err) {
		err = h.k8s.Update(ctx, cm)
	} else if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.k8s.Delete(context.Background(), cm) })

	// Pay as you go: 1 credit per unique row.
	const initial = 1000
	acct, key := account(t, credits.Whole(initial))
	unique := len(people)
	charge := credits.Whole(int64(unique))
	r := clusterLookup(t, "(e) lookup", "/v1/bulk-lookup", key, people, charge, v1alpha1.MeteringCredits)
	r.check(t, people, charge)
	if greylisted > 0 && (r.bj.Status.RetryRounds < 1 || !r.retrying || !r.phases[v1alpha1.PhaseRetrying]) {
		t.Errorf("%d people on greylisting domains, yet retry rounds %d, API retrying %v, phases %v",
			greylisted, r.bj.Status.RetryRounds, r.retrying, r.phases)
	}
	if got := balance(t, acct); got != credits.Whole(initial)-charge {
		t.Errorf("balance %s, want %s (1 credit per unique row)", got, credits.Whole(initial)-charge)
	}

	// The shard Job and the retry Jobs: the family's, on the node's network.
	job := waitJobFinished(t, r.id, 30*time.Second)
	tmpl := job.Spec.Template.Spec
	if job.Labels[v1alpha1.LabelFamily] != "email_lookup" || *job.Spec.Completions != 1 || job.Status.Succeeded != 1 ||
		!tmpl.HostNetwork || tmpl.DNSPolicy != corev1.DNSClusterFirstWithHostNet ||
		!slices.ContainsFunc(tmpl.Containers[0].EnvFrom, func(e corev1.EnvFromSource) bool { return e.ConfigMapRef != nil && e.ConfigMapRef.Name == cmName }) {
		t.Errorf("shard Job: labels %v spec %+v status %+v", job.Labels, job.Spec, job.Status)
	}
	for round := int32(1); round <= r.bj.Status.RetryRounds; round++ {
		rj := waitJobFinished(t, fmt.Sprintf("%s-retry-%d", r.id, round), 30*time.Second)
		if rj.Status.Succeeded != 1 || !rj.Spec.Template.Spec.HostNetwork || rj.Labels[v1alpha1.LabelFamily] != "email_lookup" {
			t.Errorf("retry Job %s: labels %v status %+v", rj.Name, rj.Labels, rj.Status)
		}
	}
	nodeIP := envOr("E2E_NODE_IP", "10.254.0.1")
	pods := jobPods(t, r.id)
	for _, p := range pods {
		if p.Status.Phase != corev1.PodSucceeded || !p.Spec.HostNetwork || p.Status.PodIP != nodeIP || p.Labels[v1alpha1.LabelFamily] != "email_lookup" {
			t.Errorf("pod %s: phase %s hostNetwork %v IP %s labels %v", p.Name, p.Status.Phase, p.Spec.HostNetwork, p.Status.PodIP, p.Labels)
		}
	}
	if want := 1 + int(r.bj.Status.RetryRounds); len(pods) != want {
		t.Errorf("%d processor pods, want %d (1 shard, %d retry rounds)", len(pods), want, r.bj.Status.RetryRounds)
	}
	cold := w.Stats()
	t.Logf("mail world after the first job: %d sessions, %d RCPTs (%.2f per row), %d greylisted (450), %d refused with 421",
		cold.Sessions, cold.Rcpts, float64(cold.Rcpts)/float64(unique), cold.Greylisted, cold.Rejected421)
	if cold.Rejected421 != 0 {
		t.Errorf("%d sessions refused with 421", cold.Rejected421)
	}

	// Unlimited plan: 100 of the same people, from the daily bulk search
	// quota, no credits.
	uacct, _ := account(t, 0)
	if err := h.parts.API.Accounts.SetPlan(ctx, uacct, accounts.PlanStarter, accounts.StateActive, time.Now().Add(30*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	ukey, _, err := h.parts.API.Accounts.CreateKey(ctx, uacct, accounts.Unlimited)
	if err != nil {
		t.Fatal(err)
	}
	some := people[:100]
	u := clusterLookup(t, "(e) unlimited lookup", "/v1/unlimited/bulk-lookup", ukey, some, 0, v1alpha1.MeteringUnlimitedQuota)
	u.check(t, some, 0)
	code, body := clusterAPI(t).Do(http.MethodGet, "/v1/unlimited/usage", ukey, nil)
	var usage struct {
		BulkSearchesUsed  int64 `json:"bulk_searches_used"`
		BulkSearchesLimit int64 `json:"bulk_searches_limit"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &usage) != nil || usage.BulkSearchesUsed != int64(len(some)) {
		t.Errorf("usage: %d %s, want %d bulk searches used", code, body, len(some))
	}
	if got := balance(t, uacct); got != 0 {
		t.Errorf("credits moved on an unlimited account: %s", got)
	}
	warm := w.Stats()
	t.Logf("mail world for the unlimited job: %d RCPTs for %d rows (learned patterns), %d refused with 421",
		warm.Rcpts-cold.Rcpts, len(some), warm.Rejected421)
	if warm.Rejected421 != 0 {
		t.Errorf("%d sessions refused with 421", warm.Rejected421)
	}
}

type lookupRow = lookupapi.Row

type lookupStatus = lookupapi.Status

// lookupRun is what one bulk lookup on the cluster came to.
type lookupRun struct {
	id       string
	status   lookupStatus // the API's, completed
	statuses []string     // the API's statuses seen, in order, without repeats
	retrying bool         // the API showed rows waiting for a retry
	phases   map[v1alpha1.BulkJobPhase]bool
	bj       *v1alpha1.BulkJob // Completed
	table    map[string]string // `kubectl get bulkjobs` when Completed
	rows     []lookupRow
}

// clusterLookup submits people (and duplicates of five of them: other
// case, stray blanks) to path and follows the job to the end: its BulkJob
// (family email_lookup, one row per unique person, the metering), the
// API's status until completed, `kubectl get bulkjobs` on the way; then
// reads every result.
func clusterLookup(t *testing.T, what, path, key string, people []mailworld.PersonCase, charge credits.Amount, metering v1alpha1.Metering) *lookupRun {
	t.Helper()
	type in struct {
		FirstName string `json:"first_name"`
		LastName  string `json:"last_name"`
		Domain    string `json:"domain"`
	}
	var rows []in
	for _, p := range people {
		rows = append(rows, in{p.FirstName, p.LastName, p.Domain})
	}
	for _, p := range people[:5] {
		rows = append(rows, in{"  " + strings.ToUpper(p.FirstName), strings.ToLower(p.LastName) + " ", strings.ToUpper(p.Domain)})
	}
	unique := len(people)
	a := clusterAPI(t)
	start := time.Now()
	code, body := a.Do(http.MethodPost, path, key, map[string]any{"input": rows})
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
		t.Fatalf("submission %s: want %d unique rows of %d, %s credits", body, unique, len(rows), charge)
	}
	r := &lookupRun{id: sub.JobID, phases: map[v1alpha1.BulkJobPhase]bool{}}
	bj, err := bulkJob(t, r.id)
	if err != nil {
		t.Fatalf("BulkJob of the submission: %v", err)
	}
	if bj.Spec.Family != v1alpha1.FamilyEmailLookup || bj.Spec.Metering != metering || bj.Spec.Rows != int64(unique) ||
		bj.Spec.DistinctInputs != int64(unique) || bj.Spec.Shards != 1 {
		t.Fatalf("BulkJob spec %+v: want email_lookup, %s, %d rows, 1 shard", bj.Spec, metering, unique)
	}

	var firstPass time.Duration
	defer func() {
		t.Logf("%s: API statuses %v, BulkJob phases %v, last status %+v", what, r.statuses, r.phases, r.status)
	}()
	waitFor(t, 3*time.Minute, what+" completed", func() bool {
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
		if firstPass == 0 && st.Summary["total_pending"] == 0 {
			firstPass = time.Since(start)
		}
		if bj, err := bulkJob(t, r.id); err == nil && bj.Status.Phase != "" {
			if bj.Status.Phase == v1alpha1.PhaseRetrying && !r.phases[v1alpha1.PhaseRetrying] {
				t.Logf("%s: kubectl get bulkjobs while Retrying: %v", what, bulkJobTable(t, r.id))
			}
			r.phases[bj.Status.Phase] = true
		}
		r.status = st
		return st.Status == "completed"
	})
	timing(t, fmt.Sprintf("%s: submit -> every row answered once (%d rows)", what, unique), firstPass)
	timing(t, fmt.Sprintf("%s: submit -> completed", what), time.Since(start))
	waitFor(t, 30*time.Second, "BulkJob Completed", func() bool {
		bj, err = bulkJob(t, r.id)
		return err == nil && bj.Status.Phase == v1alpha1.PhaseCompleted
	})
	r.bj = bj
	r.table = bulkJobTable(t, r.id)
	t.Logf("%s: kubectl get bulkjobs: %v", what, r.table)

	for off := 0; ; off += 500 {
		code, body := a.Do(http.MethodGet, fmt.Sprintf("%s/%s/results?limit=500&offset=%d", path, r.id, off), key, nil)
		if code != http.StatusOK {
			t.Fatalf("results: %d %s", code, body)
		}
		var page struct {
			TotalRows int         `json:"total_rows"`
			Results   []lookupRow `json:"results"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		r.rows = append(r.rows, page.Results...)
		if off+500 >= page.TotalRows || len(page.Results) == 0 {
			break
		}
	}
	return r
}

// check asserts what every bulk lookup must come to: the status counts add
// up, the BulkJob and `kubectl get bulkjobs` say the same, every row is the
// world's truth (every findable person found at the true address, no wrong
// address off catch-all domains).
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
	if !slices.Equal(r.statuses, []string{"running", "completed"}) {
		t.Errorf("API statuses %v, want running then completed", r.statuses)
	}
	s := r.bj.Status
	want := []v1alpha1.OutcomeCount{{Name: "found", Rows: found}, {Name: "not_found", Rows: notFound}}
	if s.ProcessedRows != unique || s.Progress != "100%" || s.ShardProgress != "1/1" || s.ShardsSucceeded != 1 || s.ShardsFailed != 0 ||
		s.Retrying != 0 || s.NextRetryTime != nil || !slices.Equal(s.Outcomes, want) {
		t.Errorf("BulkJob status %+v, want outcomes %v", s, want)
	}
	if c := r.table; c["Family"] != "email_lookup" || c["Phase"] != "Completed" || c["Rows"] != fmt.Sprint(unique) ||
		c["Processed"] != fmt.Sprint(unique) || c["Progress"] != "100%" || c["Shards"] != "1/1" {
		t.Errorf("kubectl get bulkjobs columns %v", c)
	}

	n := lookupapi.CheckAgainstTruth(t, people, r.rows)
	if int64(n.Found) != found {
		t.Errorf("%d found rows, the status says %d", n.Found, found)
	}
	t.Logf("accuracy: %d/%d findable people found at their address (%d on greylisting domains), %d on catch-all domains, %d rows found in all; BulkJob outcomes %v, retry rounds %d",
		n.FoundFindable, n.Findable, n.GreyFound, n.CatchAll, n.Found, s.Outcomes, s.RetryRounds)
}
