package jobs

import (
	"context"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/credits"
)

// heldStreamer answers like its mapAnswerer, one input at a time (Streamer),
// except that the answer of hold waits for release: a slow mail server's
// address among fast ones.
type heldStreamer struct {
	*mapAnswerer
	hold    string
	release chan struct{}
}

func (h *heldStreamer) AnswerEach(ctx context.Context, payloads []string, attempts []int, emit func(int, Answer)) error {
	held := -1
	for i, p := range payloads {
		if p == h.hold {
			held = i
			continue
		}
		a, err := h.Answer(ctx, []string{p})
		if err != nil {
			return err
		}
		emit(i, a[0])
	}
	if held < 0 {
		return nil
	}
	select {
	case <-h.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	a, err := h.Answer(ctx, []string{h.hold})
	if err != nil {
		return err
	}
	emit(held, a[0])
	return nil
}

// One slow input holds back only itself: the others' rows are answered and
// counted while it is still being asked, and the job completes, charged
// once per input, when it is answered.
func TestStreamedAnswersAreRecordedAsTheyCome(t *testing.T) {
	e := newEnv(t)
	j := e.submit(slugs("acme", "globex", "slow", "initech", "umbrella", "ACME"))
	st := &heldStreamer{mapAnswerer: newMapAnswerer(map[string]string{"acme": "Acme", "slow": "Slow Inc"}),
		hold: "slow", release: make(chan struct{})}
	p := e.processor("w1", st)
	p.BatchSizes = map[string]int{testFamily: 100} // the whole shard in one call, as the verification family
	done := make(chan error, 1)
	go func() { done <- p.ProcessShard(e.ctx, j.ID, 0) }()

	deadline := time.Now().Add(10 * time.Second)
	for e.get(j.ID).RowsProcessed < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("rows processed %d after 10 s while one input is held, want 5 (acme twice, globex, initech, umbrella)", e.get(j.ID).RowsProcessed)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := e.get(j.ID); got.RowsProcessed != 5 || got.Status == StatusCompleted || len(e.answers(j.ID)) != 4 {
		t.Fatalf("while held: processed %d, status %s, %d answers; want 5, not completed, 4", got.RowsProcessed, got.Status, len(e.answers(j.ID)))
	}
	close(st.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := e.get(j.ID)
	if got.Status != StatusCompleted || got.RowsProcessed != 6 || len(e.answers(j.ID)) != 5 {
		t.Fatalf("after release: status %s, processed %d, %d answers; want completed, 6, 5", got.Status, got.RowsProcessed, len(e.answers(j.ID)))
	}
	if a := e.answers(j.ID); a[2].Outcome != OutcomeFound {
		t.Errorf("the held input's answer %+v, want found", a[2])
	}
	for _, s := range []string{"acme", "globex", "slow", "initech", "umbrella"} {
		if n := st.callsOf(s); n != 1 {
			t.Errorf("%s answered %d times, want once", s, n)
		}
	}
	if bal, _ := e.bl.Balance(e.ctx, e.p.Account.ID); bal != e.balance-credits.Whole(5) {
		t.Errorf("balance %v, want %v (one credit per distinct input, once)", bal, e.balance-credits.Whole(5))
	}
}

// streamGrey answers as greyAnswerer does, one input at a time, holding the
// retry of hold until release.
type streamGrey struct {
	*greyAnswerer
	hold    string
	release chan struct{}
}

func (s *streamGrey) AnswerEach(ctx context.Context, payloads []string, attempts []int, emit func(int, Answer)) error {
	if attempts == nil {
		attempts = make([]int, len(payloads))
	}
	held := -1
	for i, p := range payloads {
		if p == s.hold && attempts[i] > 1 {
			held = i
			continue
		}
		a, _ := s.Retry(ctx, []string{p}, []int{attempts[i]})
		emit(i, a[0])
	}
	if held < 0 {
		return nil
	}
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	a, _ := s.Retry(ctx, []string{s.hold}, []int{attempts[held]})
	emit(held, a[0])
	return nil
}

// Retries are recorded as they come too: a held retry holds back only its
// own input's final answer.
func TestStreamedRetriesAreReplacedAsTheyCome(t *testing.T) {
	e := newEnv(t)
	s := &streamGrey{greyAnswerer: newGrey(2, 3, 0), hold: "grey-slow", release: make(chan struct{})}
	p := e.processor("w1", s)
	p.BatchSizes = map[string]int{testFamily: 100}
	j := e.submit(slugs("grey-a", "grey-slow", "ok-1"))
	if err := p.ProcessShard(e.ctx, j.ID, 0); err != nil {
		t.Fatal(err)
	}
	if got := e.get(j.ID); got.Status != StatusRetrying || got.Retrying != 2 {
		t.Fatalf("after the first pass: status %s, %d retrying; want retrying, 2", got.Status, got.Retrying)
	}
	done := make(chan error, 1)
	go func() { _, err := p.RetryDue(e.ctx, j.ID); done <- err }()
	deadline := time.Now().Add(10 * time.Second)
	for e.get(j.ID).Retrying != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("grey-a's retry not recorded while grey-slow's is held: %d retrying", e.get(j.ID).Retrying)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if a := e.answers(j.ID); a[0].Outcome != OutcomeFound || a[1].Outcome != "unknown" {
		t.Fatalf("while held: grey-a %s, grey-slow %s; want found, unknown (provisional)", a[0].Outcome, a[1].Outcome)
	}
	close(s.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := e.get(j.ID)
	if got.Status != StatusCompleted || got.Retrying != 0 || e.answers(j.ID)[1].Outcome != OutcomeFound {
		t.Fatalf("after release: status %s, %d retrying, grey-slow %s; want completed, 0, found", got.Status, got.Retrying, e.answers(j.ID)[1].Outcome)
	}
	if bal, _ := e.bl.Balance(e.ctx, e.p.Account.ID); bal != e.balance-credits.Whole(3) {
		t.Errorf("balance %v, want %v", bal, e.balance-credits.Whole(3))
	}
}
