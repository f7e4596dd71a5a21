//go:build e2ecluster

package cluster_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/mailworld"
)

// envOr is an E2E_* setting of e2e.sh, or def.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// (d) Email verification on the real cluster, polite across pods. The
// suite's mail world (authoritative DNS and ~220 SMTP hosts on 127.x.y.z,
// every host refusing a 4th concurrent session with 421) listens on the
// loopback of the cluster's network namespace. The email_verification
// family's pods run with hostNetwork (e2e.sh's processor.families), so they
// share that namespace and reach it; the family's ConfigMap, created here,
// points them at it.
//
// 4,000 addresses (Bench with 400 domains: jobs.shardSize is 2,000, so 2
// shards; 2,000 addresses would be one) run as 2 processor pods at once
// (the family's parallelismCap 2). The addresses are grouped by domain
// before sharding, and ~40% of the domains are on 4 shared provider hosts,
// so both pods talk to the same hosts at the same time: the session cap of
// 3 per MX host, shared through Redis, must hold across them (no 421, no
// host ever above 3 sessions). A few domains greylist for 2 s, so the job
// goes through Retrying and a retry Job before it completes; every answer
// must then be the world's.
func TestEmailVerificationPoliteAcrossPods(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const (
		domains, perDomain = 400, 10
		unique             = domains * perDomain
		sessionsPerHost    = 3
	)
	spec := mailworld.Bench(mailworld.BenchOptions{Domains: domains, PerDomain: perDomain, RTT: 20 * time.Millisecond, MaxConnsPerHost: sessionsPerHost, Seed: 1})
	freshDomains(t, spec)
	w, err := mailworld.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	greylisted := map[string]bool{}
	for _, d := range spec.Domains {
		if d.Greylist > 0 {
			greylisted[strings.ToLower(d.Name)] = true
		}
	}
	providers := []string{"mx.bigmail.test", "mx.postbox.test", "mx.mailhaus.test", "mx.inboxly.test"}

	// The family's ConfigMap: read by its pods when they start, so it is
	// there before the submission.
	cmName := envOr("E2E_VERIFY_CONFIGMAP", "bulkd-verify-e2e")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cmName, Namespace: h.ns}, Data: map[string]string{
		"BULKD_DNS_SERVER":             w.DNSAddr(),
		"BULKD_SMTP_PORT":              fmt.Sprint(w.SMTPPort()),
		"BULKD_OUTBOUND_ALLOW_CIDRS":   mailworld.AllowCIDRs, // hostNetwork pods, the world on the node's loopback
		"BULKD_SMTP_SESSIONS_PER_HOST": fmt.Sprint(sessionsPerHost),
		"BULKD_VERIFY_RETRY_DELAYS":    "3s,3s",
	}}
	if err := h.k8s.Create(ctx, cm); apierrors.IsAlreadyExists(err) {
		err = h.k8s.Update(ctx, cm)
	} else if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.k8s.Delete(context.Background(), cm) })

	acct, key := account(t, credits.Whole(1000))
	a := clusterAPI(t)
	var emails []string
	for _, c := range w.Cases() {
		emails = append(emails, c.Email)
	}
	start := time.Now()
	code, body := a.Do(http.MethodPost, "/v1/bulk", key, map[string]any{"emails": emails})
	timing(t, fmt.Sprintf("(d) verification: submit %d addresses", len(emails)), time.Since(start))
	if code != http.StatusOK {
		t.Fatalf("submit: %d %s", code, body)
	}
	var sub struct {
		JobID           string         `json:"job_id"`
		Status          string         `json:"status"`
		TotalEmails     int            `json:"total_emails"`
		CreditsConsumed credits.Amount `json:"credits_consumed"`
	}
	if err := json.Unmarshal(body, &sub); err != nil {
		t.Fatal(err)
	}
	charge := credits.Amount(200 * unique) // 0.2 credits per unique address
	if sub.Status != "submitted" || sub.TotalEmails != unique || sub.CreditsConsumed != charge {
		t.Fatalf("submission %s: want %d addresses, %s credits", body, unique, charge)
	}
	id := sub.JobID
	pods := trackPods(t, id)
	defer pods.stop()

	bj, err := bulkJob(t, id)
	if err != nil {
		t.Fatalf("BulkJob of the submission: %v", err)
	}
	if bj.Spec.Family != v1alpha1.FamilyEmailVerification || bj.Spec.DistinctInputs != unique || bj.Spec.Shards != 2 {
		t.Fatalf("BulkJob spec %+v: want email_verification, %d inputs, 2 shards", bj.Spec, unique)
	}

	// Until complete: the API's statuses and the BulkJob's phases on the way.
	statuses, phases := map[string]bool{}, map[v1alpha1.BulkJobPhase]bool{}
	var st map[string]any
	var firstPass time.Duration
	defer func() { t.Logf("statuses %v, phases %v, last status %v", statuses, phases, st) }()
	waitFor(t, 3*time.Minute, "the verification job complete", func() bool {
		code, body := a.Do(http.MethodGet, "/v1/bulk/"+id, key, nil)
		st = map[string]any{}
		if code != http.StatusOK || json.Unmarshal(body, &st) != nil {
			t.Fatalf("status: %d %s", code, body)
		}
		s, _ := st["status"].(string)
		statuses[s] = true
		if s != "in_progress" && firstPass == 0 {
			firstPass = time.Since(start)
		}
		if bj, err := bulkJob(t, id); err == nil {
			phases[bj.Status.Phase] = true
		}
		return s == "complete"
	})
	timing(t, "(d) verification: submit -> every address answered once (shards done)", firstPass)
	timing(t, "(d) verification: submit -> complete (after the retry round)", time.Since(start))
	if !statuses["partial_complete_retrying"] {
		t.Errorf("the API never said partial_complete_retrying: %v", statuses)
	}
	if !phases[v1alpha1.PhaseRetrying] {
		t.Errorf("the BulkJob was never seen Retrying: %v", phases)
	}

	waitFor(t, 30*time.Second, "BulkJob Completed", func() bool {
		bj, err = bulkJob(t, id)
		return err == nil && bj.Status.Phase == v1alpha1.PhaseCompleted
	})

	// Every result: the world's answer.
	rows := verificationResults(t, key, id)
	if len(rows) != unique {
		t.Fatalf("%d result rows, want %d", len(rows), unique)
	}
	outcomes := map[string]int64{}
	right, knowable, falseDeliverable, retried := 0, 0, 0, 0
	for _, r := range rows {
		c, ok := w.Expect(r.Input)
		if !ok {
			t.Errorf("row for %q, which is not in the world", r.Input)
			continue
		}
		outcomes[r.Status]++
		if r.Status == "deliverable" && c.Status != "deliverable" {
			falseDeliverable++
			t.Errorf("FALSE DELIVERABLE %s: %+v", r.Input, r)
		}
		if c.Knowable {
			knowable++
			if r.Status == c.Status && r.Reason == c.Reason {
				right++
			} else {
				t.Errorf("%s: %s/%s, want %s/%s (attempts %d)", r.Input, r.Status, r.Reason, c.Status, c.Reason, r.Attempts)
			}
		}
		grey := greylisted[r.Email[strings.LastIndexByte(r.Email, '@')+1:]]
		if grey {
			retried++
		}
		if r.Retrying || (grey && r.Attempts < 2) || (!grey && r.Attempts != 1) {
			t.Errorf("%s (greylisted domain: %v): retrying %v after %d attempts", r.Input, grey, r.Retrying, r.Attempts)
		}
	}
	t.Logf("accuracy: %d/%d knowable answers right, %d false deliverable; %d addresses of %d greylisting domains answered after a retry; outcomes %v",
		right, knowable, falseDeliverable, retried, len(greylisted), outcomes)
	if retried == 0 {
		t.Error("no address of a greylisting domain: the world has none?")
	}
	if got, want := balance(t, acct), credits.Whole(1000)-charge+credits.Amount(200*outcomes["unknown"]); got != want {
		t.Errorf("balance %s, want %s (%d unknown refunded)", got, want, outcomes["unknown"])
	}

	// The BulkJob: family, shards, the retry round, outcomes by name.
	s := bj.Status
	var want []v1alpha1.OutcomeCount
	for _, name := range slices.Sorted(maps.Keys(outcomes)) {
		want = append(want, v1alpha1.OutcomeCount{Name: name, Rows: outcomes[name]})
	}
	if s.ProcessedRows != unique || s.ShardsSucceeded != 2 || s.ShardsFailed != 0 || s.Progress != "100%" || s.ShardProgress != "2/2" ||
		s.RetryRounds < 1 || s.Retrying != 0 || !slices.Equal(s.Outcomes, want) {
		t.Errorf("BulkJob status %+v, want outcomes %v", s, want)
	}
	t.Logf("BulkJob: phase %s, shards %s, retry rounds %d, outcomes %v", s.Phase, s.ShardProgress, s.RetryRounds, s.Outcomes)
	// What `kubectl get bulkjobs` prints: the server-side table.
	if cols := bulkJobTable(t, id); cols["Family"] != "email_verification" || cols["Phase"] != "Completed" || cols["Shards"] != "2/2" {
		t.Errorf("kubectl get bulkjobs columns %v", cols)
	} else {
		t.Logf("kubectl get bulkjobs: %v", cols)
	}

	// The shard Job: 2 indexes, 2 at once, on the node's network.
	job := waitJobFinished(t, id, 30*time.Second)
	tmpl := job.Spec.Template.Spec
	if *job.Spec.Completions != 2 || *job.Spec.Parallelism != 2 || job.Status.CompletedIndexes != "0,1" || job.Status.Succeeded != 2 ||
		!tmpl.HostNetwork || tmpl.DNSPolicy != corev1.DNSClusterFirstWithHostNet ||
		!slices.ContainsFunc(tmpl.Containers[0].EnvFrom, func(e corev1.EnvFromSource) bool { return e.ConfigMapRef != nil && e.ConfigMapRef.Name == cmName }) {
		t.Errorf("shard Job: spec %+v status %+v", job.Spec, job.Status)
	}
	retry := waitJobFinished(t, id+"-retry-1", 30*time.Second)
	if retry.Status.Succeeded != 1 || !retry.Spec.Template.Spec.HostNetwork {
		t.Errorf("retry Job %s: %+v", retry.Name, retry.Status)
	}

	// The shard pods: one per index, both on the node's address, their
	// work overlapping in time (each logs "shard done" with its elapsed
	// time).
	maxRunning := pods.stop()
	nodeIP := envOr("E2E_NODE_IP", "10.254.0.1")
	var shardPods []corev1.Pod
	for _, p := range jobPods(t, id) {
		if _, isRetry := p.Labels[v1alpha1.LabelRetryRound]; !isRetry {
			shardPods = append(shardPods, p)
		}
	}
	if len(shardPods) != 2 {
		t.Fatalf("%d shard pods, want 2", len(shardPods))
	}
	type span struct{ from, to time.Time }
	spans := map[int]span{}
	for _, p := range shardPods {
		if p.Status.Phase != corev1.PodSucceeded || !p.Spec.HostNetwork || p.Status.PodIP != nodeIP {
			t.Errorf("pod %s: phase %s hostNetwork %v IP %s (node %s)", p.Name, p.Status.Phase, p.Spec.HostNetwork, p.Status.PodIP, nodeIP)
		}
		done, elapsed := shardDone(t, &p)
		spans[podIndex(&p)] = span{done.Add(-elapsed), done}
		t.Logf("pod %s (shard %d): worked %s, from %s to %s", p.Name, podIndex(&p), elapsed.Round(time.Millisecond),
			done.Add(-elapsed).Format("15:04:05.000"), done.Format("15:04:05.000"))
	}
	s0, s1 := spans[0], spans[1]
	end, begin := s0.to, s0.from
	if s1.to.Before(end) {
		end = s1.to
	}
	if s1.from.After(begin) {
		begin = s1.from
	}
	overlap := end.Sub(begin)
	t.Logf("the 2 shard pods worked at the same time for %s; at most %d shard pods Running at once (as the API saw them)", overlap.Round(time.Millisecond), maxRunning)
	if overlap <= 0 {
		t.Errorf("the shard pods did not work at the same time: %+v", spans)
	}

	// Politeness across both pods and the retry pod.
	ws := w.Stats()
	t.Logf("mail world: %d sessions, %d refused with 421, %d RCPTs, %d greylisted (450), %d 452", ws.Sessions, ws.Rejected421, ws.Rcpts, ws.Greylisted, ws.Replies452)
	if ws.Rejected421 != 0 {
		t.Errorf("%d sessions refused with 421: the per-host cap did not hold across the pods", ws.Rejected421)
	}
	over, atCap := 0, 0
	for host, n := range ws.MaxConcurrent {
		if n > sessionsPerHost {
			over++
			t.Errorf("host %s saw %d concurrent sessions, cap %d", host, n, sessionsPerHost)
		}
		if n == sessionsPerHost {
			atCap++
		}
	}
	sharedAtCap := 0
	for _, p := range providers {
		hs := ws.PerHost[p]
		t.Logf("shared host %s: %d sessions, %d RCPTs, at most %d at once", p, hs.Sessions, hs.Rcpts, hs.MaxConcurrent)
		if hs.MaxConcurrent == sessionsPerHost {
			sharedAtCap++
		}
	}
	// The cap was what held the pods back, not a lack of work.
	if sharedAtCap == 0 {
		t.Errorf("no shared host ever had %d sessions open: the cap was never tested", sessionsPerHost)
	}
	t.Logf("%d hosts; %d reached the cap of %d concurrent sessions, %d went over", len(ws.MaxConcurrent), atCap, sessionsPerHost, over)
}

// verifyResultRow is one row of GET /v1/bulk/{id}/results.
type verifyResultRow struct {
	Input    string `json:"input"`
	Email    string `json:"email"`
	Status   string `json:"status"`
	Reason   string `json:"reason"`
	Retrying bool   `json:"retrying"`
	Attempts int    `json:"attempts"`
}

// verificationResults pages through a verification job's results.
func verificationResults(t *testing.T, key, id string) []verifyResultRow {
	t.Helper()
	a := clusterAPI(t)
	var all []verifyResultRow
	for off := 0; ; off += 500 {
		code, body := a.Do(http.MethodGet, fmt.Sprintf("/v1/bulk/%s/results?limit=500&offset=%d", id, off), key, nil)
		if code != http.StatusOK {
			t.Fatalf("results: %d %s", code, body)
		}
		var page struct {
			TotalRows int               `json:"total_rows"`
			Results   []verifyResultRow `json:"results"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		all = append(all, page.Results...)
		if off+500 >= page.TotalRows || len(page.Results) == 0 {
			return all
		}
	}
}

// bulkJobTable returns the columns `kubectl get bulkjobs ID` prints, from
// the API server's table rendering of the CRD's printer columns.
func bulkJobTable(t *testing.T, id string) map[string]string {
	t.Helper()
	hc, err := rest.HTTPClientFor(h.cfg)
	if err != nil {
		t.Fatal(err)
	}
	u := fmt.Sprintf("%s/apis/%s/namespaces/%s/bulkjobs/%s", strings.TrimSuffix(h.cfg.Host, "/"), v1alpha1.GroupVersion, h.ns, id)
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var table metav1.Table
	if err := json.NewDecoder(res.Body).Decode(&table); err != nil || len(table.Rows) != 1 {
		t.Fatalf("table of BulkJob %s: %d %v (%d rows)", id, res.StatusCode, err, len(table.Rows))
	}
	cols := map[string]string{}
	for i, c := range table.ColumnDefinitions {
		if i < len(table.Rows[0].Cells) {
			cols[c.Name] = fmt.Sprint(table.Rows[0].Cells[i])
		}
	}
	return cols
}

// shardDone reads a shard pod's "shard done" log line: when it was written
// and how long the shard took.
func shardDone(t *testing.T, p *corev1.Pod) (time.Time, time.Duration) {
	t.Helper()
	raw, err := h.cs.CoreV1().Pods(h.ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: "processor"}).DoRaw(context.Background())
	if err != nil {
		t.Fatalf("logs of %s: %v", p.Name, err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var line struct {
			Time    time.Time `json:"time"`
			Msg     string    `json:"msg"`
			Elapsed string    `json:"elapsed"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Msg != "shard done" {
			continue
		}
		d, err := time.ParseDuration(line.Elapsed)
		if err != nil {
			t.Fatalf("pod %s: %q", p.Name, sc.Text())
		}
		return line.Time, d
	}
	t.Fatalf("pod %s logged no \"shard done\":\n%s", p.Name, raw)
	return time.Time{}, 0
}

// podTracker watches a job's shard pods and keeps the most it saw Running
// at once.
type podTracker struct {
	mu      sync.Mutex
	running map[string]bool
	max     int
	cancel  context.CancelFunc
	done    chan struct{}
}

func trackPods(t *testing.T, id string) *podTracker {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pt := &podTracker{running: map[string]bool{}, cancel: cancel, done: make(chan struct{})}
	wi, err := h.cs.CoreV1().Pods(h.ns).Watch(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelJobID + "=" + id + "," + "!" + v1alpha1.LabelRetryRound})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		defer close(pt.done)
		defer wi.Stop()
		for ev := range wi.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			pt.mu.Lock()
			pt.running[p.Name] = ev.Type != watch.Deleted && p.Status.Phase == corev1.PodRunning
			n := 0
			for _, r := range pt.running {
				if r {
					n++
				}
			}
			pt.max = max(pt.max, n)
			pt.mu.Unlock()
		}
	}()
	return pt
}

// stop ends the watch and returns the most shard pods seen Running at once.
func (pt *podTracker) stop() int {
	pt.cancel()
	<-pt.done
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return pt.max
}
