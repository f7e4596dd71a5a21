//go:build e2ecluster

package cluster_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/credits"
)

// controllerEnv is a setting of the controller Deployment (its env).
func controllerEnv(t *testing.T, name string) string {
	t.Helper()
	d, err := h.cs.AppsV1().Deployments(h.ns).Get(context.Background(), release+"-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// processorWatch samples the namespace's processor pods while a test
// runs: the most admitted (not gated) and unfinished at once, and the pods
// the scheduler reported Unschedulable.
type processorWatch struct {
	mu            sync.Mutex
	most          int
	unschedulable map[string]bool
	stop, done    chan struct{}
}

func watchProcessors() *processorWatch {
	w := &processorWatch{unschedulable: map[string]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			pods, err := h.cs.CoreV1().Pods(h.ns).List(context.Background(), metav1.ListOptions{LabelSelector: v1alpha1.LabelComponent + "=processor"})
			if err == nil {
				n := 0
				w.mu.Lock()
				for _, p := range pods.Items {
					if len(p.Spec.SchedulingGates) == 0 && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
						n++
					}
					for _, c := range p.Status.Conditions {
						if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
							w.unschedulable[p.Name] = true
						}
					}
				}
				w.most = max(w.most, n)
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *processorWatch) Stop() (most int, unschedulable []string) {
	close(w.stop)
	<-w.done
	for name := range w.unschedulable {
		unschedulable = append(unschedulable, name)
	}
	return w.most, unschedulable
}

// (m) Fair share across accounts (issue 19): account A's three
// 100,000-row jobs hold the processor budget (e2e.sh installs it: 6 pods,
// 6 per account, so A alone can hold all of it); account B's 5-row job,
// submitted right after, completes within 30 s: its shard takes the first
// slot one of A's frees. No processor pod is ever Unschedulable: the
// budget keeps them within what the node fits.
func TestFairShareSmallJobWhileBigJobsHoldTheBudget(t *testing.T) {
	budget, err := strconv.Atoi(controllerEnv(t, "BULKD_MAX_RUNNING_SHARDS"))
	if err != nil || budget < 1 {
		t.Fatalf("the chart was installed without a processor budget (BULKD_MAX_RUNNING_SHARDS %q)", controllerEnv(t, "BULKD_MAX_RUNNING_SHARDS"))
	}
	const n = 100_000
	acctA, keyA := account(t, credits.Whole(3*n))
	_, keyB := account(t, credits.Whole(100))
	a := clusterAPI(t)
	w := watchProcessors()
	start := time.Now()
	var aJobs []string
	for j := range 3 {
		rows := make([]in, n)
		for i := range rows {
			rows[i] = nu(fmt.Sprintf("https://www.linkedin.com/company/fair-%d-%06d", j, i))
		}
		aJobs = append(aJobs, a.Submit(keyA, rows).JobID)
	}
	t.Logf("A's three jobs submitted in %v", time.Since(start).Round(time.Millisecond))
	// A holds the budget: as many of its pods admitted as the budget
	// allows, and more of its shards waiting.
	waitFor(t, 60*time.Second, "A's pods holding the budget", func() bool {
		running, waiting := 0, 0
		for _, id := range aJobs {
			for _, p := range jobPods(t, id) {
				switch {
				case len(p.Spec.SchedulingGates) > 0:
					waiting++
				case p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodPending:
					running++
				}
			}
		}
		return running >= budget && waiting > 0
	})
	held := time.Since(start)

	bStart := time.Now()
	b := a.Submit(keyB, []in{co(0), co(1), co(2), co(3), co(4)})
	st := a.Wait(keyB, b.JobID, 2*time.Minute)
	took := time.Since(bStart)
	timing(t, "(m) fair share: B's 5 rows while A's 3x100k hold the budget: submit -> completed", took)
	if st.TotalProcessed != 5 {
		t.Fatalf("B: %+v", st)
	}
	bj, err := bulkJob(t, b.JobID)
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	evs, err := h.cs.EventsV1().Events(h.ns).List(context.Background(), metav1.ListOptions{})
	if err == nil {
		for _, e := range evs.Items {
			if e.Regarding.Name == b.JobID {
				reasons = append(reasons, e.Reason)
			}
		}
	}
	t.Logf("A held the budget %v after its submissions; B: %s, events %s", held.Round(time.Millisecond), bj.Status.Phase, strings.Join(reasons, ","))
	if took > 30*time.Second {
		t.Errorf("B completed %v after its submission, goal 30 s", took.Round(time.Millisecond))
	}

	for _, id := range aJobs {
		if st := a.Wait(keyA, id, 10*time.Minute); st.TotalProcessed != n {
			t.Fatalf("A's job %s: %+v", id, st)
		}
	}
	timing(t, "(m) fair share: A's 3x100k: submit -> all completed", time.Since(start))
	most, unschedulable := w.Stop()
	t.Logf("processor pods admitted at once: at most %d (budget %d); Unschedulable: %v", most, budget, unschedulable)
	if most > budget {
		t.Errorf("%d processor pods ran at once, budget %d", most, budget)
	}
	if len(unschedulable) > 0 {
		t.Errorf("processor pods Unschedulable: %v", unschedulable)
	}
	if bal := balance(t, acctA); bal != credits.Whole(0) {
		t.Errorf("A's balance %s, want 0", bal)
	}
}
