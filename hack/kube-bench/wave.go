package main

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/jobs"
)

// mainWave submits --bulkjobs BulkJobs from --accounts accounts, waits for
// them all to complete, and fills in the wave's figures.
func (b *bench) mainWave(ctx context.Context, res *result) error {
	o := b.o
	principals, err := b.makeAccounts(ctx, o.accounts)
	if err != nil {
		return err
	}
	before, err := b.scrape(ctx)
	if err != nil {
		return err
	}
	b.step("main wave: %d BulkJobs from %d accounts", o.bulkJobs, o.accounts)
	rng := rand.New(rand.NewSource(27))
	var wave []submission
	for i := 0; i < o.bulkJobs; i++ {
		shards := []int{1, 1, 1, 1, 2, 2, 2, 4, 4, 8}[rng.Intn(10)]
		wave = append(wave, submission{p: principals[rng.Intn(len(principals))], shards: shards})
		res.Pods += shards
	}
	t0, cpu0 := time.Now(), cpuByCommand()
	if o.apiserverProfile > 0 {
		defer b.profileAPIServer(ctx, o.apiserverProfile)()
	}
	ids, err := b.submitAll(ctx, wave)
	if err != nil {
		return err
	}
	res.CreateSeconds = time.Since(t0).Seconds()
	res.CreatedPerSecond = float64(len(ids)) / res.CreateSeconds
	b.step("created %d BulkJobs in %.1fs; waiting for them to complete", len(ids), res.CreateSeconds)
	if err := b.waitDone(ctx, ids); err != nil {
		return err
	}
	res.WaveSeconds = time.Since(t0).Seconds()
	res.PodsPerSecond = float64(b.podsDone.Load()) / res.WaveSeconds
	b.admissionFigures(ids, res)
	after, err := b.scrape(ctx)
	if err != nil {
		return err
	}
	d := after.minus(before)
	res.ReconcileP50, res.ReconcileP99, res.Reconciles = d.quantiles("controller_runtime_reconcile_time_seconds", "controller", "bulkjob")
	res.AdmissionPassP50, res.AdmissionPassP99, res.AdmissionPasses = d.quantiles("controller_runtime_reconcile_time_seconds", "controller", "admission")
	_, res.QueueWaitP99, _ = d.quantiles("workqueue_queue_duration_seconds", "name", "bulkjob")
	res.QueueWaitsOver1s = d.shareAbove("workqueue_queue_duration_seconds", "name", "bulkjob", 1)
	res.QueueWaitsOver10s = d.shareAbove("workqueue_queue_duration_seconds", "name", "bulkjob", 10)
	_, res.AdmissionQueueWaitP99, _ = d.quantiles("workqueue_queue_duration_seconds", "name", "admission")
	res.APIRequestsByVerb = d.counterBy("rest_client_requests_total", "method")
	res.CPUByCommand = cpuSpent(cpu0, cpuByCommand())
	for _, v := range res.APIRequestsByVerb {
		res.APIRequests += v
	}
	res.APIRequestsPerBulkJob = res.APIRequests / float64(len(ids))
	if res.PeakPods > 0 && res.RSSBytesAtPeakPods > res.RSSBytesIdle {
		res.RSSBytesPerPod = float64(res.RSSBytesAtPeakPods-res.RSSBytesIdle) / float64(res.PeakPods)
	}
	if n := b.shardErrs.Load(); n > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d shard answers failed in the stub processor", n))
	}
	return nil
}

// burst submits one account's --burst BulkJobs of 8 shards, then another
// account's one of 1 shard, and measures when that one is admitted.
func (b *bench) burst(ctx context.Context, res *result) error {
	b.step("burst: one account's %d BulkJobs, then another account's one", b.o.burst)
	two, err := b.makeAccounts(ctx, 2)
	if err != nil {
		return err
	}
	before, err := b.scrape(ctx)
	if err != nil {
		return err
	}
	var burst []submission
	for i := 0; i < b.o.burst; i++ {
		burst = append(burst, submission{p: two[0], shards: 8})
	}
	t1 := time.Now()
	bids, err := b.submitAll(ctx, burst)
	if err != nil {
		return err
	}
	sid, err := b.submitAll(ctx, []submission{{p: two[1], shards: 1}})
	if err != nil {
		return err
	}
	if err := b.waitAdmitted(ctx, sid[0], 2*time.Minute); err != nil {
		return err
	}
	b.mu.Lock()
	res.SmallJobAdmitSeconds = b.admitted[sid[0]].Sub(b.created[sid[0]]).Seconds()
	res.SmallJobJobSeconds = b.jobSeen[sid[0]].Sub(b.created[sid[0]]).Seconds()
	b.mu.Unlock()
	b.step("small job admitted %.2fs after it was created; waiting for the burst to complete", res.SmallJobAdmitSeconds)
	if err := b.waitDone(ctx, append(bids, sid...)); err != nil {
		return err
	}
	b.mu.Lock()
	var last time.Time
	for _, id := range bids {
		if a := b.admitted[id]; a.After(last) {
			last = a
		}
	}
	b.mu.Unlock()
	res.BurstBulkJobs = len(bids)
	res.BurstLastAdmitSeconds = last.Sub(t1).Seconds()
	after, err := b.scrape(ctx)
	if err != nil {
		return err
	}
	var n float64
	for _, v := range after.minus(before).counterBy("rest_client_requests_total", "method") {
		n += v
	}
	res.BurstAPIRequestsPerBulkJob = n / float64(len(bids)+1)
	return nil
}

// shardRows is the rows of one shard: small, since the rows are not what
// is measured.
const shardRows = 5

type submission struct {
	p      *accounts.Principal
	shards int
}

// instant answers every input at once.
type instant struct{}

func (instant) Answer(_ context.Context, payloads []string) ([]jobs.Answer, error) {
	out := make([]jobs.Answer, len(payloads))
	for i := range out {
		out[i] = jobs.Answer{Outcome: jobs.OutcomeFound, Data: []byte(`{}`)}
	}
	return out, nil
}

func (instant) ErrorAnswer() jobs.Answer {
	return jobs.Answer{Outcome: jobs.OutcomeError, Data: []byte(`{}`)}
}

// makeAccounts makes n accounts with a key each: a third pay-as-you-go, a
// third on the starter plan, a third on professional.
func (b *bench) makeAccounts(ctx context.Context, n int) ([]*accounts.Principal, error) {
	var out []*accounts.Principal
	until := time.Now().UTC().AddDate(0, 1, 0).Truncate(time.Second)
	for i := 0; i < n; i++ {
		a, err := b.accts.CreateAccount(ctx, fmt.Sprintf("bench-%d", i), credits.Whole(1_000_000))
		if err != nil {
			return nil, err
		}
		typ := accounts.PayAsYouGo
		switch i % 3 {
		case 1:
			err = b.accts.SetPlan(ctx, a.ID, accounts.PlanStarter, accounts.StateActive, until)
		case 2:
			err = b.accts.SetPlan(ctx, a.ID, accounts.PlanProfessional, accounts.StateActive, until)
		}
		if err != nil {
			return nil, err
		}
		key, _, err := b.accts.CreateKey(ctx, a.ID, typ)
		if err != nil {
			return nil, err
		}
		p, err := b.accts.Authenticate(ctx, key)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// submitAll submits through the engine, o.submitters at a time, and
// returns the job ids in order.
func (b *bench) submitAll(ctx context.Context, subs []submission) ([]string, error) {
	ids := make([]string, len(subs))
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for range min(b.o.submitters, len(subs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < len(subs) && ctx.Err() == nil; i = int(next.Add(1)) - 1 {
				s := subs[i]
				n := s.shards * shardRows
				bld := jobs.NewBuilder("company_enrichment", n)
				for k := 0; k < n; k++ {
					v := fmt.Sprintf("bench-%d-%d-%d", time.Now().UnixNano(), i, k)
					bld.AddValid(v, v, v)
				}
				j, err := b.engine.Submit(ctx, s.p, bld, jobs.Metering{Price: credits.Whole(1)})
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				b.mu.Lock()
				b.created[j.ID] = time.Now()
				b.mu.Unlock()
				ids[i] = j.ID
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return nil, fmt.Errorf("submit: %w", err)
	}
	return ids, ctx.Err()
}
