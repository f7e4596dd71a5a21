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

type nopExecutor struct{}

func (nopExecutor) Enqueue(context.Context, *jobs.Job) error { return nil }
func (nopExecutor) Cancel(context.Context, string) error     { return nil }

// The sweeper and the deliverer on the Redis the engine's tests use (a
// 3-master Cluster with BULKD_TEST_REDIS=cluster): a running job owes
// nothing; once its last answer is recorded it owes its completion event,
// which is enqueued once however often the jobs are swept, and delivered.
func TestSweepCompletedJob(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx := context.Background()
	p := accountstest.PayAsYouGo(t, rdb, nil, "t", credits.Whole(10))
	bl := billing.New(rdb, nil)
	eng := jobs.NewEngine(jobs.NewStore(rdb, bl), bl, nopExecutor{}, quietLog())
	rec := newReceiver(t, func(int) int { return 200 })
	b := jobs.NewBuilder(enrich.Family, 2)
	b.AddValid("acme.example", "d:acme.example", "d:acme.example")
	b.AddValid("acme.example", "d:acme.example", "d:acme.example")
	b.WebhookURL = rec.URL + "/h"
	j, err := eng.Submit(ctx, p, b, jobs.Metering{Price: credits.Whole(1)})
	if err != nil {
		t.Fatal(err)
	}
	fam := enrich.NewFamily(normalize.New(nil), &enrich.Answerer{})
	sw := &Sweeper{Store: eng.Store, Queue: NewQueue(rdb), Events: &Events{Mounts: []Mount{{Family: fam, Path: "/v1/company-enrichment/bulk"}}},
		MaxAge: time.Minute, Now: time.Now, Log: quietLog()}
	if n, err := sw.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("sweep of a running job: %d %v", n, err)
	}
	if _, err := eng.Store.Record(ctx, j, time.Now(), []jobs.Recorded{{Index: 0, Rows: 2, Outcome: jobs.OutcomeFound, Data: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{1, 0} {
		if n, err := sw.Sweep(ctx); err != nil || n != want {
			t.Fatalf("sweep %d: %d %v, want %d", i+1, n, err, want)
		}
	}
	d := newTestDeliverer(rdb, &Policy{AllowLoopback: true}, fastOptions(), nil)
	if n, err := d.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("deliver: %d %v", n, err)
	}
	got := rec.requests()
	if len(got) != 1 {
		t.Fatalf("%d requests", len(got))
	}
	var ev Event
	if err := json.Unmarshal(got[0].Body, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.EventID != EventID(j.ID, TypeCompleted) || ev.Status != "completed" || ev.Counts["total_found"] != 2 ||
		ev.Links.Results != "/v1/company-enrichment/bulk/"+j.ID+"/results" || ev.Links.StatusURL != "" {
		t.Fatalf("event %s", got[0].Body)
	}
	if ids, _ := eng.Store.WebhookJobs(ctx, 0, 10); len(ids) != 0 {
		t.Fatalf("still watched: %v", ids)
	}
}
