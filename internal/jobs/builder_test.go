package jobs

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestBuilderDedupesByKey(t *testing.T) {
	b := slugs("Acme", "beta", " acme ", "!blank value", "gamma", "ACME", "!person profile", "Beta")
	if b.Rows() != 8 || b.Invalid() != 2 || b.Distinct() != 3 {
		t.Fatalf("rows %d invalid %d distinct %d, want 8 2 3", b.Rows(), b.Invalid(), b.Distinct())
	}
	want := []Row{
		{Echo: "Acme", Index: 0, First: true},
		{Echo: "beta", Index: 1, First: true},
		{Echo: " acme ", Index: 0},
		{Echo: "!blank value", Index: -1, Reason: "blank value"},
		{Echo: "gamma", Index: 2, First: true},
		{Echo: "ACME", Index: 0},
		{Echo: "!person profile", Index: -1, Reason: "person profile"},
		{Echo: "Beta", Index: 1},
	}
	if !reflect.DeepEqual(b.rows, want) {
		t.Errorf("rows\n got %+v\nwant %+v", b.rows, want)
	}
	// Multiplicity: every valid row points at its input once; the first
	// row's payload is the input's.
	wantIn := []Input{{Payload: "acme", Rows: 3}, {Payload: "beta", Rows: 2}, {Payload: "gamma", Rows: 1}}
	if !reflect.DeepEqual(b.inputs, wantIn) {
		t.Errorf("inputs %+v, want %+v", b.inputs, wantIn)
	}
	// Exactly one First row per distinct input, and it is the earliest.
	seen := map[int32]bool{}
	for i, r := range b.rows {
		if r.Index < 0 {
			if r.First {
				t.Errorf("row %d: invalid row flagged First", i)
			}
			continue
		}
		if r.First == seen[r.Index] {
			t.Errorf("row %d: First=%v for input %d already seen=%v", i, r.First, r.Index, seen[r.Index])
		}
		seen[r.Index] = true
	}
}

func TestBuilderKeepsFirstPayload(t *testing.T) {
	b := NewBuilder(testFamily, 0)
	b.AddValid("https://acme.example/about", "acme.example", "d:acme.example")
	b.AddValid("ACME.example", "acme.example", "d:ACME.example") // same key, payload ignored
	if b.Distinct() != 1 || b.inputs[0].Payload != "d:acme.example" || b.inputs[0].Rows != 2 {
		t.Fatalf("inputs %+v", b.inputs)
	}
}

func TestBuilderOnlyInvalid(t *testing.T) {
	b := slugs("!a", "!b")
	if b.Rows() != 2 || b.Invalid() != 2 || b.Distinct() != 0 {
		t.Fatalf("rows %d invalid %d distinct %d", b.Rows(), b.Invalid(), b.Distinct())
	}
	for _, r := range b.rows {
		if r.Index != -1 || r.First {
			t.Errorf("invalid row %+v", r)
		}
	}
}

// With DropDuplicates the row map holds one row per distinct input (bulk
// lookup counts and returns unique rows), so each input is pointed at by
// exactly one row: its multiplicity must be 1, or rows_processed would
// overshoot total_rows once the job is answered.
func TestBuilderDropDuplicates(t *testing.T) {
	b := slugs()
	b.DropDuplicates = true
	for _, v := range []string{"Acme", "beta", "acme", "!bad", "ACME ", "gamma", "beta"} {
		addSlug(b, v)
	}
	if b.Rows() != 4 || b.Invalid() != 1 || b.Distinct() != 3 {
		t.Fatalf("rows %d invalid %d distinct %d, want 4 1 3", b.Rows(), b.Invalid(), b.Distinct())
	}
	want := []Row{
		{Echo: "Acme", Index: 0, First: true},
		{Echo: "beta", Index: 1, First: true},
		{Echo: "!bad", Index: -1, Reason: "bad"},
		{Echo: "gamma", Index: 2, First: true},
	}
	if !reflect.DeepEqual(b.rows, want) {
		t.Errorf("rows\n got %+v\nwant %+v", b.rows, want)
	}
	var pointed int64
	for _, in := range b.inputs {
		if in.Rows != 1 {
			t.Errorf("input %q has multiplicity %d with duplicates dropped, want 1", in.Payload, in.Rows)
		}
		pointed += in.Rows
	}
	if pointed+b.Invalid() != int64(b.Rows()) {
		t.Errorf("rows pointing at inputs %d + invalid %d != rows %d", pointed, b.Invalid(), b.Rows())
	}
}

// The same, end to end: a DropDuplicates job answered in full has exactly
// total_rows rows processed.
func TestDropDuplicatesJobCountsUniqueRows(t *testing.T) {
	e := newEnv(t)
	b := NewBuilder(testFamily, 0)
	b.DropDuplicates = true
	for i := 0; i < 30; i++ {
		addSlug(b, fmt.Sprintf("co-%d", i%12))
	}
	addSlug(b, "!bad")
	j := e.submit(b)
	if j.TotalRows != 13 || j.Distinct != 12 || j.TotalInvalid != 1 {
		t.Fatalf("total %d distinct %d invalid %d", j.TotalRows, j.Distinct, j.TotalInvalid)
	}
	p := e.processor("w1", newMapAnswerer(map[string]string{"co-1": "Co One"}))
	for s := 0; s < j.Shards; s++ {
		if err := p.ProcessShard(e.ctx, j.ID, s); err != nil {
			t.Fatal(err)
		}
	}
	expectCounts(t, e.get(j.ID), b, func(i int) string {
		if i == 1 {
			return OutcomeFound
		}
		return OutcomeNotFound
	})
}

func TestBuilderChunks(t *testing.T) {
	b := NewBuilder(testFamily, 0)
	for i := 0; i < 2*RowChunk+201; i++ {
		if i%50 == 7 {
			addSlug(b, fmt.Sprintf("!bad %d", i))
		} else {
			addSlug(b, fmt.Sprintf("co-%d", i%333))
		}
	}
	chunks, err := b.rowChunks()
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) != 3 {
		t.Fatalf("%d row chunks, want 3", len(chunks))
	}
	var all []Row
	for c, blob := range chunks {
		rows, err := decodeRows(blob)
		if err != nil {
			t.Fatal(err)
		}
		if want := min(RowChunk, b.Rows()-c*RowChunk); len(rows) != want {
			t.Errorf("chunk %d holds %d rows, want %d", c, len(rows), want)
		}
		all = append(all, rows...)
	}
	if !reflect.DeepEqual(all, b.rows) {
		t.Error("row chunks do not decode to the row map")
	}

	shards, err := b.shardChunks(100)
	if err != nil {
		t.Fatal(err)
	}
	if want := (b.Distinct() + 99) / 100; len(shards) != want {
		t.Fatalf("%d shards, want %d", len(shards), want)
	}
	var ins []Input
	for _, blob := range shards {
		var in []Input
		if err := json.Unmarshal(blob, &in); err != nil {
			t.Fatal(err)
		}
		ins = append(ins, in...)
	}
	if !reflect.DeepEqual(ins, b.inputs) {
		t.Error("shards do not decode to the distinct inputs in order")
	}
}

// Submit's shard count and charge follow the builder.
func TestSubmitShape(t *testing.T) {
	e := newEnv(t)
	b := slugs()
	for i := 0; i < 45; i++ {
		addSlug(b, fmt.Sprintf("Co-%d", i%23))
	}
	addSlug(b, "!x")
	before := time.Now().Add(-time.Second)
	j := e.submit(b)
	if j.TotalRows != 46 || j.TotalInvalid != 1 || j.Distinct != 23 || j.Shards != 3 || j.ShardSize != 10 {
		t.Fatalf("job %+v", j)
	}
	if j.Charge != 23*1000 {
		t.Errorf("charge %v, want 23 credits", j.Charge)
	}
	got := e.get(j.ID)
	if got.Status != StatusRunning || got.RowsProcessed != 1 || got.DistinctProcessed != 0 || !got.CompletedAt.IsZero() {
		t.Errorf("stored job %+v", got)
	}
	if got.CreatedAt.Before(before) || got.ExpiresAt.Sub(got.CreatedAt) != e.eng.Retention {
		t.Errorf("created %v expires %v", got.CreatedAt, got.ExpiresAt)
	}
	if !e.active(j.ID) {
		t.Error("running job not in the active set")
	}
	if n, _ := e.rdb.ZCard(e.ctx, pendingKey).Result(); n != 0 {
		t.Errorf("%d pending submission marks after commit", n)
	}
	if len(e.exec.enqueued) != 1 || e.exec.enqueued[0] != j.ID {
		t.Errorf("enqueued %v", e.exec.enqueued)
	}
	bal, _ := e.bl.Balance(e.ctx, e.p.Account.ID)
	if bal != e.balance-j.Charge {
		t.Errorf("balance %v, want %v", bal, e.balance-j.Charge)
	}
}

// GroupInputs puts inputs of one group next to each other and keeps every
// row pointing at its own input, in submission order.
func TestGroupInputs(t *testing.T) {
	b := NewBuilder("x", 0)
	for _, v := range []string{"a@x", "b@y", "c@x", "a@x", "d@z", "e@y", "!bad"} {
		if r, ok := strings.CutPrefix(v, "!"); ok {
			b.AddInvalid(v, r)
			continue
		}
		b.AddValid(v, v, v)
	}
	b.GroupInputs(func(p string) string { _, d, _ := strings.Cut(p, "@"); return d })
	var got []string
	for _, in := range b.inputs {
		got = append(got, in.Payload)
	}
	if strings.Join(got, ",") != "a@x,c@x,b@y,e@y,d@z" {
		t.Fatalf("inputs %v", got)
	}
	for _, r := range b.rows {
		if r.Index >= 0 && b.inputs[r.Index].Payload != r.Echo {
			t.Errorf("row %q points at %q", r.Echo, b.inputs[r.Index].Payload)
		}
	}
	if b.inputs[0].Rows != 2 || !b.rows[0].First || b.rows[3].First {
		t.Errorf("repeat counts/first flags lost: %+v %+v", b.inputs[0], b.rows)
	}
	b.AddValid("c@x", "c@x", "c@x") // the index still finds moved inputs
	if b.rows[len(b.rows)-1].Index != 1 || b.inputs[1].Rows != 2 {
		t.Errorf("index after grouping: %+v", b.rows[len(b.rows)-1])
	}
}
