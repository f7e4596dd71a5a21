package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Local runs shards in-process with a bounded pool of workers: the executor
// of standalone mode. On start, and every ResumeEvery after, it picks up the
// unfinished shards of running jobs (after a restart, or when another
// replica died holding them); leases keep two replicas off one shard.
type Local struct {
	Proc        *Processor
	Workers     int
	Attempts    int           // tries per shard before its rows become errors
	Backoff     time.Duration // first retry delay, doubled each try
	ResumeEvery time.Duration
	// RetryEvery is how often jobs with provisional answers are looked at
	// for retries that have come due. Waiting for a retry holds no worker:
	// a due retry is queued as a task like a shard.
	RetryEvery time.Duration
	Log        *slog.Logger

	mu       sync.Mutex
	cond     *sync.Cond
	queue    []task
	queued   map[task]bool
	running  map[task]bool
	canceled map[string]bool
	stopped  bool
	started  bool
	wg       sync.WaitGroup
}

type task struct {
	job   string
	shard int // retryTask: the job's due retries
}

// retryTask is the shard number of a task that answers a job's due
// retries.
const retryTask = -1

// NewLocal returns an executor with workers goroutines.
func NewLocal(proc *Processor, workers int, log *slog.Logger) *Local {
	if log == nil {
		log = slog.Default()
	}
	l := &Local{Proc: proc, Workers: workers, Attempts: 3, Backoff: 200 * time.Millisecond, ResumeEvery: 30 * time.Second, RetryEvery: time.Second,
		Log: log, queued: map[task]bool{}, running: map[task]bool{}, canceled: map[string]bool{}}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// Start runs the workers until ctx ends, then waits for them.
func (l *Local) Start(ctx context.Context) {
	l.mu.Lock()
	if l.started {
		l.mu.Unlock()
		return
	}
	l.started = true
	l.mu.Unlock()
	for i := 0; i < l.Workers; i++ {
		l.wg.Add(1)
		go l.worker(ctx)
	}
	l.wg.Add(2)
	go l.resumeLoop(ctx)
	go l.retryLoop(ctx)
	go func() {
		<-ctx.Done()
		l.mu.Lock()
		l.stopped = true
		l.cond.Broadcast()
		l.mu.Unlock()
	}()
}

// Wait blocks until every worker has returned (after Start's ctx ended).
func (l *Local) Wait() { l.wg.Wait() }

// Enqueue queues every unfinished shard of j.
func (l *Local) Enqueue(ctx context.Context, j *Job) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return errors.New("executor is shutting down")
	}
	delete(l.canceled, j.ID)
	for s := 0; s < j.Shards; s++ {
		l.push(task{j.ID, s})
	}
	return nil
}

func (l *Local) push(t task) {
	if l.queued[t] || l.running[t] {
		return
	}
	l.queued[t] = true
	l.queue = append(l.queue, t)
	l.cond.Signal()
}

// Cancel drops a job's queued shards; a running shard stops at its next
// batch when it finds the job gone.
func (l *Local) Cancel(ctx context.Context, jobID string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.canceled[jobID] = true
	kept := l.queue[:0]
	for _, t := range l.queue {
		if t.job == jobID {
			delete(l.queued, t)
			continue
		}
		kept = append(kept, t)
	}
	l.queue = kept
	return nil
}

// Resume queues the unfinished shards of every running job.
func (l *Local) Resume(ctx context.Context) error {
	ids, err := l.Proc.Store.ActiveJobs(ctx)
	if err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	// A canceled job only needs remembering while it is still active (its
	// rollback has not deleted it yet); forget the rest, or every refused
	// submission would stay in memory for the life of the process.
	active := make(map[string]bool, len(ids))
	for _, id := range ids {
		active[id] = true
	}
	l.mu.Lock()
	for id := range l.canceled {
		if !active[id] {
			delete(l.canceled, id)
		}
	}
	l.mu.Unlock()
	n := 0
	for _, id := range ids {
		j, err := l.Proc.Store.Get(ctx, id)
		if errors.Is(err, ErrJobNotFound) {
			_ = l.Proc.Store.ForgetActive(ctx, id) // expired
			continue
		}
		if err != nil {
			return fmt.Errorf("resume %s: %w", id, err)
		}
		if j.Settling || j.Status == StatusCompleted {
			// Every input answered, but completing the job (its refund,
			// leaving the active set) was cut short.
			if err := l.Proc.Store.settleJob(ctx, j); err != nil {
				return fmt.Errorf("resume %s: %w", id, err)
			}
			continue
		}
		shards, err := l.Proc.Store.UnfinishedShards(ctx, j)
		if err != nil {
			return err
		}
		l.mu.Lock()
		if !l.canceled[id] {
			for _, s := range shards {
				if !l.queued[task{id, s}] && !l.running[task{id, s}] {
					l.push(task{id, s})
					n++
				}
			}
		}
		l.mu.Unlock()
	}
	if n > 0 {
		l.Log.Info("resumed unfinished shards", "shards", n)
	}
	return nil
}

func (l *Local) resumeLoop(ctx context.Context) {
	defer l.wg.Done()
	if err := l.Resume(ctx); err != nil && ctx.Err() == nil {
		l.Log.Error("resume failed", "err", err)
	}
	every(ctx, l.ResumeEvery, func() {
		if err := l.Resume(ctx); err != nil && ctx.Err() == nil {
			l.Log.Error("resume failed", "err", err)
		}
	})
}

// every calls f every d until ctx ends.
func every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// retryLoop queues the due retries of every job that has some: one task
// per job, whoever's process first answered it.
func (l *Local) retryLoop(ctx context.Context) {
	defer l.wg.Done()
	every(ctx, l.RetryEvery, func() {
		ids, err := l.Proc.Store.DueRetryJobs(ctx, l.Proc.Now(), 1000)
		if err != nil {
			if ctx.Err() == nil {
				l.Log.Error("retry scan failed", "err", err)
			}
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, id := range ids {
			if !l.canceled[id] {
				l.push(task{id, retryTask})
			}
		}
	})
}

func (l *Local) next() (task, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.queue) == 0 && !l.stopped {
		l.cond.Wait()
	}
	if l.stopped {
		return task{}, false
	}
	t := l.queue[0]
	l.queue = l.queue[1:]
	delete(l.queued, t)
	l.running[t] = true
	return t, true
}

func (l *Local) done(t task) {
	l.mu.Lock()
	delete(l.running, t)
	l.mu.Unlock()
}

func (l *Local) worker(ctx context.Context) {
	defer l.wg.Done()
	for {
		t, ok := l.next()
		if !ok {
			return
		}
		l.run(ctx, t)
		l.done(t)
	}
}

// run tries a shard up to Attempts times with doubling backoff, then
// answers its remaining rows as errors.
func (l *Local) run(ctx context.Context, t task) {
	if t.shard == retryTask {
		// A failure leaves the claimed retries to come due again (the
		// processor's RetryHold): nothing is lost by not retrying here.
		// Redis being away is waited out first: the next retry scan would
		// only fail the same way.
		for {
			_, err := l.Proc.RetryDue(ctx, t.job)
			if err != nil && l.Proc.Store.unavailable(ctx, err) && l.Proc.Store.awaitRedis(ctx, 0, l.Log, "retries of "+t.job) == nil {
				continue
			}
			if err != nil && !errors.Is(err, ErrJobNotFound) && ctx.Err() == nil {
				l.Log.Warn("retrying provisional answers failed", "job", t.job, "err", err)
			}
			return
		}
	}
	delay := l.Backoff
	for attempt := 1; ; attempt++ {
		err := l.Proc.ProcessShard(ctx, t.job, t.shard)
		switch {
		case err == nil, errors.Is(err, ErrShardBusy), errors.Is(err, ErrJobNotFound):
			return
		case ctx.Err() != nil:
			return // shutting down: the shard resumes on the next start
		}
		// Redis away (restarting, failing over, loading its file) is no
		// fault of the shard's: it does not use up an attempt, or the
		// shard's rows would be answered as errors once Redis is back.
		// Wait for Redis, then try again.
		if l.Proc.Store.unavailable(ctx, err) {
			l.Log.Warn("shard attempt failed: redis unavailable", "job", t.job, "shard", t.shard, "err", err)
			if l.Proc.Store.awaitRedis(ctx, 0, l.Log, fmt.Sprintf("shard %d of %s", t.shard, t.job)) != nil {
				return // shutting down: the shard resumes on the next start
			}
			attempt--
			continue
		}
		l.Log.Warn("shard attempt failed", "job", t.job, "shard", t.shard, "attempt", attempt, "err", err)
		if attempt >= l.Attempts {
			if err := l.Proc.FailShard(ctx, t.job, t.shard); err != nil && ctx.Err() == nil {
				l.Log.Error("could not record failed shard; it will be resumed", "job", t.job, "shard", t.shard, "err", err)
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay *= 2
	}
}
