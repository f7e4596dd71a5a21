package kube_test

import (
	"context"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/test/companyapi"
)

// The company API client is shared with the other whole-system suite.
type (
	in        = companyapi.Row
	api       = companyapi.Client
	submitted = companyapi.Submitted
	jobStatus = companyapi.JobStatus
)

var (
	dom = companyapi.Domain
	co  = companyapi.Company // found when n is even

	companies   = companyapi.Companies
	sameResults = companyapi.SameResults
)

const bulkPath = companyapi.BulkPath

func (h *harness) kubeAPI(t *testing.T) api { return api{T: t, URL: h.apiURL} }

// account makes an account with balance and a pay-as-you-go key on the
// shared Redis.
func (h *harness) account(t *testing.T, balance credits.Amount) (string, string) {
	return bulkdtest.NewAccount(t, h.parts, "kube-e2e", balance)
}

func (h *harness) balance(t *testing.T, accountID string) credits.Amount {
	return bulkdtest.BalanceOf(t, h.parts, accountID)
}

// standalone is what Kubernetes mode must return for rows.
func standalone(t *testing.T, rows []in) (jobStatus, []map[string]any) {
	return companyapi.Standalone(t, apiConfig(), rows)
}

func (h *harness) bulkJob(t *testing.T, id string) *v1alpha1.BulkJob {
	t.Helper()
	var bj v1alpha1.BulkJob
	if err := h.k8s.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: id}, &bj); err != nil {
		t.Fatal(err)
	}
	return &bj
}

// waitBulkJob polls the BulkJob until ok holds.
func (h *harness) waitBulkJob(t *testing.T, id string, d time.Duration, what string, ok func(*v1alpha1.BulkJob) bool) *v1alpha1.BulkJob {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		var bj v1alpha1.BulkJob
		err := h.k8s.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: id}, &bj)
		if err == nil && ok(&bj) {
			return &bj
		}
		if time.Now().After(deadline) {
			t.Fatalf("BulkJob %s: not %s after %v (err %v): %+v", id, what, d, err, bj.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func completed(bj *v1alpha1.BulkJob) bool { return bj.Status.Phase == v1alpha1.PhaseCompleted }

func conditionTrue(bj *v1alpha1.BulkJob, typ string) bool {
	return meta.IsStatusConditionTrue(bj.Status.Conditions, typ)
}

// jobKeys lists the Redis keys of a job.
func (h *harness) jobKeys(t *testing.T, id string) []string {
	t.Helper()
	keys, err := h.rdb.Keys(context.Background(), "bulkd:job:{"+id+"}*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// eventReasons lists the reasons of the events about a BulkJob.
func (h *harness) eventReasons(t *testing.T, id string) string {
	t.Helper()
	return h.eventReasonsIn(t, namespace, id)
}

// eventReasonsIn is eventReasons in namespace ns.
func (h *harness) eventReasonsIn(t *testing.T, namespace, id string) string {
	t.Helper()
	var evs eventsv1.EventList
	if err := h.k8s.List(context.Background(), &evs, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range evs.Items {
		if e.Regarding.Name == id {
			reasons = append(reasons, e.Reason)
		}
	}
	return strings.Join(reasons, ",")
}

// waitFor polls ok until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	bulkdtest.Eventually(t, d, 50*time.Millisecond, what, ok)
}
