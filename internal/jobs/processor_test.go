package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// directoryJob submits n rows over distinct slugs co-0..co-(distinct-1),
// with every 9th row invalid; the directory knows the slugs divisible by 3.
func directoryJob(t *testing.T, e *env, rows, distinct int) (*Job, *Builder, map[string]string) {
	t.Helper()
	b := NewBuilder(testFamily, rows)
	for i := 0; i < rows; i++ {
		if i%9 == 4 {
			addSlug(b, fmt.Sprintf("!bad row %d", i))
			continue
		}
		// Repeats are written differently, as clients do.
		s := fmt.Sprintf("co-%d", i%distinct)
		if i >= distinct {
			s = " CO-" + s[3:]
		}
		addSlug(b, s)
	}
	known := map[string]string{}
	for i := 0; i < distinct; i += 3 {
		known[fmt.Sprintf("co-%d", i)] = fmt.Sprintf("Company %d", i)
	}
	return e.submit(b), b, known
}

func outcomeOf(b *Builder, known map[string]string) func(int) string {
	return func(i int) string {
		if _, ok := known[b.inputs[i].Payload]; ok {
			return OutcomeFound
		}
		return OutcomeNotFound
	}
}

func processAll(t *testing.T, p *Processor, j *Job) {
	t.Helper()
	for s := 0; s < j.Shards; s++ {
		if err := p.ProcessShard(context.Background(), j.ID, s); err != nil {
			t.Fatalf("shard %d: %v", s, err)
		}
	}
}

// checkAnsweredOnce checks every distinct input was answered (by a
// successful Answer call) exactly once across the answerers.
func checkAnsweredOnce(t *testing.T, b *Builder, ans ...*mapAnswerer) {
	t.Helper()
	total := map[string]int{}
	for _, a := range ans {
		for p, n := range a.answered() {
			total[p] += n
		}
	}
	for _, in := range b.inputs {
		if total[in.Payload] != 1 {
			t.Errorf("input %q answered %d times, want 1", in.Payload, total[in.Payload])
		}
	}
	if len(total) != len(b.inputs) {
		t.Errorf("%d payloads answered, %d distinct inputs", len(total), len(b.inputs))
	}
}

func TestProcessShardTwice(t *testing.T) {
	e := newEnv(t)
	j, b, known := directoryJob(t, e, 60, 23) // 23 distinct: shards of 10, 10, 3; batches of 4
	ans := newMapAnswerer(known)
	p := e.processor("w1", ans)
	processAll(t, p, j)
	first := e.get(j.ID)
	expectCounts(t, first, b, outcomeOf(b, known))
	processAll(t, p, j)                                      // a retried pod, a restarted process
	processAll(t, e.processor("w2", ans), j)                 // another owner
	processAll(t, e.processor("w3", newMapAnswerer(nil)), j) // one that would answer differently
	g := e.get(j.ID)
	expectCounts(t, g, b, outcomeOf(b, known))
	if g.ShardsDone != int64(j.Shards) || !g.CompletedAt.Equal(first.CompletedAt) {
		t.Errorf("shards_done %d of %d, completed_at %v then %v", g.ShardsDone, j.Shards, first.CompletedAt, g.CompletedAt)
	}
	if left, _ := e.st.UnfinishedShards(e.ctx, j); len(left) != 0 {
		t.Errorf("unfinished shards %v", left)
	}
	checkAnsweredOnce(t, b, ans)
	// Each stored answer is the family's answer for its input.
	for i, a := range e.answers(j.ID) {
		var d dirAnswer
		if err := json.Unmarshal(a.Data, &d); err != nil || d.Slug != b.inputs[i].Payload || a.Outcome != outcomeOf(b, known)(i) {
			t.Errorf("answer %d: %s %s", i, a.Outcome, a.Data)
		}
	}
	if left := e.jobKeysLeft(j.ID); len(left) != len(dataKeys(j.ID)) {
		t.Errorf("keys %v: a lease was left behind", left)
	}
}

// Two processors (two replicas, different owners) racing over every shard
// of a job, each with a pool of workers that, like Local, never runs one
// shard twice at once: every input is answered once and every row counted
// once.
func TestProcessShardConcurrent(t *testing.T) {
	e := newEnv(t)
	j, b, known := directoryJob(t, e, 400, 137) // 14 shards
	a1, a2 := newMapAnswerer(known), newMapAnswerer(known)
	a1.delay, a2.delay = 2*time.Millisecond, 2*time.Millisecond
	procs := []*Processor{e.processor("replica-1", a1), e.processor("replica-2", a2)}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var busy int
	errs := make(chan error, 100)
	for k, p := range procs {
		shards := make(chan int, j.Shards)
		for n := 0; n < j.Shards; n++ {
			if k == 0 {
				shards <- n
			} else {
				shards <- j.Shards - 1 - n // the other replica starts from the end
			}
		}
		close(shards)
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for s := range shards {
					err := p.ProcessShard(context.Background(), j.ID, s)
					if errors.Is(err, ErrShardBusy) {
						mu.Lock()
						busy++
						mu.Unlock()
						continue
					}
					if err != nil {
						errs <- err
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// A shard a replica found busy was finished by the lease holder.
	if left, _ := e.st.UnfinishedShards(e.ctx, j); len(left) != 0 {
		t.Fatalf("unfinished shards %v", left)
	}
	g := e.get(j.ID)
	expectCounts(t, g, b, outcomeOf(b, known))
	if g.ShardsDone != int64(j.Shards) {
		t.Errorf("shards_done %d, want %d", g.ShardsDone, j.Shards)
	}
	checkAnsweredOnce(t, b, a1, a2)
	t.Logf("busy leases met: %d", busy)
}

// A held lease turns another processor away without touching the shard or
// the lease.
func TestProcessShardBusyLease(t *testing.T) {
	e := newEnv(t)
	j, _, known := directoryJob(t, e, 30, 20)
	if ok, err := e.st.AcquireLease(e.ctx, j.ID, 1, "elsewhere", time.Minute); !ok || err != nil {
		t.Fatal(ok, err)
	}
	ans := newMapAnswerer(known)
	p := e.processor("w1", ans)
	if err := p.ProcessShard(e.ctx, j.ID, 1); !errors.Is(err, ErrShardBusy) {
		t.Fatalf("ProcessShard on a held lease: %v, want ErrShardBusy", err)
	}
	if len(ans.answered()) != 0 {
		t.Error("answered inputs of a shard leased elsewhere")
	}
	if v := e.rdb.Get(e.ctx, leaseKey(j.ID, 1)).Val(); v != "elsewhere" {
		t.Errorf("lease now held by %q", v)
	}
	if g := e.get(j.ID); g.DistinctProcessed != 0 || g.ShardsDone != 0 {
		t.Errorf("job moved: %+v", g)
	}
	// The other shard is free.
	if err := p.ProcessShard(e.ctx, j.ID, 0); err != nil {
		t.Fatal(err)
	}
}

// The lease of a dead processor expires and the shard is taken over.
func TestProcessShardTakesOverExpiredLease(t *testing.T) {
	e := newEnv(t)
	j, b, known := directoryJob(t, e, 12, 8)
	if ok, _ := e.st.AcquireLease(e.ctx, j.ID, 0, "dead", 150*time.Millisecond); !ok {
		t.Fatal("acquire")
	}
	p := e.processor("w1", newMapAnswerer(known))
	if err := p.ProcessShard(e.ctx, j.ID, 0); !errors.Is(err, ErrShardBusy) {
		t.Fatalf("before expiry: %v", err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := p.ProcessShard(e.ctx, j.ID, 0); err != nil {
		t.Fatalf("after expiry: %v", err)
	}
	expectCounts(t, e.get(j.ID), b, outcomeOf(b, known))
}

// The heartbeat keeps a long shard's lease past its TTL.
func TestProcessShardHeartbeat(t *testing.T) {
	e := newEnv(t)
	j, b, known := directoryJob(t, e, 10, 4) // one batch
	ans := newMapAnswerer(known)
	// Margins are wide (a heartbeat every 200 ms for a 600 ms lease) so a
	// busy machine's scheduling delays cannot make the lease lapse.
	ans.delay = 1600 * time.Millisecond
	p := e.processor("slow", ans)
	p.LeaseTTL = 600 * time.Millisecond
	done := make(chan error, 1)
	go func() { done <- p.ProcessShard(context.Background(), j.ID, 0) }()
	time.Sleep(1300 * time.Millisecond) // more than twice the TTL
	other := e.processor("other", newMapAnswerer(known))
	if err := other.ProcessShard(e.ctx, j.ID, 0); !errors.Is(err, ErrShardBusy) {
		t.Errorf("lease of a live shard lapsed: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	expectCounts(t, e.get(j.ID), b, outcomeOf(b, known))
	if n := e.rdb.Exists(e.ctx, leaseKey(j.ID, 0)).Val(); n != 0 {
		t.Error("lease not released")
	}
}

// A stalled processor loses its lease, another takes the shard over and
// finishes it; when the stalled one wakes up, its late answers count for
// nothing and the takeover's answers stand.
func TestProcessShardStalledOwnerOverlap(t *testing.T) {
	e := newEnv(t)
	j, b, known := directoryJob(t, e, 14, 10) // one shard, batches 0-3, 4-7, 8-9
	stalled, woke := make(chan struct{}), make(chan struct{})
	slow := newMapAnswerer(known)
	slow.tag = "stalled"
	calls := 0
	slow.gate = func(ctx context.Context, payloads []string) error {
		calls++
		if calls == 2 { // second batch: stall
			close(stalled)
			<-woke
		}
		return nil
	}
	ps := e.processor("stalled", slow)
	done := make(chan error, 1)
	go func() { done <- ps.ProcessShard(context.Background(), j.ID, 0) }()
	<-stalled
	// The stall outlives the lease.
	e.rdb.PExpire(e.ctx, leaseKey(j.ID, 0), time.Millisecond)
	time.Sleep(10 * time.Millisecond)
	fresh := newMapAnswerer(known)
	fresh.tag = "takeover"
	if err := e.processor("takeover", fresh).ProcessShard(e.ctx, j.ID, 0); err != nil {
		t.Fatalf("takeover: %v", err)
	}
	mid := e.get(j.ID)
	expectCounts(t, mid, b, outcomeOf(b, known))
	close(woke)
	if err := <-done; err != nil {
		t.Fatalf("stalled processor: %v", err)
	}
	g := e.get(j.ID)
	expectCounts(t, g, b, outcomeOf(b, known))
	if g.ShardsDone != 1 || !g.CompletedAt.Equal(mid.CompletedAt) {
		t.Errorf("shards_done %d, completed_at %v then %v", g.ShardsDone, mid.CompletedAt, g.CompletedAt)
	}
	for i, a := range e.answers(j.ID) {
		var d dirAnswer
		_ = json.Unmarshal(a.Data, &d)
		want := "takeover"
		if i < 4 {
			want = "stalled" // recorded before the stall
		}
		if d.By != want {
			t.Errorf("answer %d by %q, want %q", i, d.By, want)
		}
	}
	// The takeover answered only what was missing.
	for i, in := range b.inputs {
		if n := fresh.callsOf(in.Payload); (i < 4 && n != 0) || (i >= 4 && n != 1) {
			t.Errorf("takeover answered input %d %d times", i, n)
		}
	}
	// The stalled owner did not release the lease it no longer held, nor
	// the takeover's (already released).
	if n := e.rdb.Exists(e.ctx, leaseKey(j.ID, 0)).Val(); n != 0 {
		t.Error("lease left behind")
	}
}

// FailShard answers only the still-unanswered inputs of a shard with the
// error answer; answered inputs keep theirs; the job completes.
func TestFailShard(t *testing.T) {
	e := newEnv(t)
	j, b, known := directoryJob(t, e, 40, 20) // shards 0 (inputs 0-9), 1 (10-19)
	ans := newMapAnswerer(known)
	p := e.processor("w1", ans)
	if err := p.ProcessShard(e.ctx, j.ID, 0); err != nil {
		t.Fatal(err)
	}
	// Shard 1: the first batch made it before the directory went away.
	var part []Recorded
	for i := 10; i < 14; i++ {
		part = append(part, rec(i, b.inputs[i].Rows, OutcomeFound, `{"kept":true}`))
	}
	if _, err := e.st.Record(e.ctx, j, time.Now(), part); err != nil {
		t.Fatal(err)
	}
	if err := p.FailShard(e.ctx, j.ID, 1); err != nil {
		t.Fatal(err)
	}
	g := e.get(j.ID)
	outcome := func(i int) string {
		switch {
		case i < 10:
			return outcomeOf(b, known)(i)
		case i < 14:
			return OutcomeFound
		default:
			return OutcomeError
		}
	}
	expectCounts(t, g, b, outcome)
	if g.ShardsDone != 2 || e.active(j.ID) {
		t.Errorf("shards_done %d active %v", g.ShardsDone, e.active(j.ID))
	}
	stored := e.answers(j.ID)
	for i := 10; i < 20; i++ {
		a := stored[i]
		switch {
		case i < 14 && (a.Outcome != OutcomeFound || string(a.Data) != `{"kept":true}`):
			t.Errorf("answered input %d overwritten: %s %s", i, a.Outcome, a.Data)
		case i >= 14 && (a.Outcome != OutcomeError || string(a.Data) != string(errorData)):
			t.Errorf("unanswered input %d: %s %s, want the error answer", i, a.Outcome, a.Data)
		}
	}
	// Failing a finished shard changes nothing.
	if err := p.FailShard(e.ctx, j.ID, 0); err != nil {
		t.Fatal(err)
	}
	expectCounts(t, e.get(j.ID), b, outcome)
	// Results read back through the row map show each row's answer.
	pg, err := e.st.ReadPage(e.ctx, j.ID, 0, 500)
	if err != nil {
		t.Fatal(err)
	}
	for k, r := range pg.Rows {
		if r.Index >= 0 && pg.Answers[r.Index].Outcome != outcome(int(r.Index)) {
			t.Errorf("row %d: %s, want %s", k, pg.Answers[r.Index].Outcome, outcome(int(r.Index)))
		}
	}
}

// A family the processor does not know is an error, not a silent skip.
func TestProcessShardUnknownFamily(t *testing.T) {
	e := newEnv(t)
	j, _, _ := directoryJob(t, e, 5, 5)
	p := NewProcessor(e.st, map[string]Answerer{"other": newMapAnswerer(nil)}, discard)
	if err := p.ProcessShard(e.ctx, j.ID, 0); err == nil {
		t.Error("no error for a job of an unknown family")
	}
	if err := p.ProcessShard(e.ctx, "00000000-0000-0000-0000-000000000000", 0); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("unknown job: %v", err)
	}
}
