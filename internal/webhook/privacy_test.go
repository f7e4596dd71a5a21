package webhook

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/accounts/accountstest"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/company/normalize"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/enrich"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/testredis"
)

// A job kept 12 h is announced expiring at once (a day's notice is more
// than it has); deleted, its queued events go and job.deleted is sent,
// signed and delivered like the others, with the refund.
func TestExpiringAndDeletedEvents(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx := context.Background()
	p := accountstest.PayAsYouGo(t, rdb, nil, "t", credits.Whole(10))
	bl := billing.New(rdb, nil)
	eng := jobs.NewEngine(jobs.NewStore(rdb, bl), bl, nopExecutor{}, quietLog())
	eng.Retention = 12 * time.Hour
	rec := newReceiver(t, func(int) int { return 200 })
	b := jobs.NewBuilder(enrich.Family, 2)
	b.AddValid("acme.example", "d:acme.example", "d:acme.example")
	b.AddValid("beta.example", "d:beta.example", "d:beta.example")
	b.WebhookURL = rec.URL + "/h"
	j, err := eng.Submit(ctx, p, b, jobs.Metering{Price: credits.Whole(1)})
	if err != nil {
		t.Fatal(err)
	}
	fam := enrich.NewFamily(normalize.New(nil), &enrich.Answerer{})
	sw := &Sweeper{Store: eng.Store, Queue: NewQueue(rdb), Events: &Events{Mounts: []Mount{{Family: fam, Path: "/v1/company-enrichment/bulk"}}},
		MaxAge: time.Minute, Now: time.Now, Log: quietLog()}
	for i, want := range []int{1, 0} {
		if n, err := sw.Sweep(ctx); err != nil || n != want {
			t.Fatalf("sweep %d: %d %v, want %d", i+1, n, err, want)
		}
	}
	d := newTestDeliverer(rdb, &Policy{AllowLoopback: true}, fastOptions(), nil)
	if n, err := d.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("deliver: %d %v", n, err)
	}
	svc := &Service{Sweeper: sw, Deliverer: d, Log: quietLog()}
	eng.Deleted = svc.JobDeleted
	del, err := eng.Delete(ctx, p.Key.ID, enrich.Family, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if del.Refunded != credits.Whole(2) || del.Unprocessed != 2 {
		t.Fatalf("deletion %+v", del)
	}
	if n, err := d.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("deliver: %d %v", n, err)
	}
	got := rec.requests()
	if len(got) != 2 {
		t.Fatalf("%d requests", len(got))
	}
	var exp, gone Event
	if err := json.Unmarshal(got[0].Body, &exp); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(got[1].Body, &gone); err != nil {
		t.Fatal(err)
	}
	if exp.Type != TypeExpiring || exp.ExpiresAt == nil || !exp.ExpiresAt.Equal(j.ExpiresAt.Truncate(time.Millisecond)) {
		t.Fatalf("expiring event %s", got[0].Body)
	}
	if gone.Type != TypeDeleted || gone.Status != "deleted" || gone.CreditsRefunded == nil || *gone.CreditsRefunded != 2 ||
		gone.EventID != EventID(j.ID, TypeDeleted) || got[1].Header.Get("X-Bulkd-Signature") == "" {
		t.Fatalf("deleted event %s", got[1].Body)
	}
	if n, _ := rdb.Exists(ctx, evKey(EventID(j.ID, TypeExpiring))).Result(); n != 0 {
		t.Fatal("the expiring event's record outlived the job")
	}
}
