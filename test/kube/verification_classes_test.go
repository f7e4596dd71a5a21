package kube_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/mailworld"
)

// (g) Every class of the mail world through POST /v1/bulk in Kubernetes
// mode: the apiserver makes a BulkJob, the controller's Job runs real
// `bulkd processor` pods (the node agent) whose settings come from the
// family's ConfigMap, greylisted addresses are retried by retry Jobs, and
// every knowable verdict is exact, nothing false deliverable, no 421.
func TestEmailVerificationEveryClass(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := mailworld.Start(ctx, mailworld.Classes(mailworld.ClassOptions{Greylist: time.Second, Tarpit: 3 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: verifyConfigMap, Namespace: namespace},
		Data: map[string]string{"BULKD_DNS_SERVER": w.DNSAddr(), "BULKD_SMTP_PORT": fmt.Sprint(w.SMTPPort()),
			"BULKD_OUTBOUND_ALLOW_CIDRS": mailworld.AllowCIDRs, "BULKD_SMTP_COMMAND_TIMEOUT": "1s", "BULKD_VERIFY_RETRY_DELAYS": "1500ms,1500ms"}}
	if err := h.k8s.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.k8s.Delete(context.Background(), cm) })

	_, key := h.account(t, credits.Whole(100))
	a := h.kubeAPI(t)
	var emails []string
	for _, c := range w.Cases() {
		emails = append(emails, c.Email)
	}
	code, body := a.Do(http.MethodPost, "/v1/bulk", key, map[string]any{"emails": emails})
	if code != http.StatusOK {
		t.Fatalf("submit: %d %s", code, body)
	}
	var sub struct {
		JobID       string `json:"job_id"`
		TotalEmails int    `json:"total_emails"`
	}
	if err := json.Unmarshal(body, &sub); err != nil || sub.TotalEmails != len(emails) {
		t.Fatalf("submission %s", body)
	}
	waitFor(t, 90*time.Second, "the job complete", func() bool {
		code, body := a.Do(http.MethodGet, "/v1/bulk/"+sub.JobID, key, nil)
		var st struct{ Status string }
		return code == http.StatusOK && json.Unmarshal(body, &st) == nil && st.Status == "complete"
	})
	code, body = a.Do(http.MethodGet, "/v1/bulk/"+sub.JobID+"/results?limit=500", key, nil)
	if code != http.StatusOK {
		t.Fatalf("results: %d %s", code, body)
	}
	var page struct {
		Results []struct {
			Input, Status, Reason string
			Retrying              bool
		} `json:"results"`
	}
	if err := json.Unmarshal(body, &page); err != nil || len(page.Results) != len(emails) {
		t.Fatalf("results %.500s", body)
	}
	for _, r := range page.Results {
		c, ok := w.Expect(r.Input)
		switch {
		case !ok:
			t.Errorf("row for %q not in the world", r.Input)
		case r.Status == "deliverable" && c.Status != "deliverable":
			t.Errorf("FALSE DELIVERABLE %s: %+v", r.Input, r)
		case c.Knowable && (r.Status != c.Status || r.Reason != c.Reason):
			t.Errorf("%s: %s/%s, want %s/%s", r.Input, r.Status, r.Reason, c.Status, c.Reason)
		case r.Retrying:
			t.Errorf("%s still retrying in a complete job", r.Input)
		}
	}
	if s := w.Stats(); s.Rejected421 != 0 {
		t.Errorf("%d sessions refused with 421", s.Rejected421)
	}
}
