package soak

import (
	"context"
	"fmt"
	"math/rand"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/internal/testredis"
)

// Config is one soak run.
type Config struct {
	Bin string // bulkd binary; "" builds ./cmd/bulkd
	Dir string // replica logs (and the binary when built)

	Duration          time.Duration // the load phase
	Keys              int           // API keys, spread evenly over the accounts
	Accounts          int
	UnlimitedAccounts int // of Accounts: unlimited-plan accounts (unlimited keys, bulk lookups on the daily quota)
	RPS               int // requests per second per key: bulkd's --rate-limit too
	InFlight          int // requests one key has open at most

	SubmitEvery  time.Duration // mean time between one key's submissions (exponential)
	PollEvery    time.Duration // status polls of one running job
	PageLimit    int
	SubmitGiveUp time.Duration // a submission is abandoned after retrying this long
	Drain        time.Duration // the longest wait, after the load, for every accepted job to finish

	CompanyRows, VerifyRows, LookupRows [2]int // rows per submission, min and max
	Companies                           int    // generated company dataset
	VerifyDomains, PeopleDomains        int    // the mail world
	MailRTT                             time.Duration

	Workers     int           // bulkd --workers
	ShardSize   int           // bulkd --shard-size
	LeaseTTL    time.Duration // bulkd --lease-ttl (also its resume period)
	RetryDelays string        // bulkd --verify-retry-delays

	// Faults, as offsets into the load phase (0: none).
	ReplicaKillAt   time.Duration // kill -9 of replica r0, restarted after ReplicaDown
	ReplicaDown     time.Duration
	ProcessorKillAt time.Duration // kill -9 of the replica holding the most shard leases, down for ProcessorDown
	ProcessorDown   time.Duration // 0: 2 x LeaseTTL + 2 s, so the survivor has to take the shards over
	RedisRestartAt  time.Duration // SIGTERM of redis-server, started again on the same port and data after RedisDown
	RedisDown       time.Duration

	Logf func(format string, args ...any)
}

// ShortConfig is the version in `make test`: about 25 s of load, 20 keys,
// one fault of each kind.
func ShortConfig() Config {
	return Config{
		Duration: 24 * time.Second, Keys: 20, Accounts: 5, UnlimitedAccounts: 1, RPS: 20, InFlight: 4,
		SubmitEvery: 4 * time.Second, PollEvery: 500 * time.Millisecond, PageLimit: 100,
		SubmitGiveUp: 90 * time.Second, Drain: 2 * time.Minute,
		CompanyRows: [2]int{20, 250}, VerifyRows: [2]int{5, 30}, LookupRows: [2]int{3, 15},
		Companies: 5000, VerifyDomains: 60, PeopleDomains: 80, MailRTT: 2 * time.Millisecond,
		Workers: 4, ShardSize: 50, LeaseTTL: 2 * time.Second, RetryDelays: "3s,4s",
		ReplicaKillAt: 4 * time.Second, ReplicaDown: 2 * time.Second,
		ProcessorKillAt: 8 * time.Second,
		RedisRestartAt:  17 * time.Second, RedisDown: time.Second,
	}
}

// FullConfig is `make soak`: 200 keys over 50 accounts at 20 requests/s
// each for 5 minutes.
func FullConfig() Config {
	return Config{
		Duration: 5 * time.Minute, Keys: 200, Accounts: 50, UnlimitedAccounts: 10, RPS: 20, InFlight: 4,
		SubmitEvery: 20 * time.Second, PollEvery: time.Second, PageLimit: 100,
		SubmitGiveUp: 3 * time.Minute, Drain: 10 * time.Minute,
		CompanyRows: [2]int{20, 600}, VerifyRows: [2]int{10, 60}, LookupRows: [2]int{5, 30},
		Companies: 20000, VerifyDomains: 150, PeopleDomains: 300, MailRTT: 5 * time.Millisecond,
		Workers: 4, ShardSize: 100, LeaseTTL: 10 * time.Second, RetryDelays: "3s,5s",
		ReplicaKillAt: 60 * time.Second, ReplicaDown: 5 * time.Second,
		ProcessorKillAt: 130 * time.Second,
		RedisRestartAt:  220 * time.Second, RedisDown: 3 * time.Second,
	}
}

// runner is one run's shared state.
type runner struct {
	cfg       Config
	t0        time.Time
	reps      []*replica
	down      []atomic.Int64 // unix ns until which the balancer avoids a replica
	hc        *http.Client
	rdb       *redis.Client
	redis     *testredis.Durable
	companies *companyWorld
	mail      *mailWorld
	accounts  []*account
	keys      []*keyClient

	stopSubmit    atomic.Bool
	postsInFlight []atomic.Int32 // submissions in flight per replica
	jobsMu        sync.Mutex
	jobs          []*job

	eventsMu sync.Mutex
	events   []*faultEvent
}

func (r *runner) logf(format string, args ...any) {
	if r.cfg.Logf != nil {
		r.cfg.Logf("[%6.1fs] "+format, append([]any{time.Since(r.t0).Seconds()}, args...)...)
	}
}

func (r *runner) since() time.Duration { return time.Since(r.t0) }

// pick is the load balancer: the key's home replica unless it was found
// down a moment ago.
func (r *runner) pick(home int) int {
	now := time.Now().UnixNano()
	if r.down[home].Load() > now {
		other := 1 - home
		if r.down[other].Load() <= now {
			return other
		}
	}
	return home
}

func (r *runner) markDown(rep int) {
	r.down[rep].Store(time.Now().Add(500 * time.Millisecond).UnixNano())
}

func (r *runner) addJob(j *job) {
	r.jobsMu.Lock()
	r.jobs = append(r.jobs, j)
	r.jobsMu.Unlock()
}

// Run starts Redis (append-only file on), the worlds, two `bulkd serve`
// replicas, and the clients; injects the faults; waits for every accepted
// job; and checks everything. The Report says what was seen; Failures()
// lists what broke a promise.
func Run(tb testing.TB, cfg Config) (*Report, error) {
	if cfg.Dir == "" {
		cfg.Dir = tb.TempDir()
	}
	if cfg.ProcessorDown == 0 {
		cfg.ProcessorDown = 2*cfg.LeaseTTL + 2*time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &runner{cfg: cfg, t0: time.Now(), down: make([]atomic.Int64, 2), postsInFlight: make([]atomic.Int32, 2)}
	if cfg.Bin == "" {
		bin, err := buildBulkd(cfg.Dir)
		if err != nil {
			return nil, err
		}
		cfg.Bin, r.cfg.Bin = bin, bin
	}

	// Redis with its append-only file, as `make run` and the chart run it.
	r.redis = testredis.StartDurable(tb)
	r.rdb = redis.NewClient(&redis.Options{Addr: r.redis.Addr, PoolSize: 32, DialTimeout: 2 * time.Second,
		ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
	defer r.rdb.Close()

	var err error
	if r.companies, err = loadCompanies(ctx, r.rdb, cfg.Companies); err != nil {
		return nil, err
	}
	proxy, closeProxy, err := websiteProxy()
	if err != nil {
		return nil, err
	}
	defer closeProxy()
	maxConns := 8
	if r.mail, err = startMailWorld(ctx, cfg.MailRTT, maxConns, cfg.VerifyDomains, cfg.PeopleDomains); err != nil {
		return nil, err
	}
	defer r.mail.w.Close()
	if err := r.makeAccounts(ctx); err != nil {
		return nil, err
	}

	common := []string{"--redis-url", r.redis.URL, "--log-level", "warn", "--rate-limit", strconv.Itoa(cfg.RPS),
		"--workers", strconv.Itoa(cfg.Workers), "--shard-size", strconv.Itoa(cfg.ShardSize), "--lease-ttl", cfg.LeaseTTL.String(),
		"--dns-server", r.mail.w.DNSAddr(), "--smtp-port", strconv.Itoa(r.mail.w.SMTPPort()), "--outbound-allow-cidrs", mailworld.AllowCIDRs,
		"--smtp-sessions-per-host", strconv.Itoa(maxConns), "--smtp-session-rate", "100",
		"--verify-retry-delays", cfg.RetryDelays, "--redirect-checks=true", "--http-proxy", "http://" + proxy}
	defer r.stopReplicas()
	if err := r.startReplicas(ctx, common); err != nil {
		return nil, err
	}
	r.hc = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConns: cfg.Keys * cfg.InFlight * 2, MaxIdleConnsPerHost: cfg.Keys * cfg.InFlight, IdleConnTimeout: 90 * time.Second,
		DisableCompression: true,
	}}
	r.logf("bulkd %s; replicas %s (%s), %s (%s); redis %s (appendonly yes, appendfsync everysec); %d keys over %d accounts (%d unlimited); %d companies; mail world %s",
		cfg.Bin, r.reps[0].name, r.reps[0].addr, r.reps[1].name, r.reps[1].addr, r.redis.Addr, cfg.Keys, cfg.Accounts, cfg.UnlimitedAccounts,
		len(r.companies.known), r.mail.w.DNSAddr())

	loadTook, drainTook, drained := r.loadAndDrain(ctx)
	rep := r.report(loadTook, drainTook, drained)
	r.check(ctx, rep)
	return rep, nil
}

// startReplicas starts the two `bulkd serve` replicas with the flags
// common; stopReplicas stops those started.
func (r *runner) startReplicas(ctx context.Context, common []string) error {
	for i := 0; i < 2; i++ {
		rep, err := newReplica(fmt.Sprintf("r%d", i), r.cfg.Bin, r.cfg.Dir, common)
		if err != nil {
			return err
		}
		r.reps = append(r.reps, rep)
		if err := rep.start(ctx, time.Minute); err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) stopReplicas() {
	for i := len(r.reps) - 1; i >= 0; i-- {
		r.reps[i].stop(10 * time.Second)
	}
}

// loadAndDrain runs the clients for the load phase, with the faults, then
// lets them poll and read until every job they were given is finished
// (the drain), at most cfg.Drain.
func (r *runner) loadAndDrain(ctx context.Context) (loadTook, drainTook time.Duration, drained bool) {
	cfg := r.cfg
	// The load.
	r.t0 = time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, k := range r.keys {
		wg.Add(1)
		go k.run(ctx, stop, &wg)
	}
	faultsDone := make(chan struct{})
	go func() { defer close(faultsDone); r.faults(ctx) }()
	progress := time.NewTicker(10 * time.Second)
	defer progress.Stop()
	loadEnd := time.After(cfg.Duration)
wait:
	for {
		select {
		case <-loadEnd:
			break wait
		case <-progress.C:
			r.logf("load: %s", r.progressLine())
		}
	}
	r.stopSubmit.Store(true)
	loadTook = r.since()
	<-faultsDone
	r.logf("load phase over (%s); waiting for every accepted job to finish (at most %s)", loadTook.Round(time.Millisecond), cfg.Drain)

	// The drain: the clients keep polling and reading until every job
	// they were given is finished and no submission is still retrying.
	drainStart := time.Now()
	drained = false
	for time.Since(drainStart) < cfg.Drain {
		if r.allDone() {
			drained = true
			break
		}
		select {
		case <-progress.C:
			r.logf("drain: %s", r.progressLine())
		case <-time.After(200 * time.Millisecond):
		}
	}
	drainTook = time.Since(drainStart)
	close(stop)
	wg.Wait()
	r.logf("drain over after %s (all finished: %v)", drainTook.Round(time.Millisecond), drained)
	for _, rep := range r.reps {
		if up, crashed := rep.running(); !up || crashed {
			r.logf("replica %s up=%v crashed=%v", rep.name, up, crashed)
		}
	}

	return loadTook, drainTook, drained
}

// makeAccounts creates the accounts and keys: pay-as-you-go accounts with
// a grant (a ledger entry), unlimited accounts on an active professional
// plan; Keys/Accounts keys each.
func (r *runner) makeAccounts(ctx context.Context) error {
	st := accounts.NewStore(r.rdb, nil)
	bl := billing.New(r.rdb, nil)
	for i := 0; i < r.cfg.Accounts; i++ {
		a := &account{unlimited: i >= r.cfg.Accounts-r.cfg.UnlimitedAccounts}
		acct, err := st.CreateAccount(ctx, fmt.Sprintf("soak-%d", i), 0)
		if err != nil {
			return err
		}
		a.id = acct.ID
		if a.unlimited {
			if err := st.SetPlan(ctx, a.id, accounts.PlanProfessional, accounts.StateActive, time.Now().UTC().AddDate(0, 1, 0).Truncate(time.Second)); err != nil {
				return err
			}
		} else {
			a.opening = credits.Whole(10_000_000)
			if _, err := bl.Adjust(ctx, a.id, a.opening, "soak grant"); err != nil {
				return err
			}
		}
		r.accounts = append(r.accounts, a)
	}
	for i := 0; i < r.cfg.Keys; i++ {
		a := r.accounts[i%len(r.accounts)]
		typ := accounts.PayAsYouGo
		fams := []*family{families[famCompany], families[famVerify], families[famLookup]}
		if a.unlimited {
			typ, fams = accounts.Unlimited, []*family{families[famUnlimited]}
		}
		key, _, err := st.CreateKey(ctx, a.id, typ)
		if err != nil {
			return err
		}
		kc := &keyClient{r: r, idx: i, key: key, acct: a, fams: fams, home: i % 2, rng: rand.New(rand.NewSource(int64(1000 + i)))}
		a.keys = append(a.keys, kc)
		r.keys = append(r.keys, kc)
	}
	return nil
}

// allDone: no submission still retrying and every accepted job seen
// finished by its client.
func (r *runner) allDone() bool {
	for _, k := range r.keys {
		k.mu.Lock()
		busy := k.stats.submissions - k.stats.accepted - k.stats.gaveUp - sumRejected(k.stats.rejected)
		for _, j := range k.jobs {
			if !j.done {
				busy++
			}
		}
		k.mu.Unlock()
		if busy > 0 {
			return false
		}
	}
	return true
}

func sumRejected(m map[int]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

func (r *runner) progressLine() string {
	var reqs, subs, acc, done, jobs int64
	for _, k := range r.keys {
		k.mu.Lock()
		reqs += int64(len(k.samples))
		subs += k.stats.submissions
		acc += k.stats.accepted
		for _, j := range k.jobs {
			jobs++
			if j.done {
				done++
			}
		}
		k.mu.Unlock()
	}
	return fmt.Sprintf("%d requests (%.0f/s), %d submissions, %d accepted, %d/%d jobs finished", reqs, float64(reqs)/r.since().Seconds(), subs, acc, done, jobs)
}

// ---- faults ----

// faultEvent is one injected fault and what followed.
type faultEvent struct {
	kind    string // replica_kill, processor_kill, redis_restart
	target  string
	at      time.Duration // injected
	back    time.Duration // the process was back (ready)
	recover time.Duration // the system had recovered (see notes)
	notes   []string
}

func (e *faultEvent) notef(format string, args ...any) {
	e.notes = append(e.notes, fmt.Sprintf(format, args...))
}

func (r *runner) addEvent(e *faultEvent) {
	r.eventsMu.Lock()
	r.events = append(r.events, e)
	sort.Slice(r.events, func(a, b int) bool { return r.events[a].at < r.events[b].at })
	r.eventsMu.Unlock()
}

func (r *runner) faults(ctx context.Context) {
	type step struct {
		at time.Duration
		do func(context.Context)
	}
	var steps []step
	if r.cfg.ReplicaKillAt > 0 {
		steps = append(steps, step{r.cfg.ReplicaKillAt, r.replicaKill})
	}
	if r.cfg.ProcessorKillAt > 0 {
		steps = append(steps, step{r.cfg.ProcessorKillAt, r.processorKill})
	}
	if r.cfg.RedisRestartAt > 0 {
		steps = append(steps, step{r.cfg.RedisRestartAt, r.redisRestart})
	}
	sort.Slice(steps, func(a, b int) bool { return steps[a].at < steps[b].at })
	for _, s := range steps {
		if d := s.at - r.since(); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return
			}
		}
		s.do(ctx)
	}
}

// replicaKill: kill -9 of r0 (its in-flight requests are cut), restarted
// on the same port after ReplicaDown.
func (r *runner) replicaKill(ctx context.Context) {
	rep := r.reps[0]
	// Strike while a submission is in flight on it (within a few seconds),
	// so a client has a submission whose answer it never gets and must
	// retry with the same Idempotency-Key.
	deadline := time.Now().Add(3 * time.Second)
	for r.postsInFlight[0].Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	inflight := r.postsInFlight[0].Load()
	e := &faultEvent{kind: "replica_kill", target: rep.name, at: r.since()}
	defer r.addEvent(e)
	held := r.leasesOf(ctx, "soak-"+rep.name)
	if err := rep.kill9(); err != nil {
		e.notef("kill failed: %v", err)
		return
	}
	r.logf("fault: kill -9 of replica %s (%d submissions in flight, %d shard leases)", rep.name, inflight, len(held))
	e.notef("killed with %d submissions in flight and %d shard leases", inflight, len(held))
	sleepCtx(ctx, r.cfg.ReplicaDown)
	if err := rep.start(ctx, time.Minute); err != nil {
		e.notef("restart failed: %v", err)
		r.logf("fault: restart of %s failed: %v", rep.name, err)
		return
	}
	e.back = r.since()
	e.recover = e.back
	r.logf("fault: replica %s back after %s", rep.name, (e.back - e.at).Round(time.Millisecond))
	up := make(chan struct{})
	close(up)
	r.watchShards(ctx, e, held, "", 3*r.cfg.LeaseTTL+5*time.Second, up)
}

// processorKill: kill -9 of the replica holding the most shard leases (in
// standalone mode the processor is in-process), kept down until the other
// replica has had to take its shards over, then restarted.
func (r *runner) processorKill(ctx context.Context) {
	// The moment: within a few seconds, when one replica holds the most
	// leases (three or more ends the wait early).
	var victim *replica
	var held []shardRef
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) || victim == nil && time.Now().Before(deadline.Add(10*time.Second)) {
		for _, rep := range r.reps {
			if up, _ := rep.running(); !up {
				continue
			}
			if h := r.leasesOf(ctx, "soak-"+rep.name); len(h) > len(held) {
				victim, held = rep, h
			}
		}
		if len(held) >= 3 {
			break
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
	if victim == nil {
		victim = r.reps[1]
	}
	held = r.leasesOf(ctx, "soak-"+victim.name) // now, just before the kill
	survivor := r.reps[0]
	if victim == survivor {
		survivor = r.reps[1]
	}
	e := &faultEvent{kind: "processor_kill", target: victim.name, at: r.since()}
	defer r.addEvent(e)
	if err := victim.kill9(); err != nil {
		e.notef("kill failed: %v", err)
		return
	}
	r.logf("fault: kill -9 of processor %s holding %d shard leases; down for %s", victim.name, len(held), r.cfg.ProcessorDown)
	e.notef("held %d shard leases when killed; kept down %s (lease TTL %s)", len(held), r.cfg.ProcessorDown, r.cfg.LeaseTTL)
	restarted := make(chan struct{})
	var back time.Duration
	var restartErr error
	go func() {
		defer close(restarted)
		sleepCtx(ctx, r.cfg.ProcessorDown)
		if restartErr = victim.start(ctx, time.Minute); restartErr == nil {
			back = r.since()
			r.logf("fault: processor %s back", victim.name)
		}
	}()
	r.watchShards(ctx, e, held, "soak-"+survivor.name, r.cfg.ProcessorDown+3*r.cfg.LeaseTTL+10*time.Second, restarted)
	<-restarted
	e.back = back
	if restartErr != nil {
		e.notef("restart failed: %v", restartErr)
	}
}

// redisRestart: SIGTERM of redis-server (it fsyncs its append-only file
// and exits), started again on the same port and directory after
// RedisDown.
func (r *runner) redisRestart(ctx context.Context) {
	e := &faultEvent{kind: "redis_restart", target: r.redis.Addr, at: r.since()}
	defer r.addEvent(e)
	if err := r.redis.Terminate(); err != nil {
		e.notef("SIGTERM: %v", err)
	}
	e.notef("redis-server exited %s after SIGTERM", (r.since() - e.at).Round(time.Millisecond))
	r.logf("fault: redis-server stopped (SIGTERM)")
	sleepCtx(ctx, r.cfg.RedisDown)
	if err := r.redis.Restart(); err != nil {
		e.notef("restart failed: %v", err)
		r.logf("fault: redis restart failed: %v", err)
		return
	}
	e.back = r.since()
	r.logf("fault: redis-server back (append-only file loaded) after %s", (e.back - e.at).Round(time.Millisecond))
	// Recovered when both replicas say they are ready again.
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		ok := 0
		for _, rep := range r.reps {
			if res, err := hc.Get(rep.base() + "/readyz"); err == nil {
				res.Body.Close()
				if res.StatusCode == http.StatusOK {
					ok++
				}
			}
		}
		if ok == len(r.reps) {
			e.recover = r.since()
			break
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

// shardRef is one shard of one job.
type shardRef struct {
	job   string
	shard int
}

// leasesOf lists the shards whose lease owner is owner, over the running
// jobs.
func (r *runner) leasesOf(ctx context.Context, owner string) []shardRef {
	all := r.leases(ctx)
	var out []shardRef
	for s, o := range all {
		if o == owner {
			out = append(out, s)
		}
	}
	return out
}

// leases reads the lease holder of every shard of every running job.
func (r *runner) leases(ctx context.Context) map[shardRef]string {
	ids, err := r.rdb.SMembers(ctx, "bulkd:jobs:active").Result()
	if err != nil {
		return nil
	}
	pipe := r.rdb.Pipeline()
	shards := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		shards[i] = pipe.HGet(ctx, "bulkd:job:{"+id+"}", "shards")
	}
	_, _ = pipe.Exec(ctx)
	pipe = r.rdb.Pipeline()
	var refs []shardRef
	var gets []*redis.StringCmd
	for i, id := range ids {
		n, _ := strconv.Atoi(shards[i].Val())
		for s := 0; s < n; s++ {
			refs = append(refs, shardRef{id, s})
			gets = append(gets, pipe.Get(ctx, fmt.Sprintf("bulkd:job:{%s}:lease:%d", id, s)))
		}
	}
	_, _ = pipe.Exec(ctx)
	out := map[shardRef]string{}
	for i, g := range gets {
		if v := g.Val(); v != "" {
			out[refs[i]] = v
		}
	}
	return out
}

// watchShards follows the shards a killed replica held until each is
// finished or leased by another owner (survivor, or anyone but the dead
// owner's next life when survivor is ""), and notes how long that took.
func (r *runner) watchShards(ctx context.Context, e *faultEvent, held []shardRef, survivor string, limit time.Duration, back <-chan struct{}) {
	if len(held) == 0 {
		return
	}
	// Shards the dead process finished in its last moments are not its
	// successor's to take over.
	left := map[shardRef]bool{}
	pipe := r.rdb.Pipeline()
	done := make([]*redis.IntCmd, len(held))
	for i, s := range held {
		done[i] = pipe.GetBit(ctx, "bulkd:job:{"+s.job+"}:sdone", int64(s.shard))
	}
	_, _ = pipe.Exec(ctx)
	before := 0
	for i, s := range held {
		if done[i].Val() == 1 {
			before++
			continue
		}
		left[s] = true
	}
	if before > 0 {
		e.notef("%d of its shards were finished by it just before the kill", before)
	}
	total := len(left)
	if total == 0 {
		return
	}
	var byOther, finished, whileDown int
	var last time.Duration
	deadline := time.Now().Add(limit)
	for len(left) > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		owners := r.leases(ctx)
		pipe := r.rdb.Pipeline()
		bits := map[shardRef]*redis.IntCmd{}
		for s := range left {
			bits[s] = pipe.GetBit(ctx, "bulkd:job:{"+s.job+"}:sdone", int64(s.shard))
		}
		_, _ = pipe.Exec(ctx)
		for s := range left {
			switch {
			case survivor != "" && owners[s] == survivor:
				byOther++
			case bits[s].Val() == 1:
				finished++
			default:
				continue
			}
			delete(left, s)
			last = r.since()
			select {
			case <-back:
			default:
				whileDown++
			}
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	if len(left) > 0 {
		e.notef("%d of %d held shards neither finished nor taken over within %s", len(left), total, limit)
		return
	}
	if e.kind == "processor_kill" {
		e.recover = last
	}
	who := "taken over by " + strings.TrimPrefix(survivor, "soak-")
	if survivor == "" {
		who = "taken over"
	}
	e.notef("its %d unfinished shards: %d %s (lease seen), %d seen finished, %d of them while it was down; the last %s after the kill", total, byOther, who, finished,
		whileDown, (last - e.at).Round(100*time.Millisecond))
}
