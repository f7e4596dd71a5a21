package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/bulkd/bulkd/internal/fairshare"
)

// Local runs shards in-process with a bounded pool of workers: the executor
// of standalone mode. On start, and every ResumeEvery after, it picks up the
// unfinished shards of running jobs (after a restart, or when another
// replica died holding them); leases keep two replicas off one shard.
//
// Which queued shard a free worker takes is decided by a fairshare.Scheduler
// (docs/architecture.md, "Scheduling shards across accounts"): accounts take
// turns by weighted deficit round robin on rows, jobs of one account run in
// submission order, an account runs at most AccountWorkers shards at once,
// and an account that was idle gets its first shard started ahead of the
// others' next ones, at once if Preempt lets it stop the youngest shard of
// the busiest account. Due retries are tasks of their job's account like
// shards.
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

	// The scheduling policy, read when the first task is queued or the
	// executor starts (set them before).
	//
	// AccountWorkers is the most shards one account runs at once (0: no
	// limit below Workers).
	AccountWorkers int
	// Preempt lets an account that was idle take a worker at once when all
	// are busy: the youngest shard of the account holding the most workers
	// (per unit of weight; never an account's only shard, never a retry
	// pass) is stopped and queued again in its place. What it had answered
	// is kept; the batch it was answering is answered again later.
	Preempt bool
	// Quantum is the rows an account of weight 1 is credited per turn (0:
	// fairshare.DefaultQuantum).
	Quantum int64
	// Weight returns an account's weight (--fair-weights by its plan); nil
	// weighs every account 1. It is called outside the executor's lock,
	// with a short timeout, and cached for a minute.
	Weight func(ctx context.Context, accountID string) int

	mu       sync.Mutex
	cond     *sync.Cond
	sched    *fairshare.Scheduler[task] // nil until first used
	cancels  map[task]context.CancelFunc
	weights  map[string]cachedWeight
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

type cachedWeight struct {
	w  int
	at time.Time
}

// weightTTL is how long an account's weight is used before it is looked up
// again (a plan bought or lapsed takes effect within it).
const weightTTL = time.Minute

// maxCachedWeights bounds the weight cache.
const maxCachedWeights = 10_000

// NewLocal returns an executor with workers goroutines.
func NewLocal(proc *Processor, workers int, log *slog.Logger) *Local {
	if log == nil {
		log = slog.Default()
	}
	l := &Local{Proc: proc, Workers: workers, Attempts: 3, Backoff: 200 * time.Millisecond, ResumeEvery: 30 * time.Second, RetryEvery: time.Second,
		Preempt: true, Log: log, cancels: map[task]context.CancelFunc{}, weights: map[string]cachedWeight{}, canceled: map[string]bool{}}
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
	l.scheduler()
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
	l.lookupWeights(ctx, j.AccountID)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return errors.New("executor is shutting down")
	}
	delete(l.canceled, j.ID)
	for s := 0; s < j.Shards; s++ {
		l.pushShard(j, s)
	}
	l.wakeLocked()
	return nil
}

// scheduler returns the scheduler, made from the settings on first use.
// Caller holds l.mu.
func (l *Local) scheduler() *fairshare.Scheduler[task] {
	if l.sched == nil {
		l.sched = fairshare.New[task](fairshare.Config{Workers: l.Workers, PerAccount: l.AccountWorkers, Quantum: l.Quantum,
			Preempt: l.Preempt, Weight: func(acct string) int {
				if c, ok := l.weights[acct]; ok {
					return c.w
				}
				return 1
			}})
	}
	return l.sched
}

// pushShard queues shard s of j, charged its distinct inputs, in its
// account's queue by submission time. Caller holds l.mu.
func (l *Local) pushShard(j *Job, s int) bool {
	rows := int64(j.ShardSize)
	if j.Distinct > 0 {
		rows = min(rows, j.Distinct-int64(s)*int64(j.ShardSize))
	}
	return l.scheduler().Push(fairshare.Task[task]{Key: task{j.ID, s}, Account: j.AccountID, Order: j.CreatedAt.UnixMilli(),
		Group: j.ID, Index: s, Cost: rows})
}

// wakeLocked wakes the idle workers, and names the shards to stop for
// accounts that were idle and find no worker free. Caller holds l.mu.
func (l *Local) wakeLocked() {
	for _, t := range l.scheduler().Preempt() {
		if cancel := l.cancels[t]; cancel != nil {
			cancel()
			l.Log.Info("shard preempted: an account that was idle is waiting for a worker", "job", t.job, "shard", t.shard)
		}
	}
	l.cond.Broadcast()
}

// lookupWeights refreshes the cached weights of accounts (outside the lock:
// the lookup reads Redis).
func (l *Local) lookupWeights(ctx context.Context, accts ...string) {
	if l.Weight == nil {
		return
	}
	now := time.Now()
	l.mu.Lock()
	var todo []string
	seen := map[string]bool{}
	for _, a := range accts {
		if c, ok := l.weights[a]; (!ok || now.Sub(c.at) > weightTTL) && !seen[a] {
			seen[a] = true
			todo = append(todo, a)
		}
	}
	l.mu.Unlock()
	for _, a := range todo {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		w := l.Weight(wctx, a)
		cancel()
		l.mu.Lock()
		if len(l.weights) >= maxCachedWeights { // bounded: drop what has expired, else all
			for k, c := range l.weights {
				if now.Sub(c.at) > weightTTL {
					delete(l.weights, k)
				}
			}
			if len(l.weights) >= maxCachedWeights {
				clear(l.weights) // busy accounts keep theirs in the scheduler
			}
		}
		l.weights[a] = cachedWeight{w: w, at: now}
		l.scheduler().SetWeight(a)
		l.mu.Unlock()
	}
}

// Cancel drops a job's queued shards and stops its running ones (their
// contexts: an SMTP session in flight ends now, not when its batch is
// done); a running shard that still gets to record finds the job stopped
// (its tombstone, or its keys gone) and records nothing.
func (l *Local) Cancel(ctx context.Context, jobID string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.canceled[jobID] = true
	l.scheduler().Remove(func(t fairshare.Task[task]) bool { return t.Key.job == jobID })
	for t, cancel := range l.cancels {
		if t.job == jobID {
			cancel()
		}
	}
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
	// The unfinished shards are queued together once every active job is
	// read: queued one job at a time, the first job read (in no particular
	// order) would start ahead of older jobs of its account.
	type unfinished struct {
		j      *Job
		shards []int
	}
	var found []unfinished
	queue := func() {
		accts := make([]string, 0, len(found))
		for _, u := range found {
			accts = append(accts, u.j.AccountID)
		}
		l.lookupWeights(ctx, accts...)
		n := 0
		l.mu.Lock()
		for _, u := range found {
			if l.canceled[u.j.ID] || l.stopped {
				continue
			}
			for _, s := range u.shards {
				if l.pushShard(u.j, s) {
					n++
				}
			}
		}
		l.wakeLocked()
		l.mu.Unlock()
		if n > 0 {
			l.Log.Info("resumed unfinished shards", "shards", n)
		}
	}
	defer queue()
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
		if len(shards) > 0 {
			found = append(found, unfinished{j, shards})
		}
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
// per job, whoever's process first answered it, in its account's queue
// (charged the retries due) like a shard.
func (l *Local) retryLoop(ctx context.Context) {
	defer l.wg.Done()
	every(ctx, l.RetryEvery, func() {
		now := l.Proc.Now()
		ids, err := l.Proc.Store.DueRetryJobs(ctx, now, 1000)
		if err == nil && len(ids) > 0 {
			var due []dueRetries
			if due, err = l.Proc.Store.dueRetries(ctx, ids, now); err == nil {
				l.queueRetries(ctx, due)
			}
		}
		if err != nil && ctx.Err() == nil {
			l.Log.Error("retry scan failed", "err", err)
		}
	})
}

func (l *Local) queueRetries(ctx context.Context, due []dueRetries) {
	accts := make([]string, 0, len(due))
	for _, d := range due {
		accts = append(accts, d.Account)
	}
	l.lookupWeights(ctx, accts...)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	for _, d := range due {
		if !l.canceled[d.ID] {
			// Pinned: a retry pass holds the retries it claimed away from
			// everyone for RetryHold; stopping it would only delay them.
			l.scheduler().Push(fairshare.Task[task]{Key: task{d.ID, retryTask}, Account: d.Account, Order: d.Created,
				Group: d.ID, Index: retryTask, Cost: d.Due, Pinned: true})
		}
	}
	l.wakeLocked()
}

// next waits for the scheduler to give this worker a task; the task runs
// under its own context, which preemption cancels.
func (l *Local) next(ctx context.Context) (task, context.Context, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for !l.stopped {
		if t, ok := l.scheduler().Next(); ok {
			tctx, cancel := context.WithCancel(ctx)
			l.cancels[t.Key] = cancel
			return t.Key, tctx, true
		}
		l.cond.Wait()
	}
	return task{}, nil, false
}

// done ends a task. One stopped before it finished because it was
// preempted goes back to its place in its account's queue.
func (l *Local) done(t task, requeue bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cancel := l.cancels[t]; cancel != nil {
		cancel()
		delete(l.cancels, t)
	}
	s := l.scheduler()
	if requeue && s.Preempting(t) && !l.canceled[t.job] && !l.stopped {
		s.Requeue(t)
	} else {
		s.Done(t)
	}
	l.wakeLocked()
}

func (l *Local) worker(ctx context.Context) {
	defer l.wg.Done()
	for {
		t, tctx, ok := l.next(ctx)
		if !ok {
			return
		}
		finished := l.run(tctx, t)
		// Stopped by its own context while the executor runs on:
		// preempted.
		l.done(t, !finished && tctx.Err() != nil && ctx.Err() == nil)
	}
}

// run tries a shard up to Attempts times with doubling backoff, then
// answers its remaining rows as errors. It returns false when ctx ended
// first (shutdown, or the shard was preempted): the shard is unfinished.
func (l *Local) run(ctx context.Context, t task) bool {
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
			return true
		}
	}
	delay := l.Backoff
	for attempt := 1; ; attempt++ {
		err := l.Proc.ProcessShard(ctx, t.job, t.shard)
		switch {
		case err == nil, errors.Is(err, ErrShardBusy), errors.Is(err, ErrJobNotFound):
			return true
		case ctx.Err() != nil:
			return false // shutting down (the shard resumes on the next start) or preempted
		}
		// Redis away (restarting, failing over, loading its file) is no
		// fault of the shard's: it does not use up an attempt, or the
		// shard's rows would be answered as errors once Redis is back.
		// Wait for Redis, then try again.
		if l.Proc.Store.unavailable(ctx, err) {
			l.Log.Warn("shard attempt failed: redis unavailable", "job", t.job, "shard", t.shard, "err", err)
			if l.Proc.Store.awaitRedis(ctx, 0, l.Log, fmt.Sprintf("shard %d of %s", t.shard, t.job)) != nil {
				return false // shutting down: the shard resumes on the next start
			}
			attempt--
			continue
		}
		l.Log.Warn("shard attempt failed", "job", t.job, "shard", t.shard, "attempt", attempt, "err", err)
		if attempt >= l.Attempts {
			if err := l.Proc.FailShard(ctx, t.job, t.shard); err != nil && ctx.Err() == nil {
				l.Log.Error("could not record failed shard; it will be resumed", "job", t.job, "shard", t.shard, "err", err)
			}
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(delay):
		}
		delay *= 2
	}
}
