package jobs

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"
)

func rec(i int, rows int64, outcome, data string) Recorded {
	return Recorded{Index: i, Rows: rows, Outcome: outcome, Data: []byte(data)}
}

// Recording the same answers twice counts them once; rows_processed counts
// each input's multiplicity; the outcome counters count rows.
func TestRecordIdempotent(t *testing.T) {
	e := newEnv(t)
	// acme x3, beta x1, gamma x2, one invalid row.
	b := slugs("acme", "beta", "Acme", "!bad", "gamma", "ACME", "gamma")
	j := e.submit(b)
	if j.Distinct != 3 || j.TotalRows != 7 {
		t.Fatalf("job %+v", j)
	}
	got := e.get(j.ID)
	if got.RowsProcessed != 1 { // the invalid row is answered on arrival
		t.Fatalf("rows_processed %d on arrival, want 1", got.RowsProcessed)
	}
	now := time.Now()
	first := []Recorded{rec(0, 3, OutcomeFound, `{"n":"Acme"}`), rec(1, 1, OutcomeNotFound, `{}`)}
	n, err := e.st.Record(e.ctx, j, now, first)
	if err != nil || n != 2 {
		t.Fatalf("record: %d, %v", n, err)
	}
	check := func(rows, distinct, found, notFound int64) {
		t.Helper()
		g := e.get(j.ID)
		if g.RowsProcessed != rows || g.DistinctProcessed != distinct ||
			g.Outcomes[OutcomeFound] != found || g.Outcomes[OutcomeNotFound] != notFound {
			t.Errorf("rows %d distinct %d found %d not_found %d; want %d %d %d %d",
				g.RowsProcessed, g.DistinctProcessed, g.Outcomes[OutcomeFound], g.Outcomes[OutcomeNotFound],
				rows, distinct, found, notFound)
		}
	}
	check(5, 2, 3, 1)

	// The same answers again, and a different answer for an answered input:
	// nothing new, nothing counted, the first answer stays.
	for _, again := range [][]Recorded{first, {rec(0, 3, OutcomeNotFound, `{"n":"other"}`)}} {
		n, err = e.st.Record(e.ctx, j, now, again)
		if err != nil || n != 0 {
			t.Fatalf("record again: %d, %v", n, err)
		}
		check(5, 2, 3, 1)
	}
	if a := e.answers(j.ID)[0]; a.Outcome != OutcomeFound || string(a.Data) != `{"n":"Acme"}` {
		t.Errorf("answer 0 overwritten: %s %s", a.Outcome, a.Data)
	}
	if g := e.get(j.ID); g.Status != StatusRunning || !g.CompletedAt.IsZero() || !e.active(j.ID) {
		t.Errorf("job completed early: %+v", g)
	}

	// A batch mixing an answered and a new input counts only the new one,
	// and the last distinct input completes the job.
	done := now.Add(time.Minute).Truncate(time.Millisecond)
	n, err = e.st.Record(e.ctx, j, done, []Recorded{rec(1, 1, OutcomeFound, `{}`), rec(2, 2, OutcomeFound, `{"n":"Gamma"}`)})
	if err != nil || n != 1 {
		t.Fatalf("record last: %d, %v", n, err)
	}
	check(7, 3, 5, 1)
	g := e.get(j.ID)
	if g.Status != StatusCompleted || !g.CompletedAt.Equal(done) {
		t.Errorf("status %q completed_at %v, want completed at %v", g.Status, g.CompletedAt, done)
	}
	if e.active(j.ID) {
		t.Error("completed job still in the active set")
	}
	expectCounts(t, g, b, func(i int) string { return []string{OutcomeFound, OutcomeNotFound, OutcomeFound}[i] })

	// Replays after completion change nothing, completed_at included.
	n, err = e.st.Record(e.ctx, j, done.Add(time.Hour), []Recorded{rec(2, 2, OutcomeFound, `{}`)})
	if err != nil || n != 0 {
		t.Fatalf("record after completion: %d, %v", n, err)
	}
	if g2 := e.get(j.ID); !g2.CompletedAt.Equal(done) || g2.RowsProcessed != 7 {
		t.Errorf("replay after completion moved the job: %+v", g2)
	}

	if n, err := e.st.Record(e.ctx, j, now, nil); n != 0 || err != nil {
		t.Errorf("empty record: %d, %v", n, err)
	}
	// A deleted (or expired) job takes no answers and gets no keys back.
	if err := e.st.Delete(e.ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.Record(e.ctx, j, now, []Recorded{rec(0, 3, OutcomeFound, `{}`)}); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("record on deleted job: %v, want ErrJobNotFound", err)
	}
	if err := e.st.MarkShardDone(e.ctx, j, 0); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("mark shard done on deleted job: %v, want ErrJobNotFound", err)
	}
	if left := e.jobKeysLeft(j.ID); len(left) != 0 {
		t.Errorf("keys recreated after delete: %v", left)
	}
}

// The job completes exactly when its last distinct input is answered, in
// whatever order the inputs come.
func TestCompletionOnLastDistinctInput(t *testing.T) {
	e := newEnv(t)
	b := slugs("a", "b", "c", "d", "e", "a", "c", "!x")
	j := e.submit(b)
	order := []int{3, 0, 4, 2, 1}
	for k, i := range order {
		g := e.get(j.ID)
		if g.Status != StatusRunning || !g.CompletedAt.IsZero() || !e.active(j.ID) {
			t.Fatalf("before answer %d of %d: status %q completed_at %v active %v", k, len(order), g.Status, g.CompletedAt, e.active(j.ID))
		}
		// Every answer is sent twice, in separate calls.
		for range 2 {
			if _, err := e.st.Record(e.ctx, j, time.Now(), []Recorded{rec(i, b.inputs[i].Rows, OutcomeNotFound, `{}`)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	g := e.get(j.ID)
	if g.Status != StatusCompleted || g.CompletedAt.IsZero() || e.active(j.ID) {
		t.Fatalf("after last answer: %+v active %v", g, e.active(j.ID))
	}
	expectCounts(t, g, b, func(int) string { return OutcomeNotFound })
}

func TestUnfinishedShardsAndMarkDone(t *testing.T) {
	e := newEnv(t)
	b := slugs()
	for i := 0; i < 195; i++ { // 20 shards of 10: the bitmap spans three bytes
		addSlug(b, fmt.Sprintf("co-%d", i))
	}
	j := e.submit(b)
	if j.Shards != 20 {
		t.Fatalf("%d shards", j.Shards)
	}
	done := []int{0, 7, 8, 15, 19}
	for _, s := range done {
		for range 2 { // marking twice counts once
			if err := e.st.MarkShardDone(e.ctx, j, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	left, err := e.st.UnfinishedShards(e.ctx, j)
	if err != nil {
		t.Fatal(err)
	}
	var want []int
	for s := 0; s < 20; s++ {
		if s != 0 && s != 7 && s != 8 && s != 15 && s != 19 {
			want = append(want, s)
		}
	}
	if !reflect.DeepEqual(left, want) {
		t.Errorf("unfinished %v, want %v", left, want)
	}
	if g := e.get(j.ID); g.ShardsDone != int64(len(done)) {
		t.Errorf("shards_done %d, want %d", g.ShardsDone, len(done))
	}
}

func TestLeaseOwnership(t *testing.T) {
	e := newEnv(t)
	id := "00000000-0000-0000-0000-000000000001"
	ok, err := e.st.AcquireLease(e.ctx, id, 3, "a", time.Minute)
	if err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	if ok, _ := e.st.AcquireLease(e.ctx, id, 3, "b", time.Minute); ok {
		t.Fatal("second owner acquired a held lease")
	}
	// The same owner (a restarted instance with a stable id) takes its own
	// lease back, with a fresh ttl.
	e.rdb.PExpire(e.ctx, leaseKey(id, 3), 5*time.Second)
	if ok, _ := e.st.AcquireLease(e.ctx, id, 3, "a", time.Minute); !ok {
		t.Fatal("owner could not retake its own lease")
	}
	if ttl := e.rdb.PTTL(e.ctx, leaseKey(id, 3)).Val(); ttl < 59*time.Second {
		t.Errorf("retaken lease ttl %v", ttl)
	}
	// Only the owner extends or releases.
	if err := e.st.ExtendLease(e.ctx, id, 3, "b", time.Hour); err != nil {
		t.Fatal(err)
	}
	if ttl := e.rdb.PTTL(e.ctx, leaseKey(id, 3)).Val(); ttl > time.Minute {
		t.Errorf("a non-owner extended the lease to %v", ttl)
	}
	if err := e.st.ReleaseLease(e.ctx, id, 3, "b"); err != nil {
		t.Fatal(err)
	}
	if v := e.rdb.Get(e.ctx, leaseKey(id, 3)).Val(); v != "a" {
		t.Errorf("lease owner %q after a non-owner's release, want a", v)
	}
	if err := e.st.ExtendLease(e.ctx, id, 3, "a", time.Hour); err != nil {
		t.Fatal(err)
	}
	if ttl := e.rdb.PTTL(e.ctx, leaseKey(id, 3)).Val(); ttl < 59*time.Minute {
		t.Errorf("owner's extension gave ttl %v", ttl)
	}
	if err := e.st.ReleaseLease(e.ctx, id, 3, "a"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := e.st.AcquireLease(e.ctx, id, 3, "b", time.Minute); !ok {
		t.Error("a released lease could not be taken")
	}
}

// pageJob is a job of 1,203 rows (three row chunks) over 400 distinct
// inputs with invalid rows sprinkled in; the even distinct inputs are
// answered, the odd ones pending.
func pageJob(t *testing.T, e *env) (*Job, *Builder) {
	t.Helper()
	b := NewBuilder(testFamily, 0)
	for i := 0; i < 2*RowChunk+203; i++ {
		if i%97 == 13 {
			addSlug(b, fmt.Sprintf("!bad %d", i))
		} else {
			addSlug(b, fmt.Sprintf("co-%d", i%400))
		}
	}
	j := e.submit(b)
	var recs []Recorded
	for i := 0; i < b.Distinct(); i += 2 {
		recs = append(recs, rec(i, b.inputs[i].Rows, OutcomeFound, fmt.Sprintf(`{"i":%d}`, i)))
	}
	if _, err := e.st.Record(e.ctx, j, time.Now(), recs); err != nil {
		t.Fatal(err)
	}
	return j, b
}

func checkPage(t *testing.T, b *Builder, p *Page, offset, limit int) {
	t.Helper()
	lo, hi := min(offset, b.Rows()), min(offset+limit, b.Rows())
	want := b.rows[lo:hi]
	if len(p.Rows) != len(want) {
		t.Fatalf("page %d+%d: %d rows, want %d", offset, limit, len(p.Rows), len(want))
	}
	if len(want) > 0 && !reflect.DeepEqual(p.Rows, want) {
		t.Fatalf("page %d+%d: rows differ from the submission", offset, limit)
	}
	for k, r := range p.Rows {
		if r.Index < 0 {
			continue
		}
		a, ok := p.Answers[r.Index]
		if r.Index%2 == 1 {
			if ok {
				t.Errorf("row %d (input %d, pending) has an answer %+v", offset+k, r.Index, a)
			}
			continue
		}
		if !ok || a.Outcome != OutcomeFound || string(a.Data) != fmt.Sprintf(`{"i":%d}`, r.Index) {
			t.Errorf("row %d (input %d): answer %+v", offset+k, r.Index, a)
		}
	}
	for idx := range p.Answers {
		found := false
		for _, r := range p.Rows {
			found = found || r.Index == idx
		}
		if !found {
			t.Errorf("page %d+%d carries answer %d of no row on it", offset, limit, idx)
		}
	}
}

func TestReadPage(t *testing.T) {
	e := newEnv(t)
	j, b := pageJob(t, e)
	if j.TotalRows != 1203 {
		t.Fatalf("total rows %d", j.TotalRows)
	}
	cases := []struct{ offset, limit int }{
		{0, 50}, {0, 500}, {450, 100}, {499, 2}, {250, 500}, // spanning chunks 0 and 1
		{500, 500}, {999, 2}, {700, 500}, // chunks 1 and 2
		{1000, 500}, {1150, 500}, {1202, 1}, {1200, 50}, // the last, partial chunk; windows past its end
		{1203, 50}, {1203, 500}, {5000, 10}, // beyond the total
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%d+%d", c.offset, c.limit), func(t *testing.T) {
			p, err := e.st.ReadPage(e.ctx, j.ID, c.offset, c.limit)
			if err != nil {
				t.Fatal(err)
			}
			if p.Job.ID != j.ID || p.Job.TotalRows != j.TotalRows || p.Job.RowsProcessed != e.get(j.ID).RowsProcessed {
				t.Errorf("page job %+v", p.Job)
			}
			checkPage(t, b, p, c.offset, c.limit)
		})
	}
	// Paging by limit from 0 until offset >= total_rows reads every row once.
	var all []Row
	for off := 0; off < int(j.TotalRows); off += 500 {
		p, err := e.st.ReadPage(e.ctx, j.ID, off, 500)
		if err != nil {
			t.Fatalf("page at %d: %v", off, err)
		}
		all = append(all, p.Rows...)
	}
	if !reflect.DeepEqual(all, b.rows) {
		t.Errorf("paging read %d rows, not the %d submitted", len(all), b.Rows())
	}
	if _, err := e.st.ReadPage(e.ctx, "00000000-0000-0000-0000-000000000000", 0, 50); !errors.Is(err, ErrJobNotFound) {
		t.Errorf("unknown job: %v", err)
	}
}

// A job smaller than one chunk: any page whose window reaches past the
// first chunk must still read.
func TestReadPageSmallJob(t *testing.T) {
	e := newEnv(t)
	b := slugs("a", "b", "a", "!x", "c", "d", "e", "f", "g", "h")
	j := e.submit(b)
	var recs []Recorded
	for i := 0; i < b.Distinct(); i += 2 {
		recs = append(recs, rec(i, b.inputs[i].Rows, OutcomeFound, fmt.Sprintf(`{"i":%d}`, i)))
	}
	if _, err := e.st.Record(e.ctx, j, time.Now(), recs); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ offset, limit int }{{0, 50}, {0, 500}, {5, 500}, {9, 500}, {10, 500}, {499, 1}, {499, 2}, {500, 500}} {
		p, err := e.st.ReadPage(e.ctx, j.ID, c.offset, c.limit)
		if err != nil {
			t.Fatalf("page %d+%d: %v", c.offset, c.limit, err)
		}
		checkPage(t, b, p, c.offset, c.limit)
	}
}

// Every key of a job expires with the job: retention counts from the
// submission, and answering does not push it out.
func TestRetentionTTL(t *testing.T) {
	e := newEnv(t)
	e.eng.Retention = 3 * time.Hour
	b := slugs()
	for i := 0; i < 25; i++ {
		addSlug(b, fmt.Sprintf("co-%d", i%21))
	}
	addSlug(b, "!bad")
	j := e.submit(b)
	p := e.processor("w1", newMapAnswerer(map[string]string{"co-3": "Three"}))
	if err := p.ProcessShard(e.ctx, j.ID, 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	for s := 1; s < j.Shards; s++ {
		if err := p.ProcessShard(e.ctx, j.ID, s); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range dataKeys(j.ID) {
		ttl, err := e.rdb.PTTL(e.ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		// PEXPIREAT on the submission's ExpiresAt: within a few seconds
		// below Retention, never above.
		if ttl > e.eng.Retention || ttl < e.eng.Retention-time.Minute {
			t.Errorf("%s: ttl %v, want about %v", k, ttl, e.eng.Retention)
		}
	}
	if left := e.jobKeysLeft(j.ID); len(left) != len(dataKeys(j.ID)) {
		t.Errorf("job keys %v, want exactly %v (no lease left behind)", left, dataKeys(j.ID))
	}
}
