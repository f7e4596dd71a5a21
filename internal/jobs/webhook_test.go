package jobs

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A job submitted with a webhook_url keeps it, joins the set of jobs that
// may owe an event, and gets its retrying mark in the same step as its
// first retrying status (once, whatever follows); a job without one has
// neither. The sweeper's note on a deleted job does not bring its hash
// back.
func TestWebhookStateOfJobs(t *testing.T) {
	e := newEnv(t)
	b := slugs("a", "b")
	b.WebhookURL = "https://hooks.example.com/h"
	j := e.submit(b)
	plain := e.submit(slugs("c"))
	if ids, err := e.st.WebhookJobs(e.ctx, 0, 10); err != nil || len(ids) != 1 || ids[0] != j.ID {
		t.Fatalf("watched jobs %v %v", ids, err)
	}
	js, err := e.st.GetMany(e.ctx, []string{j.ID, plain.ID, "00000000-0000-0000-0000-000000000000"})
	if err != nil || js[0].WebhookURL != b.WebhookURL || js[1].WebhookURL != "" || js[2] != nil {
		t.Fatalf("GetMany: %+v %v", js, err)
	}
	due := time.Now().Add(time.Minute)
	write := func(j *Job, mode string, rs ...Recorded) {
		t.Helper()
		if _, err := e.st.writeAnswers(e.ctx, j, time.Now(), mode, rs); err != nil {
			t.Fatal(err)
		}
	}
	write(j, "new", Recorded{Index: 0, Rows: 1, Outcome: "unknown", Data: []byte(`{}`), RetryAt: due},
		Recorded{Index: 1, Rows: 1, Outcome: OutcomeFound, Data: []byte(`{}`)})
	write(plain, "new", Recorded{Index: 0, Rows: 1, Outcome: "unknown", Data: []byte(`{}`), RetryAt: due})
	got := e.get(j.ID)
	if got.Status != StatusRetrying || got.WebhookRetryingAt.IsZero() || got.WebhookRetryingSent {
		t.Fatalf("retrying job: %s %v %v", got.Status, got.WebhookRetryingAt, got.WebhookRetryingSent)
	}
	if p := e.get(plain.ID); p.Status != StatusRetrying || !p.WebhookRetryingAt.IsZero() {
		t.Fatalf("a job without webhook marked: %+v", p)
	}
	first := got.WebhookRetryingAt
	time.Sleep(5 * time.Millisecond)
	write(j, "replace", Recorded{Index: 0, Rows: 1, Outcome: "unknown", Data: []byte(`{}`), RetryAt: due.Add(time.Minute)})
	if again := e.get(j.ID); !again.WebhookRetryingAt.Equal(first) {
		t.Fatalf("retrying mark moved: %v -> %v", first, again.WebhookRetryingAt)
	}
	if sts, err := e.st.WebhookStates(e.ctx, []string{j.ID}); err != nil || !sts[0].Owes() || sts[0].RetryingAt != first {
		t.Fatalf("WebhookStates before the mark: %+v %v", sts, err)
	}
	if err := e.st.MarkWebhookRetryingSent(e.ctx, j.ID); err != nil || !e.get(j.ID).WebhookRetryingSent {
		t.Fatalf("mark sent: %v", err)
	}
	// The sweeper's cheap read says what the whole job says: the retrying
	// event owed until it is marked sent.
	sts, err := e.st.WebhookStates(e.ctx, []string{j.ID, plain.ID, "00000000-0000-0000-0000-000000000000"})
	if err != nil || len(sts) != 3 ||
		sts[0] != (WebhookState{Exists: true, URL: b.WebhookURL, RetryingAt: first, Sent: true}) || sts[0].Owes() ||
		sts[1] != (WebhookState{Exists: true}) || sts[1].Owes() || sts[2] != (WebhookState{}) {
		t.Fatalf("WebhookStates: %+v %v", sts, err)
	}
	if err := e.st.Delete(e.ctx, plain.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.st.MarkWebhookRetryingSent(e.ctx, plain.ID); err != nil {
		t.Fatal(err)
	}
	if n := e.rdb.Exists(e.ctx, metaKey(plain.ID)).Val(); n != 0 {
		t.Fatal("marking a deleted job brought its hash back")
	}
	if err := e.st.UnwatchWebhook(e.ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.ZScore(e.ctx, webhookJobsKey, j.ID).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("still watched: %v", err)
	}
}
