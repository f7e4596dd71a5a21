//go:build e2ecluster

package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/admin"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/internal/serve"
	proof "github.com/bulkd/bulkd/test/privacy"
)

// The marker person of the Kubernetes-mode proof (docs/privacy.md).
const (
	pmFirst  = "Zelda"
	pmLast   = "Quistorpova"
	pmDomain = "privtest.example"
	pmEmail  = "zelda.quistorpova@privtest.example"
)

var pmMarkers = []string{"zelda.quistorpova", "quistorpova"}

type pmSubmission struct {
	path string
	body any
}

// pmJobs are jobs of every family, each naming the marker.
func pmJobs() []pmSubmission {
	return []pmSubmission{
		{"/v1/bulk", map[string]any{"emails": []string{pmEmail, "john.smith@" + pmDomain, "anna.berg@" + pmDomain}}},
		{"/v1/bulk-lookup", map[string]any{"input": []map[string]string{
			{"first_name": pmFirst, "last_name": pmLast, "domain": pmDomain},
			{"first_name": "John", "last_name": "Smith", "domain": pmDomain}}}},
		{"/v1/company-enrichment/bulk", map[string]any{"input": []map[string]string{
			{"network_url": "https://www.linkedin.com/company/zelda-quistorpova-consulting"}, {"domain": "example.com"}}}},
	}
}

// TestPrivacyLeavesNothingInCluster is docs/privacy.md's proof in
// Kubernetes mode: jobs of every family naming a marker address and name
// are deleted (DELETE), expired (their BulkJob's expiry reached: the
// controller deletes it and its finalizer the data) and erased (`bulkd
// admin erase` with the chart's privacy Secret); after each, every Redis
// key and value, every BulkJob, Job, ConfigMap and Event of the namespace
// and the logs of every pod in it hold the marker zero times. Deleted and
// expired jobs answer 404, their BulkJobs are gone, and the ledgers equal
// the balances. A new submission of the erased address is answered
// suppressed by the API pods: they hold the same secret.
func TestPrivacyLeavesNothingInCluster(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := mailworld.Start(ctx, mailworld.Spec{
		Hosts: []mailworld.Host{{Name: "mx.privtest.example"}},
		Domains: []mailworld.Domain{{Name: pmDomain, DNS: mailworld.DNSMX, MX: []string{"mx.privtest.example"},
			Users: []string{"zelda.quistorpova", "john.smith", "anna.berg"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	for _, name := range []string{envOr("E2E_VERIFY_CONFIGMAP", "bulkd-verify-e2e"), envOr("E2E_LOOKUP_CONFIGMAP", "bulkd-lookup-e2e")} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns}, Data: map[string]string{
			"BULKD_DNS_SERVER":           w.DNSAddr(),
			"BULKD_SMTP_PORT":            fmt.Sprint(w.SMTPPort()),
			"BULKD_OUTBOUND_ALLOW_CIDRS": mailworld.AllowCIDRs,
			"BULKD_VERIFY_RETRY_DELAYS":  "2s",
		}}
		if err := h.k8s.Create(ctx, cm); apierrors.IsAlreadyExists(err) {
			err = h.k8s.Update(ctx, cm)
		} else if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.k8s.Delete(context.Background(), cm) })
	}
	a := clusterAPI(t)
	acct, key := account(t, credits.Whole(100))
	other, otherKey := account(t, credits.Whole(100))
	submit := func(key string, s pmSubmission) string {
		t.Helper()
		code, body := a.Do(http.MethodPost, s.path, key, s.body)
		var out struct {
			JobID string `json:"job_id"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &out) != nil || out.JobID == "" {
			t.Fatalf("POST %s: %d %s", s.path, code, body)
		}
		return out.JobID
	}
	done := func(key, path, id string) {
		t.Helper()
		waitFor(t, 3*time.Minute, "job "+id+" done", func() bool {
			_, body := a.Do(http.MethodGet, path+"/"+id, key, nil)
			var st struct {
				Status string `json:"status"`
			}
			_ = json.Unmarshal(body, &st)
			return st.Status == "completed" || st.Status == "complete"
		})
		if code, body := a.Do(http.MethodGet, path+"/"+id+"/results", key, nil); code != http.StatusOK { // fills the row cache
			t.Fatalf("results of %s: %d %s", id, code, body)
		}
	}
	gone := func(key, path, id string) {
		t.Helper()
		waitFor(t, 60*time.Second, "job "+id+" and its BulkJob gone", func() bool {
			code, _ := a.Do(http.MethodGet, path+"/"+id, key, nil)
			_, err := bulkJob(t, id)
			return code == http.StatusNotFound && apierrors.IsNotFound(err)
		})
	}
	otherJob := submit(otherKey, pmSubmission{"/v1/bulk", map[string]any{"emails": []string{"john.smith@" + pmDomain}}})
	done(otherKey, "/v1/bulk", otherJob)

	// Delete.
	for _, s := range pmJobs() {
		id := submit(key, s)
		done(key, s.path, id)
		start := time.Now()
		code, body := a.Do(http.MethodDelete, s.path+"/"+id, key, nil)
		if code != http.StatusOK {
			t.Fatalf("DELETE %s/%s: %d %s", s.path, id, code, body)
		}
		gone(key, s.path, id)
		timing(t, "privacy: "+s.path+" job deleted and its BulkJob gone", time.Since(start))
		if code, _ := a.Do(http.MethodDelete, s.path+"/"+id, key, nil); code != http.StatusNotFound {
			t.Fatalf("second DELETE: %d", code)
		}
	}
	pmScan(t, "delete", nil)

	// Expire: the BulkJob's expiry reached (the account's retention
	// ending, brought forward): the controller deletes it, its finalizer
	// the job's data.
	for _, s := range pmJobs() {
		id := submit(key, s)
		done(key, s.path, id)
		bj, err := bulkJob(t, id)
		if err != nil {
			t.Fatal(err)
		}
		before := bj.DeepCopy()
		if bj.Annotations == nil {
			bj.Annotations = map[string]string{}
		}
		bj.Annotations[v1alpha1.AnnotationExpiresAt] = time.Now().Add(-time.Second).UTC().Format(time.RFC3339)
		start := time.Now()
		if err := h.k8s.Patch(ctx, bj, client.MergeFrom(before)); err != nil {
			t.Fatal(err)
		}
		gone(key, s.path, id)
		timing(t, "privacy: "+s.path+" job expired by the controller", time.Since(start))
	}
	pmScan(t, "expiry", nil)

	// Erase, across accounts.
	var erased []pmSubmission
	var ids []string
	for _, s := range pmJobs()[:2] { // the families whose inputs name people
		id := submit(key, s)
		done(key, s.path, id)
		erased, ids = append(erased, s), append(ids, id)
	}
	otherMarker := submit(otherKey, pmSubmission{"/v1/bulk", map[string]any{"emails": []string{"ZELDA.Quistorpova@privtest.example", "anna.berg@" + pmDomain}}})
	done(otherKey, "/v1/bulk", otherMarker)
	sec, err := h.cs.CoreV1().Secrets(h.ns).Get(ctx, release+"-privacy", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the chart's privacy Secret: %v", err)
	}
	secret := string(sec.Data["privacy-secret"])
	var adminLog bytes.Buffer
	for _, args := range [][]string{{"erase", "--email", pmEmail}, {"erase", "--name", pmFirst, pmLast, "--domain", pmDomain}} {
		var out bytes.Buffer
		start := time.Now()
		err := admin.Run(ctx, h.rdb, admin.Env{Stdout: &out, Stderr: &adminLog, Now: time.Now, Extra: serve.AdminCommands()},
			append(args, "--actor", "dpo@e2e", "--privacy-secret", secret))
		if err != nil {
			t.Fatalf("bulkd admin %v: %v (%s)", args[:2], err, adminLog.String())
		}
		timing(t, "privacy: erase "+args[1], time.Since(start))
		adminLog.Write(out.Bytes())
	}
	for i, s := range erased {
		code, body := a.Do(http.MethodGet, s.path+"/"+ids[i]+"/results", key, nil)
		if code != http.StatusOK || !bytes.Contains(body, []byte(`"suppressed"`)) {
			t.Fatalf("results of %s after the erasure: %d %s", s.path, code, body)
		}
	}
	// The API pods suppress with the chart's secret: the address again
	// is answered suppressed, and only the other address is charged.
	bal := balance(t, acct)
	again := submit(key, pmSubmission{"/v1/bulk", map[string]any{"emails": []string{pmEmail, "john.smith@" + pmDomain}}})
	if paid := bal - balance(t, acct); paid != credits.Amount(credits.Scale/5) {
		t.Fatalf("a submission naming the erased address paid %s, want 0.2", paid)
	}
	done(key, "/v1/bulk", again)
	if _, body := a.Do(http.MethodGet, "/v1/bulk/"+again+"/results", key, nil); !bytes.Contains(body, []byte(`"status":"suppressed"`)) {
		t.Fatalf("the erased address submitted again: %s", body)
	}
	pmScan(t, "erase", adminLog.Bytes())

	for _, acc := range []string{acct, other} {
		rec, err := h.parts.Engine.Billing.Reconcile(ctx, acc)
		if err != nil {
			t.Fatal(err)
		}
		if err := rec.Err(); err != nil {
			t.Errorf("account %s: ledger and balance disagree: %v", acc, err)
		}
	}
	if code, body := a.Do(http.MethodGet, "/v1/bulk/"+otherJob+"/results", otherKey, nil); code != http.StatusOK || !bytes.Contains(body, []byte("john.smith@")) {
		t.Fatalf("the other account's job: %d %s", code, body)
	}
}

// pmScan looks for the marker in every Redis key and value, every
// BulkJob, Job, ConfigMap and Event of the namespace, the logs of every
// pod in it (every container, the previous run's too) and extra.
func pmScan(t *testing.T, after string, extra []byte) {
	t.Helper()
	ctx := context.Background()
	f := &proof.Finder{Markers: pmMarkers}
	keys, err := proof.ScanRedis(ctx, h.rdb, f)
	if err != nil {
		t.Fatal(err)
	}
	f.Check("the admin's output", string(extra))
	objects := 0
	check := func(kind string, list client.ObjectList) {
		if err := h.k8s.List(ctx, list, client.InNamespace(h.ns)); err != nil {
			t.Fatalf("list %s: %v", kind, err)
		}
		b, err := json.Marshal(list)
		if err != nil {
			t.Fatal(err)
		}
		objects += bytes.Count(b, []byte(`"uid":`))
		f.Check(kind+" objects", string(b))
	}
	check("BulkJob", &v1alpha1.BulkJobList{})
	check("Job", &batchv1.JobList{})
	check("ConfigMap", &corev1.ConfigMapList{})
	check("Event", &corev1.EventList{})
	check("Pod", &corev1.PodList{})
	pods, err := h.cs.CoreV1().Pods(h.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	logBytes := 0
	for _, p := range pods.Items {
		for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			for _, previous := range []bool{false, true} {
				rc, err := h.cs.CoreV1().Pods(h.ns).GetLogs(p.Name, &corev1.PodLogOptions{Container: c.Name, Previous: previous}).Stream(ctx)
				if err != nil {
					continue // no previous run, or a pod not started
				}
				b, _ := io.ReadAll(rc)
				rc.Close()
				logBytes += len(b)
				f.Check(fmt.Sprintf("logs of pod %s/%s", p.Name, c.Name), string(b))
			}
		}
	}
	for i, where := range f.Found {
		if i < 10 {
			t.Errorf("after %s: marker found in %s", after, where)
		}
	}
	t.Logf("after %s: %d Redis keys, %d Kubernetes objects, %d pods' logs (%d bytes) scanned: marker found %d times",
		after, keys, objects, len(pods.Items), logBytes, len(f.Found))
	if len(f.Found) > 0 {
		t.FailNow()
	}
}
