package jobs

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/credits"
)

// greyAnswerer answers "grey-*" inputs provisionally (as a greylisting mail
// server makes a verifier do) until attempt okAt, then found; "never-*"
// inputs stay provisional until attempt lastAt, where they become a final
// "unknown"; everything else is found at once.
type greyAnswerer struct {
	*mapAnswerer
	okAt, lastAt int
	delay        time.Duration

	mu       sync.Mutex
	attempts map[string][]int
}

func (g *greyAnswerer) answer(p string, attempt int) Answer {
	switch {
	case strings.HasPrefix(p, "grey-") && attempt < g.okAt, strings.HasPrefix(p, "never-") && attempt < g.lastAt:
		return Answer{Outcome: "unknown", Data: []byte(`{"reason":"greylisted"}`), RetryAt: time.Now().Add(g.delay)}
	case strings.HasPrefix(p, "never-"):
		return Answer{Outcome: "unknown", Data: []byte(`{"reason":"gave up"}`)}
	}
	return Answer{Outcome: OutcomeFound, Data: []byte(`{"reason":"ok"}`)}
}

func (g *greyAnswerer) Answer(ctx context.Context, payloads []string) ([]Answer, error) {
	return g.Retry(ctx, payloads, make([]int, len(payloads)))
}

func (g *greyAnswerer) Retry(_ context.Context, payloads []string, attempts []int) ([]Answer, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]Answer, len(payloads))
	for i, p := range payloads {
		a := max(attempts[i], 1)
		g.attempts[p] = append(g.attempts[p], a)
		out[i] = g.answer(p, a)
	}
	return out, nil
}

func newGrey(okAt, lastAt int, delay time.Duration) *greyAnswerer {
	return &greyAnswerer{mapAnswerer: newMapAnswerer(nil), okAt: okAt, lastAt: lastAt, delay: delay, attempts: map[string][]int{}}
}

// A job with provisional answers shows every row answered and is
// "retrying" until the last provisional answer is replaced; retries run
// when due without holding a worker (one worker also finishes a second
// job meanwhile); each retry is one attempt more; the outcome counts follow
// the replaced answers; nothing is left in the retrying set.
func TestProvisionalAnswersAreRetried(t *testing.T) {
	e := newEnv(t)
	g := newGrey(3, 4, 150*time.Millisecond)
	l := e.local("w1", g, 1)
	l.RetryEvery = 20 * time.Millisecond
	start(t, l)
	b := slugs("grey-a", "ok-1", "never-b", "GREY-A", "ok-2", "!bad")
	j := e.submit(b)
	if err := l.Enqueue(e.ctx, j); err != nil {
		t.Fatal(err)
	}
	// First pass: everything has an answer, two of them provisional.
	var seen *Job
	deadline := time.Now().Add(5 * time.Second)
	for seen == nil || seen.Status == StatusRunning {
		if time.Now().After(deadline) {
			t.Fatalf("no first pass: %+v", seen)
		}
		time.Sleep(5 * time.Millisecond)
		seen = e.get(j.ID)
	}
	if seen.Status != StatusRetrying || seen.RowsProcessed != seen.TotalRows || seen.Retrying != 2 || seen.NextRetryAt.IsZero() {
		t.Fatalf("after the first pass: status %s, rows %d/%d, retrying %d, next %v", seen.Status, seen.RowsProcessed, seen.TotalRows, seen.Retrying, seen.NextRetryAt)
	}
	if seen.Outcomes["unknown"] != 3 || seen.Outcomes[OutcomeFound] != 2 { // grey-a has two rows
		t.Fatalf("outcomes while retrying %v", seen.Outcomes)
	}
	// Another job meanwhile: the one worker is free for it.
	j2 := e.submit(slugs("ok-9"))
	if err := l.Enqueue(e.ctx, j2); err != nil {
		t.Fatal(err)
	}
	if g2 := e.waitJob(j2.ID, time.Second); g2.Outcomes[OutcomeFound] != 1 {
		t.Fatalf("second job %v", g2.Outcomes)
	}
	done := e.waitJob(j.ID, 5*time.Second)
	if done.Retrying != 0 || done.Outcomes[OutcomeFound] != 4 || done.Outcomes["unknown"] != 1 || done.RowsProcessed != done.TotalRows {
		t.Fatalf("completed job: retrying %d, outcomes %v, rows %d/%d", done.Retrying, done.Outcomes, done.RowsProcessed, done.TotalRows)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for p, want := range map[string][]int{"grey-a": {1, 2, 3}, "never-b": {1, 2, 3, 4}, "ok-1": {1}, "ok-2": {1}} {
		if got := g.attempts[p]; len(got) != len(want) || got[len(got)-1] != want[len(want)-1] {
			t.Errorf("%s: attempts %v, want %v", p, got, want)
		}
	}
	ans := e.answers(j.ID)
	if a := ans[2]; a.Outcome != "unknown" || string(a.Data) != `{"reason":"gave up"}` {
		t.Errorf("never-b's final answer %s %s", a.Outcome, a.Data)
	}
	if n, _ := e.rdb.ZCard(e.ctx, retryingKey).Result(); n != 0 {
		t.Errorf("%d jobs left in the retrying set", n)
	}
}

// A retry answer replaces only a provisional answer: a final answer stays,
// and a claimed retry is not taken by a second runner at the same time.
func TestRetryReplacesOnlyProvisional(t *testing.T) {
	e := newEnv(t)
	g := newGrey(2, 2, 0) // due at once
	p := e.processor("w1", g)
	j := e.submit(slugs("grey-a", "ok-1"))
	processAll(t, p, j)
	if got := e.get(j.ID); got.Status != StatusRetrying || got.Retrying != 1 {
		t.Fatalf("status %s, retrying %d", got.Status, got.Retrying)
	}
	// A late first-pass answer (a crashed runner's leftover) for the
	// provisional input changes nothing; a retry answer for the final one
	// neither.
	if n, err := e.st.Record(e.ctx, j, time.Now(), []Recorded{{Index: 0, Rows: 1, Outcome: "x", Data: []byte(`{}`)}}); err != nil || n != 0 {
		t.Fatalf("record over a provisional answer: %d %v", n, err)
	}
	if n, err := e.st.Replace(e.ctx, j, time.Now(), []Recorded{{Index: 1, Rows: 1, Outcome: "x", Data: []byte(`{}`)}}); err != nil || n != 0 {
		t.Fatalf("replace a final answer: %d %v", n, err)
	}
	// Two runners at once: the retry is answered once.
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := p.RetryDue(e.ctx, j.ID); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	got := e.get(j.ID)
	if got.Status != StatusCompleted || got.Outcomes[OutcomeFound] != 2 || got.Outcomes["unknown"] != 0 {
		t.Fatalf("after the retry: %s %v", got.Status, got.Outcomes)
	}
	if a := g.attempts["grey-a"]; len(a) != 2 {
		t.Errorf("grey-a answered %v times", a)
	}
}

// An uncharged outcome is refunded with the completion, once: the ledger
// shows the charge and one refund of price x rows with that outcome.
func TestRefundOutcomeAtCompletion(t *testing.T) {
	e := newEnv(t)
	g := newGrey(2, 2, 0)
	p := e.processor("w1", g)
	b := slugs("never-a", "never-b", "ok-1")
	b.DropDuplicates = true
	price := credits.Amount(200)
	j, err := e.eng.Submit(e.ctx, e.p, b, Metering{Price: price, RefundOutcome: "unknown"})
	if err != nil {
		t.Fatal(err)
	}
	processAll(t, p, j)
	if got := e.get(j.ID); got.Refunded != 0 || got.Status != StatusRetrying {
		t.Fatalf("refunded %v before completion (%s)", got.Refunded, got.Status)
	}
	for range 2 { // the second run finds nothing due and refunds nothing more
		if _, err := p.RetryDue(e.ctx, j.ID); err != nil {
			t.Fatal(err)
		}
	}
	got := e.get(j.ID)
	if got.Status != StatusCompleted || got.Refunded != 2*price || got.Outcomes["unknown"] != 2 {
		t.Fatalf("status %s refunded %v outcomes %v", got.Status, got.Refunded, got.Outcomes)
	}
	bal, err := e.bl.Balance(e.ctx, e.p.Account.ID)
	if err != nil || bal != e.balance-3*price+2*price {
		t.Fatalf("balance %v, want %v", bal, e.balance-price)
	}
	entries, err := e.bl.Entries(e.ctx, e.p.Account.ID, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	kinds := ""
	for _, en := range entries {
		kinds += en.Kind + " "
	}
	if !strings.Contains(kinds, "charge refund") || strings.Count(kinds, "refund") != 1 {
		t.Fatalf("ledger kinds %q", kinds)
	}
}
