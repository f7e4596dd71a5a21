package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bulkd/bulkd/api/v1alpha1"
)

// watch follows the processor Jobs (when each is un-suspended: admitted)
// and pods (a Running one gets its rows answered: the stub processor).
func (b *bench) watch(ctx context.Context) error {
	c, err := cache.New(b.admin, cache.Options{Scheme: v1alpha1.NewScheme(), DefaultNamespaces: map[string]cache.Config{namespace: {}}})
	if err != nil {
		return err
	}
	ji, err := c.GetInformer(ctx, &batchv1.Job{})
	if err != nil {
		return err
	}
	onJob := func(o any) {
		j, ok := o.(*batchv1.Job)
		if !ok {
			return
		}
		id := j.Labels[v1alpha1.LabelJobID]
		if _, retry := j.Labels[v1alpha1.LabelRetryRound]; retry || id == "" {
			return
		}
		now := time.Now()
		b.mu.Lock()
		defer b.mu.Unlock()
		if _, ok := b.jobSeen[id]; !ok {
			b.jobSeen[id] = now
		}
		if j.Spec.Suspend != nil && *j.Spec.Suspend {
			return
		}
		if _, ok := b.admitted[id]; !ok {
			b.admitted[id] = now
		}
	}
	if _, err := ji.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: onJob, UpdateFunc: func(_, n any) { onJob(n) }}); err != nil {
		return err
	}
	pi, err := c.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return err
	}
	work := make(chan *corev1.Pod, 100_000)
	for range 32 {
		go func() {
			for p := range work {
				b.answer(ctx, p)
			}
		}()
	}
	onPod := func(o any) {
		p, ok := o.(*corev1.Pod)
		if !ok {
			return
		}
		start := false
		b.podMu.Lock()
		st := b.podState[p.UID]
		switch p.Status.Phase {
		case corev1.PodRunning:
			if st == 0 {
				b.podState[p.UID], start = 1, true
				b.livePods.Add(1)
			}
		case corev1.PodSucceeded, corev1.PodFailed:
			if st != 2 {
				b.podState[p.UID] = 2
				if st == 1 {
					b.livePods.Add(-1)
				}
				if p.Status.Phase == corev1.PodSucceeded {
					b.podsDone.Add(1)
				}
			}
		}
		b.podMu.Unlock()
		if start {
			select {
			case work <- p:
			case <-ctx.Done():
			}
		}
	}
	if _, err := pi.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: onPod, UpdateFunc: func(_, n any) { onPod(n) }}); err != nil {
		return err
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return errors.New("bench cache did not sync")
	}
	return nil
}

// answer answers a Running processor pod's shard, as `bulkd processor`
// would.
func (b *bench) answer(ctx context.Context, p *corev1.Pod) {
	id := p.Labels[v1alpha1.LabelJobID]
	shard, err := strconv.Atoi(p.Annotations[batchv1.JobCompletionIndexAnnotation])
	if id == "" || err != nil {
		return
	}
	if err := b.proc.ProcessShard(ctx, id, shard); err != nil && ctx.Err() == nil {
		b.shardErrs.Add(1)
		b.log.Warn("stub processor", "job", id, "shard", shard, "err", err)
	}
}

// waitCompleted waits until the BulkJobs of ids are Completed.
func (b *bench) waitCompleted(ctx context.Context, ids []string) error {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	last := time.Now()
	for {
		var l v1alpha1.BulkJobList
		if err := b.k8s.List(ctx, &l, client.InNamespace(namespace)); err != nil {
			return err
		}
		done, failed := 0, 0
		for _, bj := range l.Items {
			if !want[bj.Name] {
				continue
			}
			switch bj.Status.Phase {
			case v1alpha1.PhaseCompleted:
				done++
			case v1alpha1.PhaseFailed:
				failed++
			}
		}
		if failed > 0 {
			return fmt.Errorf("%d BulkJobs failed", failed)
		}
		if done == len(ids) {
			return nil
		}
		if time.Since(last) > 15*time.Second {
			b.mu.Lock()
			adm := len(b.admitted)
			b.mu.Unlock()
			b.step("%d of %d BulkJobs completed; %d admitted in all; %d pods succeeded, %d running", done, len(ids), adm, b.podsDone.Load(), b.livePods.Load())
			last = time.Now()
		}
		// Every 2 s: a list of 5,000 BulkJobs is itself load on the
		// API server being measured.
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d BulkJobs completed: %w", done, len(ids), ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
}

// waitDone waits for the BulkJobs to complete, or with --admission-only
// (no pods: nothing completes) to be admitted.
func (b *bench) waitDone(ctx context.Context, ids []string) error {
	if !b.o.admissionOnly {
		return b.waitCompleted(ctx, ids)
	}
	for _, id := range ids {
		if err := b.waitAdmitted(ctx, id, 10*time.Minute); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) waitAdmitted(ctx context.Context, id string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		b.mu.Lock()
		_, ok := b.admitted[id]
		b.mu.Unlock()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("BulkJob %s not admitted within %s", id, d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// admissionFigures: admissions per second, and created -> admitted while
// the budget had room (the BulkJobs admitted before the first one had to
// wait for a pod to end: those admitted within one pod's run of their
// creation... approximated as the first maxRunning shards' worth).
func (b *bench) admissionFigures(ids []string, res *result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var times []time.Time
	var lat []float64
	var slots int
	for _, id := range ids {
		a, ok := b.admitted[id]
		if !ok {
			continue
		}
		times = append(times, a)
	}
	slices.SortFunc(times, func(x, y time.Time) int { return x.Compare(y) })
	if len(times) > 1 {
		res.AdmittedPerSecond = float64(len(times)-1) / times[len(times)-1].Sub(times[0]).Seconds()
		j := 0
		for i := range times {
			for times[i].Sub(times[j]) > 5*time.Second {
				j++
			}
			res.AdmittedPeak5s = math.Max(res.AdmittedPeak5s, float64(i-j+1)/5)
		}
	}
	// Room: BulkJobs in order of creation until their shards fill the
	// budget.
	order := slices.Clone(ids)
	slices.SortFunc(order, func(x, y string) int { return b.created[x].Compare(b.created[y]) })
	for _, id := range order {
		a, ok := b.admitted[id]
		if !ok {
			continue
		}
		if slots >= b.o.maxRunning {
			break
		}
		slots += 1 // at least its first shard
		lat = append(lat, a.Sub(b.created[id]).Seconds())
	}
	res.AdmitLatencyP50, res.AdmitLatencyP99 = quantile(lat, 0.5), quantile(lat, 0.99)
	var made []float64
	for _, id := range ids {
		if j, ok := b.jobSeen[id]; ok {
			made = append(made, j.Sub(b.created[id]).Seconds())
		}
	}
	res.JobLatencyP50, res.JobLatencyP99 = quantile(made, 0.5), quantile(made, 0.99)
}

func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[min(len(s)-1, int(math.Ceil(q*float64(len(s))))-1)]
}

// sampleRSS samples the controller's RSS, with the number of processor
// pods that exist then.
func (b *bench) sampleRSS(ctx context.Context, res *result) func() {
	ctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	go func() {
		// Every 2 s, with a metadata-only list of the pods.
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			r := rss(b.ctrlPID)
			pods := b.countPods(ctx)
			mu.Lock()
			if r > res.RSSBytesPeak {
				res.RSSBytesPeak = r
			}
			if pods >= res.PeakPods {
				res.PeakPods, res.RSSBytesAtPeakPods = pods, max(r, res.RSSBytesAtPeakPods)
			}
			mu.Unlock()
		}
	}()
	return func() { cancel(); mu.Lock(); mu.Unlock() }
}

// countPods is the processor pods that exist (gated, running or ended but
// kept): what the controller's cache holds.
func (b *bench) countPods(ctx context.Context) int {
	var l metav1.PartialObjectMetadataList
	l.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := b.k8s.List(ctx, &l, client.InNamespace(namespace)); err != nil {
		return 0
	}
	return len(l.Items)
}

func rss(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}
