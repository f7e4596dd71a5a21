package controllers

import (
	"context"
	"fmt"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/bulkd/bulkd/api/v1alpha1"
)

// arrivalScene is the BulkJob queue as the controller has it: the
// controller-runtime priority queue fed by arrivals' handler, and popped as
// the workers pop it (each pop begins a pass).
type arrivalScene struct {
	t  *testing.T
	a  *arrivals
	q  priorityqueue.PriorityQueue[reconcile.Request]
	rv int
}

func newArrivalScene(t *testing.T) *arrivalScene {
	q := priorityqueue.New[reconcile.Request](fmt.Sprintf("arrivals-%s", t.Name()))
	t.Cleanup(q.ShutDown)
	return &arrivalScene{t: t, a: newArrivals(), q: q}
}

func (s *arrivalScene) bulkJob(name, account string, phase v1alpha1.BulkJobPhase) *v1alpha1.BulkJob {
	s.rv++
	return &v1alpha1.BulkJob{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: fmt.Sprint(s.rv),
		Labels: map[string]string{v1alpha1.LabelAccount: account}}, Status: v1alpha1.BulkJobStatus{Phase: phase}}
}

// submits: account's new BulkJobs are created.
func (s *arrivalScene) submits(account string, names ...string) {
	for _, n := range names {
		s.a.handler().Create(context.Background(), event.CreateEvent{Object: s.bulkJob(n, account, "")}, s.q)
	}
}

// progresses: a BulkJob past its first pass changes (a status write).
func (s *arrivalScene) progresses(name, account string) {
	old, cur := s.bulkJob(name, account, v1alpha1.PhaseRunning), s.bulkJob(name, account, v1alpha1.PhaseRunning)
	s.a.handler().Update(context.Background(), event.UpdateEvent{ObjectOld: old, ObjectNew: cur}, s.q)
}

// served is the order the workers take the n queued passes in.
func (s *arrivalScene) served(n int) []string {
	var out []string
	for range n {
		req, _, shutdown := s.q.GetWithPriority()
		if shutdown {
			s.t.Fatal("queue shut down")
		}
		s.a.firstPassBegins(req.NamespacedName)
		s.q.Done(req)
		out = append(out, req.Name)
	}
	return out
}

func TestNewBulkJobsFirstInTurnAcrossAccounts(t *testing.T) {
	s := newArrivalScene(t)
	s.progresses("running-1", "acct_old")
	s.progresses("running-2", "acct_old")
	s.submits("acct_burst", "burst-1", "burst-2", "burst-3", "burst-4", "burst-5")
	s.submits("acct_small", "small-1")
	got := s.served(8)
	want := []string{"burst-1", "small-1", "burst-2", "burst-3", "burst-4", "burst-5", "running-1", "running-2"}
	if !slices.Equal(got, want) {
		t.Fatalf("served %v, want %v (new BulkJobs first, accounts in turn, FIFO within one)", got, want)
	}
	if n := len(s.a.tags); n != 0 {
		t.Fatalf("%d BulkJobs still waiting for a first pass", n)
	}
}

func TestAccountArrivingLateGoesNextNotFirstForever(t *testing.T) {
	s := newArrivalScene(t)
	s.submits("acct_a", "a-1", "a-2", "a-3", "a-4", "a-5", "a-6")
	if got := s.served(3); !slices.Equal(got, []string{"a-1", "a-2", "a-3"}) {
		t.Fatalf("served %v", got)
	}
	// b arrives with three while a still has three waiting: b's first goes
	// next, then the two accounts alternate.
	s.submits("acct_b", "b-1", "b-2", "b-3")
	want := []string{"b-1", "a-4", "b-2", "a-5", "b-3", "a-6"}
	if got := s.served(6); !slices.Equal(got, want) {
		t.Fatalf("served %v, want %v", got, want)
	}
}

func TestSecondEventBeforeTheFirstPassKeepsItsPlace(t *testing.T) {
	s := newArrivalScene(t)
	s.submits("acct_a", "a-1", "a-2")
	s.submits("acct_b", "b-1")
	// a-2 changes before its first pass (a label): it keeps its tag.
	old, cur := s.bulkJob("a-2", "acct_a", ""), s.bulkJob("a-2", "acct_a", "")
	s.a.handler().Update(context.Background(), event.UpdateEvent{ObjectOld: old, ObjectNew: cur}, s.q)
	if got := s.served(3); !slices.Equal(got, []string{"a-1", "b-1", "a-2"}) {
		t.Fatalf("served %v", got)
	}
}

func TestArrivalsForgetAccountsWithNothingWaiting(t *testing.T) {
	a := newArrivals()
	for i := range 5000 {
		key := types.NamespacedName{Namespace: "ns", Name: fmt.Sprint("bj-", i)}
		a.priority(key, fmt.Sprint("acct_", i))
		a.firstPassBegins(key)
	}
	if len(a.last) > 1024+1 || len(a.tags) != 0 {
		t.Fatalf("%d accounts and %d tags remembered after 5,000 first passes with nothing waiting", len(a.last), len(a.tags))
	}
}
