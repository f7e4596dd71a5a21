package controllers

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	"github.com/bulkd/bulkd/api/v1alpha1"
)

// statusWrites paces the status writes that only report progress (rows
// answered, shards done, pods running: what moves all the time while a
// job runs), so that many running BulkJobs cost the API server a bounded
// number of writes per second:
//
//   - each BulkJob's progress is written at most once per interval;
//   - all BulkJobs' progress writes together at most perSecond per second
//     (a token bucket; a job that finds it empty reserves the next free
//     slot, so jobs are served in turn, and waits for it);
//   - everything else (the phase, conditions, failed shards, retry
//     rounds, start and completion times) is written at once, and that
//     write carries the progress too; it takes a spare token from the
//     bucket if there is one (never waiting, never in debt), so progress
//     yields to a burst of them.
//
// A progress write that waits is not lost: the pass asks to be run again
// when its slot comes, and writes the latest progress then.
type statusWrites struct {
	interval time.Duration
	limiter  *rate.Limiter // nil: no cap over all jobs

	mu   sync.Mutex
	jobs map[types.NamespacedName]*jobWrites
}

type jobWrites struct {
	last time.Time         // the job's latest status write
	slot *rate.Reservation // a reserved progress write, not yet due
	at   time.Time         // when slot is due
}

// newStatusWrites paces progress writes: at most one per interval per job
// (0: no per-job limit) and perSecond over all jobs (0: no such limit).
func newStatusWrites(interval time.Duration, perSecond float64) *statusWrites {
	w := &statusWrites{interval: max(interval, 0), jobs: map[types.NamespacedName]*jobWrites{}}
	if perSecond > 0 {
		// A burst of one second's worth: a controller that starts with many
		// running jobs spreads their first writes out.
		w.limiter = rate.NewLimiter(rate.Limit(perSecond), max(int(perSecond), 1))
	}
	return w
}

// decide says whether a pass that computed status st (stored: old) writes
// it now; when it does not, wait is when to try again (0: nothing to
// write).
func (w *statusWrites) decide(key types.NamespacedName, old, st *v1alpha1.BulkJobStatus, now time.Time) (write bool, wait time.Duration) {
	if equality.Semantic.DeepEqual(old, st) {
		return false, 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	j := w.jobs[key]
	if j == nil {
		j = &jobWrites{}
		w.jobs[key] = j
	}
	if !progressOnly(old, st) {
		if w.limiter != nil {
			// Written at once, using up a spare token if there is one: in a
			// burst of phase changes (many jobs completing together)
			// progress writes wait for the bucket to refill rather than
			// add to the burst. No debt: a burst must not starve progress
			// for long after it.
			w.limiter.AllowN(now, 1)
		}
		return true, 0
	}
	if due := j.last.Add(w.interval); now.Before(due) {
		// min: a clock that moved back does not stretch the wait.
		return false, min(due.Sub(now), w.interval)
	}
	if w.limiter == nil {
		return true, 0
	}
	if j.slot != nil {
		if now.Before(j.at) {
			return false, j.at.Sub(now)
		}
		j.slot = nil
		return true, 0
	}
	r := w.limiter.ReserveN(now, 1)
	d := r.DelayFrom(now)
	if d <= 0 {
		return true, 0
	}
	j.slot, j.at = r, now.Add(d)
	return false, d
}

// dueIn is how long until the job's next progress write may go out (0:
// now, or nothing known of the job).
func (w *statusWrites) dueIn(key types.NamespacedName, now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	j := w.jobs[key]
	if j == nil {
		return 0
	}
	due := j.last.Add(w.interval)
	if j.slot != nil && j.at.After(due) {
		due = j.at
	}
	return min(max(due.Sub(now), 0), max(w.interval, time.Minute))
}

// wrote records a status write of the job made at now.
func (w *statusWrites) wrote(key types.NamespacedName, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	j := w.jobs[key]
	if j == nil {
		j = &jobWrites{}
		w.jobs[key] = j
	}
	if j.slot != nil {
		// Written earlier than its slot (a phase change): give the slot
		// back to the other jobs.
		j.slot.CancelAt(now)
		j.slot = nil
	}
	j.last = now
}

// forget drops a job that is finished or gone.
func (w *statusWrites) forget(key types.NamespacedName, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if j := w.jobs[key]; j != nil && j.slot != nil {
		j.slot.CancelAt(now)
	}
	delete(w.jobs, key)
}

// progressOnly reports whether two statuses differ only in the fields that
// move as rows are answered: rows and outcome counts, shards done and
// running, inputs waiting for a retry and when the next is due, and a
// Queued BulkJob's place in line.
func progressOnly(a, b *v1alpha1.BulkJobStatus) bool {
	x, y := *a, *b
	if (x.QueuePosition == 0) != (y.QueuePosition == 0) {
		return false // a place in line given or taken is written at once
	}
	for _, s := range []*v1alpha1.BulkJobStatus{&x, &y} {
		s.ProcessedRows, s.Progress, s.Outcomes = 0, "", nil
		s.ShardsSucceeded, s.ShardsActive, s.ShardProgress = 0, 0, ""
		s.Retrying, s.NextRetryTime = 0, nil
		s.QueuePosition = 0 // moves as others are admitted: paced like progress
	}
	return equality.Semantic.DeepEqual(x, y)
}
