//go:build e2ecluster

package cluster_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/mailworld"
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
	nu  = companyapi.NetworkURL
	dom = companyapi.Domain
	co  = companyapi.Company // found when n is even

	companies   = companyapi.Companies
	sameResults = companyapi.SameResults
)

func clusterAPI(t *testing.T) api { return api{T: t, URL: h.apiURL} }

// account makes an account with balance and a pay-as-you-go key on the
// cluster's Redis.
func account(t *testing.T, balance credits.Amount) (string, string) {
	return bulkdtest.NewAccount(t, h.parts, "cluster-e2e", balance)
}

func balance(t *testing.T, accountID string) credits.Amount {
	return bulkdtest.BalanceOf(t, h.parts, accountID)
}

// standalone is what the cluster must return for rows.
func standalone(t *testing.T, rows []in) (jobStatus, []map[string]any) {
	return companyapi.Standalone(t, refConfig(), rows)
}

func bulkJob(t *testing.T, id string) (*v1alpha1.BulkJob, error) {
	t.Helper()
	var bj v1alpha1.BulkJob
	err := h.k8s.Get(context.Background(), client.ObjectKey{Namespace: h.ns, Name: id}, &bj)
	return &bj, err
}

func getJob(t *testing.T, id string) (*batchv1.Job, error) {
	t.Helper()
	var job batchv1.Job
	err := h.k8s.Get(context.Background(), client.ObjectKey{Namespace: h.ns, Name: id}, &job)
	return &job, err
}

func jobFinished(job *batchv1.Job) bool {
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func waitJobFinished(t *testing.T, id string, d time.Duration) *batchv1.Job {
	t.Helper()
	var job *batchv1.Job
	waitFor(t, d, "Job "+id+" finished", func() bool {
		var err error
		job, err = getJob(t, id)
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil && jobFinished(job)
	})
	return job
}

func jobPods(t *testing.T, id string) []corev1.Pod {
	t.Helper()
	pods, err := h.cs.CoreV1().Pods(h.ns).List(context.Background(), metav1.ListOptions{LabelSelector: v1alpha1.LabelJobID + "=" + id})
	if err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

func podIndex(p *corev1.Pod) int {
	n, err := strconv.Atoi(p.Annotations[batchv1.JobCompletionIndexAnnotation])
	if err != nil {
		return -1
	}
	return n
}

// podWatcher records every processor pod of a job it sees (by UID) while
// the job runs.
type podWatcher struct {
	seen  map[string]int // uid -> completion index
	first time.Time      // first pod seen Running
	stop  chan struct{}
	done  chan struct{}
}

func watchPods(t *testing.T, id string) *podWatcher {
	w := &podWatcher{seen: map[string]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			pods, err := h.cs.CoreV1().Pods(h.ns).List(context.Background(), metav1.ListOptions{LabelSelector: v1alpha1.LabelJobID + "=" + id})
			if err == nil {
				for i := range pods.Items {
					p := &pods.Items[i]
					w.seen[string(p.UID)] = podIndex(p)
					if w.first.IsZero() && p.Status.Phase == corev1.PodRunning {
						w.first = time.Now()
					}
				}
			}
			select {
			case <-w.stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *podWatcher) Stop() map[string]int {
	close(w.stop)
	<-w.done
	return w.seen
}

func jobKeys(t *testing.T, id string) []string {
	t.Helper()
	keys, err := h.rdb.Keys(context.Background(), "bulkd:job:{"+id+"}*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func exactlyOnce(t *testing.T, jobID string, st jobStatus) {
	companyapi.ExactlyOnce(t, h.parts.Processor.Store, h.rdb, jobID, st)
}

// waitFor polls ok until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	bulkdtest.Eventually(t, d, 200*time.Millisecond, what, ok)
}

// freshDomains makes the domains of a mail world new to the cluster's
// Redis: worlds reuse domain names (pioneer-002.test is catch-all in one
// seed's world and not in another's), and what the verifier and the finder
// learned about a domain (catch-all verdicts, probes, patterns) is shared
// through Redis for hours, so an earlier test's world would answer for
// this one's.
func freshDomains(t *testing.T, spec mailworld.Spec) {
	t.Helper()
	ctx := context.Background()
	for _, d := range spec.Domains {
		iter := h.rdb.Scan(ctx, 0, "*"+d.Name+"*", 1000).Iterator()
		for iter.Next(ctx) {
			if k := iter.Val(); !strings.HasPrefix(k, "bulkd:job:") {
				if err := h.rdb.Del(ctx, k).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
	}
}
