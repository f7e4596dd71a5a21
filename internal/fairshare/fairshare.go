// Package fairshare decides which queued task (a shard of a bulk job, or a
// job's due retries) runs next when several accounts compete for a fixed
// number of workers. It is the scheduling core of issue 19, kept free of
// the job engine so that both executors can use it: jobs.Local (standalone
// `bulkd serve`, tasks are in-process shards) and, later, the Kubernetes
// controller (tasks are BulkJob shards admitted as processor pods).
//
// The policy (docs/architecture.md, "Scheduling shards across accounts"):
//
//   - Across accounts: weighted deficit round robin (DRR) on rows. Each
//     account with queued work is visited in turn; on each visit it is
//     credited Quantum x its weight rows and runs queued tasks while their
//     cost (rows) fits its credit. Over time every busy account is served
//     rows in proportion to its weight, however many rows it has queued.
//   - Within an account: FIFO by (Order, Group, Index): the job's
//     submission time, the job, the shard number.
//   - Budgets: at most Workers tasks run at once, at most PerAccount of one
//     account.
//   - Newcomers: an account that had nothing queued or running (it was
//     idle) gets its first task started before anyone else's next one, out
//     of its DRR turn (the rows are still charged to it). With Preempt, when
//     no worker is free for it, the youngest running task of the account
//     holding the most workers per unit of weight (one with two or more
//     running) is named for preemption: the caller stops it and gives it
//     back with Requeue; it keeps its place at the head of its account's
//     queue. So a small job of an otherwise idle account starts at once,
//     whatever the others have queued, at the cost of the in-flight work of
//     one task of the busiest account.
//
// A Scheduler is not safe for concurrent use: the caller holds its own lock
// around every call (Local has one; the controller would have its own).
// Memory is one small entry per queued or running task and one per account
// with work: never per row.
package fairshare

import (
	"container/heap"
	"container/list"
	"fmt"
	"strconv"
	"strings"
)

// DefaultQuantum is the rows an account of weight 1 is credited per DRR
// visit when Config.Quantum is 0: one default shard (--shard-size).
const DefaultQuantum = 1000

// MaxWeight bounds a weight: a weight is how many times more rows per round
// an account gets than one of weight 1.
const MaxWeight = 100

// Config is the policy of a Scheduler.
type Config struct {
	// Workers is the global budget: tasks running at once, every account
	// together (at least 1).
	Workers int
	// PerAccount is the most tasks of one account running at once; 0 (or
	// more than Workers) means Workers.
	PerAccount int
	// Quantum is the rows credited to an account of weight 1 per DRR visit
	// (0: DefaultQuantum). Costs are exact, so it only sets the grain of
	// the rotation: a quantum of one shard makes a round one shard per unit
	// of weight.
	Quantum int64
	// Preempt lets Preempt name running tasks to stop for a newcomer that
	// finds no worker free.
	Preempt bool
	// Weight returns an account's weight, read when the account becomes
	// busy (and by SetWeight). nil, or a result below 1, means 1; above
	// MaxWeight, MaxWeight. It is called under the caller's lock: it must
	// not block (look weights up beforehand, keep them in a map).
	Weight func(account string) int
}

// Task is a unit of work of one account.
type Task[K comparable] struct {
	Key     K      // unique among queued and running tasks
	Account string // whose turn it takes and whose budget it uses
	// Order, Group and Index place a task within its account's queue,
	// lowest first: the job's submission time, the job (so that the tasks
	// of two jobs submitted in the same instant are not interleaved) and
	// the shard number.
	Order int64
	Group string
	Index int
	// Cost is what the task is charged, in rows (the distinct inputs of a
	// shard, the due retries of a retry task); below 1 counts as 1.
	Cost int64
	// Pinned tasks are never named for preemption (a retry pass holds the
	// retries it claimed away from everyone for minutes: stopping it would
	// delay them, not free anything sooner).
	Pinned bool
}

// Scheduler holds the queued and running tasks of every account.
type Scheduler[K comparable] struct {
	cfg        Config
	accounts   map[string]*account[K]
	tasks      map[K]*entry[K]
	ring       *list.List    // accounts with queued tasks, in DRR order
	cur        *list.Element // the account whose turn it is
	running    int
	preempting int
	seq        uint64 // push order: the last tie-break within an account
	clock      uint64 // dispatch order: which running task is youngest
}

type entry[K comparable] struct {
	t          Task[K]
	seq        uint64
	acct       *account[K]
	idx        int // in the account's queue heap; -1 while running
	started    uint64
	charged    int64
	preempting bool
}

type account[K comparable] struct {
	name    string
	weight  int64
	deficit int64 // rows it may still run in its current turn (and beyond)
	arrived bool  // its quantum for the current turn is credited
	// fresh: the account was idle when its queued work arrived and has not
	// started anything since: its first task goes ahead of every other
	// account's next one.
	fresh      bool
	queue      taskHeap[K]
	running    map[K]*entry[K]
	preempting int
	elem       *list.Element // in ring; nil when nothing is queued
}

// New returns an empty scheduler. cfg.Workers below 1 counts as 1.
func New[K comparable](cfg Config) *Scheduler[K] {
	if cfg.Workers < 1 {
		cfg.Workers = 1
	}
	if cfg.PerAccount <= 0 || cfg.PerAccount > cfg.Workers {
		cfg.PerAccount = cfg.Workers
	}
	if cfg.Quantum <= 0 {
		cfg.Quantum = DefaultQuantum
	}
	return &Scheduler[K]{cfg: cfg, accounts: map[string]*account[K]{}, tasks: map[K]*entry[K]{}, ring: list.New()}
}

// Config returns the policy in effect (defaults filled in).
func (s *Scheduler[K]) Config() Config { return s.cfg }

func (s *Scheduler[K]) weightOf(name string) int64 {
	w := 1
	if s.cfg.Weight != nil {
		w = s.cfg.Weight(name)
	}
	return int64(min(max(w, 1), MaxWeight))
}

// SetWeight re-reads an account's weight (Config.Weight) if the account is
// busy; an idle account's is read when it next becomes busy.
func (s *Scheduler[K]) SetWeight(name string) {
	if a := s.accounts[name]; a != nil {
		a.weight = s.weightOf(name)
	}
}

func cost[K comparable](t Task[K]) int64 { return max(t.Cost, 1) }

// Push queues t. It returns false, changing nothing, when a task with its
// key is already queued or running.
func (s *Scheduler[K]) Push(t Task[K]) bool {
	if _, dup := s.tasks[t.Key]; dup {
		return false
	}
	a := s.accounts[t.Account]
	if a == nil {
		a = &account[K]{name: t.Account, weight: s.weightOf(t.Account), fresh: true, running: map[K]*entry[K]{}}
		s.accounts[t.Account] = a
	}
	s.seq++
	e := &entry[K]{t: t, seq: s.seq, acct: a}
	s.tasks[t.Key] = e
	heap.Push(&a.queue, e)
	s.join(a)
	return true
}

// join puts an account with queued work in the rotation, at the end of the
// current round (just before the account whose turn it is).
func (s *Scheduler[K]) join(a *account[K]) {
	if a.elem != nil {
		return
	}
	if s.cur == nil {
		a.elem = s.ring.PushBack(a)
		s.cur = a.elem
		return
	}
	a.elem = s.ring.InsertBefore(a, s.cur)
}

// leave takes an account whose queue is empty out of the rotation. Its
// credit goes (classic DRR: an account is not owed rows for the time it
// had nothing to run).
func (s *Scheduler[K]) leave(a *account[K]) {
	if a.elem == nil {
		return
	}
	if s.cur == a.elem {
		s.advance()
		if s.cur == a.elem { // it was the only one
			s.cur = nil
		}
	}
	s.ring.Remove(a.elem)
	a.elem, a.deficit, a.arrived = nil, 0, false
}

// advance ends the current account's turn and moves to the next.
func (s *Scheduler[K]) advance() {
	if s.cur == nil {
		return
	}
	s.cur.Value.(*account[K]).arrived = false
	if s.cur = s.cur.Next(); s.cur == nil {
		s.cur = s.ring.Front()
	}
}

// forget drops an account with nothing queued or running.
func (s *Scheduler[K]) forget(a *account[K]) {
	if a.queue.Len() == 0 && len(a.running) == 0 {
		s.leave(a)
		delete(s.accounts, a.name)
	}
}

func (s *Scheduler[K]) eligible(a *account[K]) bool {
	return a.queue.Len() > 0 && len(a.running) < s.cfg.PerAccount
}

// Next starts the next task, if the budgets allow one: a fresh account's
// first task if there is one, else the next in DRR order among the accounts
// below their budget. The task counts as running until Done or Requeue.
func (s *Scheduler[K]) Next() (Task[K], bool) {
	var zero Task[K]
	if s.running >= s.cfg.Workers || s.cur == nil {
		return zero, false
	}
	// Newcomers first, in the order they joined (the ring's order from the
	// current turn on).
	someone := false
	for e, i := s.cur, 0; i < s.ring.Len(); e, i = s.nextElem(e), i+1 {
		a := e.Value.(*account[K])
		if !s.eligible(a) {
			continue
		}
		someone = true
		if a.fresh {
			return s.dispatch(a), true
		}
	}
	if !someone {
		return zero, false
	}
	s.fastForward()
	// After fastForward some account can afford its head task within one
	// pass; two passes is a generous bound.
	for i := 0; i < 2*s.ring.Len()+2; i++ {
		a := s.cur.Value.(*account[K])
		if s.eligible(a) {
			head := cost(a.queue[0].t)
			if !a.arrived {
				// The credit left from the last turn is below the head's
				// cost in steady state; the cap only stops an account that
				// sat out turns at its budget from saving up a burst.
				a.deficit = min(a.deficit, head) + s.cfg.Quantum*a.weight
				a.arrived = true
			}
			if head <= a.deficit {
				return s.dispatch(a), true
			}
		}
		s.advance()
	}
	// Not reached (see fastForward); should it be, progress beats exact
	// accounting: run the current account's task on credit.
	for i := 0; i < s.ring.Len(); i++ {
		if a := s.cur.Value.(*account[K]); s.eligible(a) {
			return s.dispatch(a), true
		}
		s.advance()
	}
	return zero, false
}

func (s *Scheduler[K]) nextElem(e *list.Element) *list.Element {
	if n := e.Next(); n != nil {
		return n
	}
	return s.ring.Front()
}

// fastForward credits the eligible accounts with the rounds in which none
// of them could have afforded its head task, so that Next needs at most one
// pass however large a task is against the quantum.
func (s *Scheduler[K]) fastForward() {
	best := int64(-1)
	for e := s.ring.Front(); e != nil; e = e.Next() {
		a := e.Value.(*account[K])
		if !s.eligible(a) {
			continue
		}
		q := s.cfg.Quantum * a.weight
		need := cost(a.queue[0].t) - a.deficit
		var k int64 // turns until it can afford its head, counting this one
		if e == s.cur && a.arrived {
			if need <= 0 {
				return // it can run now
			}
			k = 1 + (need+q-1)/q // the rest of this turn is spent
		} else {
			need -= q // credited on arrival
			k = 1
			if need > 0 {
				k += (need + q - 1) / q
			}
		}
		if best < 0 || k < best {
			best = k
		}
	}
	if best <= 1 {
		return
	}
	for e := s.ring.Front(); e != nil; e = e.Next() {
		if a := e.Value.(*account[K]); s.eligible(a) {
			a.deficit += (best - 1) * s.cfg.Quantum * a.weight
		}
	}
}

func (s *Scheduler[K]) dispatch(a *account[K]) Task[K] {
	e := heap.Pop(&a.queue).(*entry[K])
	e.charged = cost(e.t)
	a.deficit -= e.charged
	a.fresh = false
	s.clock++
	e.started = s.clock
	a.running[e.t.Key] = e
	s.running++
	if a.queue.Len() == 0 {
		s.leave(a)
	}
	return e.t
}

// Done ends a running task. It returns false when key is not running.
func (s *Scheduler[K]) Done(key K) bool {
	e := s.tasks[key]
	if e == nil || e.idx >= 0 {
		return false
	}
	s.stop(e)
	delete(s.tasks, key)
	s.forget(e.acct)
	return true
}

func (s *Scheduler[K]) stop(e *entry[K]) {
	a := e.acct
	delete(a.running, e.t.Key)
	s.running--
	if e.preempting {
		e.preempting = false
		a.preempting--
		s.preempting--
	}
}

// Requeue gives back a running task that was stopped before it finished
// (preempted, or otherwise interrupted): it goes back to its place in its
// account's queue, to be charged again when it runs. What it was charged
// is credited back only as far as it cancels a debt: an account is
// preempted because it holds more than its share, and a credit would let
// it take the freed workers straight back, ahead of the others' turns. It
// returns false when key is not running.
func (s *Scheduler[K]) Requeue(key K) bool {
	e := s.tasks[key]
	if e == nil || e.idx >= 0 {
		return false
	}
	s.stop(e)
	a := e.acct
	if a.deficit < 0 {
		a.deficit = min(a.deficit+e.charged, 0)
	}
	heap.Push(&a.queue, e)
	s.join(a)
	return true
}

// Remove drops every queued task for which drop is true (a canceled job's
// shards) and returns how many. Running tasks are not touched.
func (s *Scheduler[K]) Remove(drop func(Task[K]) bool) int {
	n := 0
	for k, e := range s.tasks {
		if e.idx < 0 || !drop(e.t) {
			continue
		}
		a := e.acct
		heap.Remove(&a.queue, e.idx)
		delete(s.tasks, k)
		n++
		if a.queue.Len() == 0 {
			s.leave(a)
		}
		s.forget(a)
	}
	return n
}

// Preempt names the running tasks to stop so that every fresh account with
// queued work gets a worker: none when Config.Preempt is off, or when free
// workers and the tasks already being stopped suffice. A victim is the
// youngest unpinned running task of the account with the most running
// tasks per unit of weight among those with two or more (an account's only
// running task is never taken). The caller stops each victim and gives it
// back with Requeue (or Done if it finished after all).
func (s *Scheduler[K]) Preempt() []K {
	if !s.cfg.Preempt {
		return nil
	}
	waiting := 0
	for _, a := range s.accounts {
		if a.fresh && s.eligible(a) {
			waiting++
		}
	}
	need := waiting - (s.cfg.Workers - s.running) - s.preempting
	var out []K
	for ; need > 0; need-- {
		var victim *account[K]
		var vn int64
		for _, a := range s.accounts {
			n := int64(len(a.running) - a.preempting)
			if n < 2 || !hasUnpinned(a) {
				continue
			}
			// n/w > vn/vw, without division; ties: more running, then name.
			if victim == nil || n*victim.weight > vn*a.weight ||
				(n*victim.weight == vn*a.weight && (n > vn || n == vn && a.name < victim.name)) {
				victim, vn = a, n
			}
		}
		if victim == nil {
			break
		}
		var youngest *entry[K]
		for _, e := range victim.running {
			if !e.preempting && !e.t.Pinned && (youngest == nil || e.started > youngest.started) {
				youngest = e
			}
		}
		youngest.preempting = true
		victim.preempting++
		s.preempting++
		out = append(out, youngest.t.Key)
	}
	return out
}

func hasUnpinned[K comparable](a *account[K]) bool {
	for _, e := range a.running {
		if !e.preempting && !e.t.Pinned {
			return true
		}
	}
	return false
}

// Queued reports whether key is queued (not running).
func (s *Scheduler[K]) Queued(key K) bool {
	e := s.tasks[key]
	return e != nil && e.idx >= 0
}

// Running reports whether key is running.
func (s *Scheduler[K]) Running(key K) bool {
	e := s.tasks[key]
	return e != nil && e.idx < 0
}

// Preempting reports whether key is running and was named by Preempt.
func (s *Scheduler[K]) Preempting(key K) bool {
	e := s.tasks[key]
	return e != nil && e.idx < 0 && e.preempting
}

// Len returns the tasks queued and running.
func (s *Scheduler[K]) Len() (queued, running int) { return len(s.tasks) - s.running, s.running }

// AccountLen returns an account's tasks queued and running.
func (s *Scheduler[K]) AccountLen(name string) (queued, running int) {
	if a := s.accounts[name]; a != nil {
		return a.queue.Len(), len(a.running)
	}
	return 0, 0
}

// QueuedTasks lists the queued tasks (tests, diagnostics), in no order.
func (s *Scheduler[K]) QueuedTasks() []Task[K] {
	var out []Task[K]
	for _, e := range s.tasks {
		if e.idx >= 0 {
			out = append(out, e.t)
		}
	}
	return out
}

// taskHeap orders an account's queued tasks: Order, Index, then push order.
type taskHeap[K comparable] []*entry[K]

func (h taskHeap[K]) Len() int { return len(h) }
func (h taskHeap[K]) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.t.Order != b.t.Order {
		return a.t.Order < b.t.Order
	}
	if a.t.Group != b.t.Group {
		return a.t.Group < b.t.Group
	}
	if a.t.Index != b.t.Index {
		return a.t.Index < b.t.Index
	}
	return a.seq < b.seq
}
func (h taskHeap[K]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *taskHeap[K]) Push(x any) {
	e := x.(*entry[K])
	e.idx = len(*h)
	*h = append(*h, e)
}
func (h *taskHeap[K]) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.idx = -1
	return e
}

// ParseWeights reads "name=weight,name=weight" (--fair-weights) over
// defaults, a copy of which it returns: every name must be one of names
// (compared case-insensitively; the result uses the names as given) and
// every weight 1..MaxWeight.
func ParseWeights(spec string, names []string, defaults map[string]int) (map[string]int, error) {
	out := make(map[string]int, len(names))
	for _, n := range names {
		out[n] = 1
		if w, ok := defaults[n]; ok {
			out[n] = w
		}
	}
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, val, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not name=weight", part)
		}
		name = strings.TrimSpace(name)
		known := ""
		for _, n := range names {
			if strings.EqualFold(n, name) {
				known = n
			}
		}
		if known == "" {
			return nil, fmt.Errorf("unknown name %q (want one of %s)", name, strings.Join(names, ", "))
		}
		w, err := strconv.Atoi(strings.TrimSpace(val))
		if err != nil || w < 1 || w > MaxWeight {
			return nil, fmt.Errorf("weight of %s must be a whole number 1..%d, not %q", known, MaxWeight, strings.TrimSpace(val))
		}
		out[known] = w
	}
	return out, nil
}
