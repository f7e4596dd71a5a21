package fairshare

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
)

type key struct {
	job   string
	shard int
}

func weights(m map[string]int) func(string) int {
	return func(a string) int { return m[a] }
}

// queue pushes n tasks of cost rows for account acct's job (ordered by
// order), shards 0..n-1.
func queue(t *testing.T, s *Scheduler[key], acct, job string, order int64, n int, rows int64) {
	t.Helper()
	for i := 0; i < n; i++ {
		if !s.Push(Task[key]{Key: key{job, i}, Account: acct, Order: order, Group: job, Index: i, Cost: rows}) {
			t.Fatalf("push %s/%d refused", job, i)
		}
	}
}

// serve runs n tasks one after the other on one worker and returns the rows
// each account was served.
func serve(t *testing.T, s *Scheduler[key], n int) map[string]int64 {
	t.Helper()
	rows := map[string]int64{}
	for i := 0; i < n; i++ {
		tk, ok := s.Next()
		if !ok {
			t.Fatalf("nothing to run after %d tasks", i)
		}
		rows[tk.Account] += tk.Cost
		if !s.Done(tk.Key) {
			t.Fatalf("done %v: not running", tk.Key)
		}
	}
	return rows
}

// Weights 2:1 give rows 2:1 over any stretch of whole rounds, whoever has
// more queued.
func TestWeightsGiveRowsInProportion(t *testing.T) {
	s := New[key](Config{Workers: 1, Weight: weights(map[string]int{"a": 2, "b": 1})})
	queue(t, s, "a", "ja", 1, 500, 1000)
	queue(t, s, "b", "jb", 2, 500, 1000)
	rows := serve(t, s, 300)
	if rows["a"] != 200_000 || rows["b"] != 100_000 {
		t.Errorf("rows served %v, want a 200000, b 100000", rows)
	}
}

// The unit is rows, not tasks: an account with shards ten times smaller
// runs ten of them for each of the other's.
func TestRowsNotTasks(t *testing.T) {
	s := New[key](Config{Workers: 1})
	queue(t, s, "big", "j1", 1, 50, 1000)
	queue(t, s, "small", "j2", 2, 500, 100)
	rows := serve(t, s, 220) // 20 rounds: 20 big shards + 200 small ones
	if d := rows["big"] - rows["small"]; d < -1000 || d > 1000 {
		t.Errorf("rows served %v: differ by more than one shard", rows)
	}
}

// A task far larger than the quantum runs after the rounds it takes to
// save up for it (DRR), meanwhile the other account runs its quantum each
// round; and Next does not loop a round per quantum to get there.
func TestTaskLargerThanQuantum(t *testing.T) {
	s := New[key](Config{Workers: 1, Quantum: 10})
	queue(t, s, "a", "huge", 1, 2, 100_000)
	queue(t, s, "b", "many", 2, 50_000, 10)
	var order []string
	for len(order) < 30_000 {
		tk, ok := s.Next()
		if !ok {
			t.Fatal("stalled")
		}
		s.Done(tk.Key)
		order = append(order, tk.Account)
	}
	// a is served first (a newcomer, charged 100,000 rows), then needs
	// 200,000 rows of credit for its second task: 20,000 rounds, in each of
	// which b runs one task of 10 rows.
	if order[0] != "a" {
		t.Fatalf("first task of %s", order[0])
	}
	second := slices.Index(order[1:], "a") + 1
	if second < 19_990 || second > 20_010 {
		t.Errorf("a's second task started after %d of b's, want about 20,000", second-1)
	}

	// Alone, with tasks a billion times the quantum: no round-by-round walk.
	s = New[key](Config{Workers: 1, Quantum: 1})
	queue(t, s, "a", "giant", 1, 3, 1_000_000_000)
	for i := 0; i < 3; i++ {
		tk, ok := s.Next()
		if !ok {
			t.Fatal("stalled")
		}
		s.Done(tk.Key)
	}
}

// Within an account tasks run by job submission (Order), then shard
// (Index), whatever order they were queued in.
func TestFIFOWithinAccount(t *testing.T) {
	s := New[key](Config{Workers: 1})
	queue(t, s, "a", "newer", 20, 3, 10)
	queue(t, s, "a", "older", 10, 3, 10)
	s.Push(Task[key]{Key: key{"older", -1}, Account: "a", Order: 10, Group: "older", Index: -1, Cost: 1}) // its retries
	queue(t, s, "a", "same-instant-2", 30, 2, 10)
	queue(t, s, "a", "same-instant-1", 30, 2, 10)
	var got []string
	for {
		tk, ok := s.Next()
		if !ok {
			break
		}
		got = append(got, fmt.Sprintf("%s/%d", tk.Key.job, tk.Key.shard))
		s.Done(tk.Key)
	}
	want := []string{"older/-1", "older/0", "older/1", "older/2", "newer/0", "newer/1", "newer/2",
		"same-instant-1/0", "same-instant-1/1", "same-instant-2/0", "same-instant-2/1"}
	if !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

// A newcomer's first task goes before the next of an account with a deep
// queue; after that, turns.
func TestNewcomerFirst(t *testing.T) {
	s := New[key](Config{Workers: 2})
	queue(t, s, "a", "big", 1, 1000, 1000)
	t1, _ := s.Next()
	t2, _ := s.Next()
	if _, ok := s.Next(); ok {
		t.Fatal("a third task started on two workers")
	}
	queue(t, s, "b", "small", 2, 2, 5)
	if v := s.Preempt(); v != nil {
		t.Fatalf("preemption off, but Preempt named %v", v)
	}
	s.Done(t1.Key)
	if tk, _ := s.Next(); tk.Account != "b" {
		t.Fatalf("freed worker went to %s, want the newcomer b", tk.Account)
	}
	s.Done(t2.Key)
	// b's second task takes its turn: with equal weights and a's credit
	// spent, it is b's turn now or right after one of a's.
	tk, _ := s.Next()
	if tk.Account != "b" {
		s.Done(tk.Key)
		tk, _ = s.Next()
	}
	if tk.Account != "b" || tk.Key.shard != 1 {
		t.Fatalf("b's second task not within one of a's: got %v", tk)
	}
}

// With preemption, a newcomer that finds every worker busy names the
// youngest task of the busiest account; an account's only running task and
// pinned tasks are never named; what is being stopped is not named twice.
func TestPreempt(t *testing.T) {
	s := New[key](Config{Workers: 3, Preempt: true})
	queue(t, s, "a", "big", 1, 100, 1000)
	var started []Task[key]
	for i := 0; i < 2; i++ {
		tk, _ := s.Next()
		started = append(started, tk)
	}
	s.Push(Task[key]{Key: key{"retry", -1}, Account: "c", Cost: 1, Pinned: true})
	tc, _ := s.Next() // c's only task: pinned
	if tc.Account != "c" {
		t.Fatalf("third worker ran %v", tc)
	}
	queue(t, s, "b", "small", 2, 1, 5)
	v := s.Preempt()
	if len(v) != 1 || v[0] != started[1].Key {
		t.Fatalf("victims %v, want a's youngest %v", v, started[1].Key)
	}
	if again := s.Preempt(); again != nil {
		t.Fatalf("named again: %v", again)
	}
	if !s.Preempting(v[0]) {
		t.Fatal("victim not marked")
	}
	if _, ok := s.Next(); ok {
		t.Fatal("started a task while the victim still holds its worker")
	}
	if !s.Requeue(v[0]) {
		t.Fatal("requeue")
	}
	if tk, _ := s.Next(); tk.Account != "b" {
		t.Fatalf("freed worker went to %v, want b", tk)
	}
	// a has one running now: a second newcomer gets no victim from a
	// (its only task) nor c (pinned, only task).
	queue(t, s, "d", "small-d", 3, 1, 5)
	if v := s.Preempt(); v != nil {
		t.Fatalf("victims %v; a and c have one task each", v)
	}
	// The requeued task is a's next again.
	s.Done(started[0].Key)
	if tk, _ := s.Next(); tk.Account != "d" {
		t.Fatalf("got %v, want d (newcomer)", tk)
	}
	s.Done(tc.Key)
	if tk, _ := s.Next(); tk.Key != v[0] {
		t.Fatalf("got %v, want a's requeued %v first", tk, v[0])
	}
}

// An account never runs more than PerAccount tasks; others use the rest.
func TestPerAccountBudget(t *testing.T) {
	s := New[key](Config{Workers: 4, PerAccount: 2})
	queue(t, s, "a", "ja", 1, 10, 100)
	for i := 0; i < 2; i++ {
		if _, ok := s.Next(); !ok {
			t.Fatal("nothing started")
		}
	}
	if tk, ok := s.Next(); ok {
		t.Fatalf("a third task of a started: %v", tk)
	}
	queue(t, s, "b", "jb", 2, 10, 100)
	for i := 0; i < 2; i++ {
		if tk, ok := s.Next(); !ok || tk.Account != "b" {
			t.Fatalf("got %v %v, want b", tk, ok)
		}
	}
	if tk, ok := s.Next(); ok {
		t.Fatalf("a fifth task started on four workers: %v", tk)
	}
	if q, r := s.AccountLen("a"); q != 8 || r != 2 {
		t.Errorf("a: %d queued %d running", q, r)
	}
}

// Remove drops queued tasks only; an account left with nothing is
// forgotten.
func TestRemove(t *testing.T) {
	s := New[key](Config{Workers: 1})
	queue(t, s, "a", "ja", 1, 3, 10)
	queue(t, s, "b", "jb", 2, 3, 10)
	tk, _ := s.Next()
	if n := s.Remove(func(x Task[key]) bool { return x.Key.job == tk.Key.job }); n != 2 {
		t.Fatalf("removed %d", n)
	}
	if !s.Running(tk.Key) {
		t.Fatal("running task removed")
	}
	s.Done(tk.Key)
	if len(s.accounts) != 1 {
		t.Errorf("%d accounts kept, want 1", len(s.accounts))
	}
	if n := s.Remove(func(Task[key]) bool { return true }); n != 3 {
		t.Fatalf("removed %d", n)
	}
	if len(s.accounts) != 0 || s.ring.Len() != 0 || s.cur != nil {
		t.Errorf("state left: %d accounts, ring %d", len(s.accounts), s.ring.Len())
	}
	if _, ok := s.Next(); ok {
		t.Error("ran a removed task")
	}
}

func TestPushDuplicate(t *testing.T) {
	s := New[key](Config{Workers: 1})
	k := key{"j", 0}
	if !s.Push(Task[key]{Key: k, Account: "a"}) || s.Push(Task[key]{Key: k, Account: "a"}) {
		t.Fatal("duplicate queued")
	}
	s.Next()
	if s.Push(Task[key]{Key: k, Account: "a"}) {
		t.Fatal("running task queued again")
	}
}

func TestParseWeights(t *testing.T) {
	names := []string{"payg", "starter", "standard", "professional"}
	w, err := ParseWeights(" PAYG=1, professional=4 ,", names, map[string]int{"standard": 2})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"payg": 1, "starter": 1, "standard": 2, "professional": 4}
	for k, v := range want {
		if w[k] != v {
			t.Errorf("%s: %d, want %d", k, w[k], v)
		}
	}
	for _, bad := range []string{"gold=2", "payg", "payg=0", "payg=101", "payg=x"} {
		if _, err := ParseWeights(bad, names, nil); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// sim drives a scheduler with random operations and checks its invariants
// after each: budgets hold, nothing is lost or doubled, each account's
// tasks start in FIFO order, and two accounts that stay backlogged are
// served rows in proportion to their weights within a bounded lag.
func sim(t *testing.T, seed int64, ops []byte) {
	r := rand.New(rand.NewSource(seed))
	cfg := Config{Workers: 1 + r.Intn(5), PerAccount: r.Intn(4), Quantum: int64(1 + r.Intn(2000)), Preempt: r.Intn(2) == 0}
	w := map[string]int{"a": 1 + r.Intn(4), "b": 1 + r.Intn(4), "c": 1, "d": 2}
	cfg.Weight = weights(w)
	s := New[key](cfg)
	perAcct := s.Config().PerAccount
	type rec struct {
		t     Task[key]
		seq   int
		state string // queued, running
	}
	all := map[key]*rec{}
	seq := 0
	accts := []string{"a", "b", "c", "d"}
	jobs := 0
	for _, op := range ops {
		switch op % 6 {
		case 0, 1: // a job arrives
			acct := accts[int(op/6)%len(accts)]
			jobs++
			n := 1 + r.Intn(4)
			for i := 0; i < n; i++ {
				tk := Task[key]{Key: key{fmt.Sprint("j", jobs), i}, Account: acct, Order: int64(jobs / 2), Group: fmt.Sprint("j", jobs), Index: i, Cost: int64(r.Intn(3000)), Pinned: r.Intn(5) == 0}
				if !s.Push(tk) {
					t.Fatalf("push %v refused", tk.Key)
				}
				seq++
				all[tk.Key] = &rec{t: tk, seq: seq, state: "queued"}
			}
		case 2: // a worker asks
			tk, ok := s.Next()
			if !ok {
				continue
			}
			rc := all[tk.Key]
			if rc == nil || rc.state != "queued" {
				t.Fatalf("Next returned %v in state %v", tk.Key, rc)
			}
			for _, o := range all { // FIFO within the account
				if o.state == "queued" && o.t.Account == tk.Account && o != rc &&
					(o.t.Order < tk.Order || o.t.Order == tk.Order && (o.t.Group < tk.Group || o.t.Group == tk.Group && o.t.Index < tk.Index)) {
					t.Fatalf("%v started before %v of the same account", tk.Key, o.t.Key)
				}
			}
			rc.state = "running"
		case 3, 4: // a task ends (or is given back)
			var running []*rec
			for _, o := range all {
				if o.state == "running" {
					running = append(running, o)
				}
			}
			if len(running) == 0 {
				continue
			}
			slices.SortFunc(running, func(x, y *rec) int { return x.seq - y.seq })
			o := running[r.Intn(len(running))]
			if op%6 == 4 && s.Preempting(o.t.Key) {
				s.Requeue(o.t.Key)
				o.state = "queued"
			} else {
				if !s.Done(o.t.Key) {
					t.Fatalf("done %v refused", o.t.Key)
				}
				delete(all, o.t.Key)
			}
		case 5:
			for _, k := range s.Preempt() {
				o := all[k]
				if o == nil || o.state != "running" || o.t.Pinned {
					t.Fatalf("preempt named %v (%v)", k, o)
				}
			}
		}
		// Invariants.
		q, run := 0, 0
		per := map[string]int{}
		for _, o := range all {
			switch o.state {
			case "queued":
				q++
				if !s.Queued(o.t.Key) {
					t.Fatalf("%v lost", o.t.Key)
				}
			case "running":
				run++
				per[o.t.Account]++
				if !s.Running(o.t.Key) {
					t.Fatalf("%v not running", o.t.Key)
				}
			}
		}
		if sq, sr := s.Len(); sq != q || sr != run {
			t.Fatalf("scheduler has %d queued %d running, want %d %d", sq, sr, q, run)
		}
		if run > cfg.Workers {
			t.Fatalf("%d running on %d workers", run, cfg.Workers)
		}
		for a, n := range per {
			if n > perAcct {
				t.Fatalf("%s runs %d, budget %d", a, n, perAcct)
			}
		}
	}
	// Drain: everything queued still runs.
	for _, o := range all {
		if o.state == "running" {
			s.Done(o.t.Key)
		}
	}
	for i := 0; ; i++ {
		tk, ok := s.Next()
		if !ok {
			break
		}
		s.Done(tk.Key)
		if i > 100_000 {
			t.Fatal("drain does not end")
		}
	}
	if q, r := s.Len(); q != 0 || r != 0 || len(s.accounts) != 0 || s.ring.Len() != 0 {
		t.Fatalf("left after drain: %d queued, %d running, %d accounts", q, r, len(s.accounts))
	}
}

func TestSimulated(t *testing.T) {
	for seed := int64(0); seed < 200; seed++ {
		r := rand.New(rand.NewSource(seed + 1000))
		ops := make([]byte, 400)
		r.Read(ops)
		sim(t, seed, ops)
	}
}

func FuzzScheduler(f *testing.F) {
	f.Add(int64(1), []byte{0, 2, 2, 3, 6, 2, 5, 4, 2})
	f.Add(int64(7), []byte(strings.Repeat("\x00\x06\x02\x02\x05\x04\x03", 20)))
	f.Fuzz(func(t *testing.T, seed int64, ops []byte) {
		if len(ops) > 2000 {
			ops = ops[:2000]
		}
		sim(t, seed, ops)
	})
}

// Two accounts that stay backlogged on any number of workers are served
// rows in proportion to their weights, within a lag of one quantum plus
// one task per unit of weight.
func TestFairnessBoundProperty(t *testing.T) {
	for seed := int64(0); seed < 50; seed++ {
		r := rand.New(rand.NewSource(seed))
		wa, wb := 1+r.Intn(4), 1+r.Intn(4)
		q := int64(100 + r.Intn(2000))
		workers := 1 + r.Intn(6)
		s := New[key](Config{Workers: workers, Quantum: q, Weight: weights(map[string]int{"a": wa, "b": wb})})
		maxCost := int64(0)
		push := func(acct string, i int) {
			c := int64(1 + r.Intn(1500))
			maxCost = max(maxCost, c)
			s.Push(Task[key]{Key: key{acct, i}, Account: acct, Order: int64(i), Index: 0, Cost: c})
		}
		for i := 0; i < 50; i++ {
			push("a", i)
			push("b", i)
		}
		next := 50
		served := map[string]int64{}
		var running []Task[key]
		for step := 0; step < 3000; step++ {
			for {
				tk, ok := s.Next()
				if !ok {
					break
				}
				served[tk.Account] += tk.Cost
				running = append(running, tk)
			}
			i := r.Intn(len(running))
			s.Done(running[i].Key)
			push(running[i].Account, next) // keep both backlogged
			next++
			running = slices.Delete(running, i, i+1)
			// |served_a/wa - served_b/wb| within the DRR bound (plus the
			// tasks in flight on the other workers).
			lag := float64(served["a"])/float64(wa) - float64(served["b"])/float64(wb)
			bound := float64(q+maxCost) * float64(workers+1)
			if lag > bound || -lag > bound {
				t.Fatalf("seed %d step %d: served %v (weights %d:%d), lag %.0f over %.0f", seed, step, served, wa, wb, lag, bound)
			}
		}
	}
}

// A preempted account does not get its shards back ahead of the others'
// turns: when an account that held every worker gave three back to three
// newcomers, the next shards go one per account in turn.
func TestPreemptedAccountGetsNoHeadStart(t *testing.T) {
	s := New[key](Config{Workers: 4, Preempt: true})
	queue(t, s, "a", "big", 1, 100, 1000)
	for i := 0; i < 4; i++ {
		s.Next()
	}
	for i, acct := range []string{"b", "c", "d"} {
		queue(t, s, acct, "job-"+acct, int64(2+i), 100, 1000)
		for _, v := range s.Preempt() {
			s.Requeue(v)
		}
		if tk, _ := s.Next(); tk.Account != acct {
			t.Fatalf("newcomer %s: worker went to %s", acct, tk.Account)
		}
	}
	// Every account has one shard running; 40 shards more, each started
	// when one ends, go 10 to each account (within one).
	n := map[string]int{}
	for i := 0; i < 40; i++ {
		var running []key
		for k, e := range s.tasks {
			if e.idx < 0 {
				running = append(running, k)
			}
		}
		slices.SortFunc(running, func(x, y key) int { return strings.Compare(x.job, y.job)*1000 + x.shard - y.shard })
		s.Done(running[i%len(running)])
		tk, ok := s.Next()
		if !ok {
			t.Fatal("nothing started")
		}
		n[tk.Account]++
	}
	for _, acct := range []string{"a", "b", "c", "d"} {
		if n[acct] < 9 || n[acct] > 11 {
			t.Errorf("shards started per account %v, want 10 each", n)
			break
		}
	}
}
