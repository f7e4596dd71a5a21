package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/finder"
	"github.com/bulkd/bulkd/internal/mailworld"
)

// lookupMain measures bulk email lookup end to end: the real bulkd binary
// against the mail world's People scenario (500 company domains of 20
// people asked about, one address pattern per domain, catch-all, greylisting
// and mail-less domains, 50 ms per SMTP reply, 3 sessions per MX host), a
// 10,000-row POST /v1/bulk-lookup job answered cold and then again in a new
// job (learned patterns in Redis), every answer compared with the world's
// truth, then the latency of many 10,000-row submissions.
//
//	go run ./hack/loadgen lookup --bin bin/bulkd [--rtt 50ms] [--cap 3] [--domains 500] [--per-domain 20]
func lookupMain(args []string) error {
	o := parseLookupFlags(args)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	spec, cases := mailworld.People(mailworld.PeopleOptions{Domains: o.domains, PerDomain: o.perDomain, RTT: o.rtt,
		Seed: o.seed, Greylist: o.greylist, MaxConnsPerHost: o.capHost})
	spec, hy := mailworld.Harden(spec, mailworld.HardenOptions{DropDomains: o.drops, BlockDomains: o.blocked, SharedDomains: o.shared, Seed: o.seed})
	for i := range spec.Hosts {
		if spec.Hosts[i].Name == mailworld.BlockHost || spec.Hosts[i].Provider == mailworld.SharedProvider {
			spec.Hosts[i].MaxConns = o.capHost // counted and capped as every server
		}
	}
	w, err := mailworld.Start(ctx, spec)
	if err != nil {
		return err
	}
	defer w.Close()
	srv, rdb, cleanup, err := privateRedis()
	if err != nil {
		return err
	}
	defer cleanup()
	st := accounts.NewStore(rdb, nil)
	need := int64(len(cases))*int64(o.rounds) + int64(o.subRows)*int64(o.subJobs+o.subWarm) + 1000
	key, err := paygKey(ctx, st, "load", credits.Whole(need))
	if err != nil {
		return err
	}
	flags := []string{"--dns-server", w.DNSAddr(),
		"--smtp-port", strconv.Itoa(w.SMTPPort()), "--outbound-allow-cidrs", mailworld.AllowCIDRs,
		"--smtp-sessions-per-host", strconv.Itoa(o.capHost), "--verify-retry-delays", o.retryDelays}
	if o.workers > 0 {
		flags = append(flags, "--workers", strconv.Itoa(o.workers))
	}
	flags = append(flags, strings.Fields(o.extra)...)
	b, err := startBulkd(o.bin, srv.URL, flags...)
	if err != nil {
		return err
	}
	defer b.stop()
	r := &lookupRun{o: o, w: w, rdb: rdb, b: b, key: key, cases: cases, hy: hy,
		hc:          &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}},
		hostDomains: map[string][]string{}, rowsOf: map[string]int{}}
	r.rows = make([]lookupIn, len(cases))
	for i, c := range cases {
		r.rows[i] = lookupIn{c.FirstName, c.LastName, c.Domain}
		r.rowsOf[c.Domain]++
	}
	r.body, _ = json.Marshal(map[string]any{"input": r.rows})
	for _, d := range spec.Domains {
		for _, mx := range d.MX {
			r.hostDomains[mx] = append(r.hostDomains[mx], d.Name)
		}
	}
	fmt.Printf("lookup: %d rows (%d domains x %d people) of the People world (seed %d), SMTP round trip %v, %d sessions per MX host, %d MX hosts, greylist %v\n",
		len(r.rows), o.domains, o.perDomain, o.seed, o.rtt, o.capHost, len(spec.Hosts), o.greylist)
	if len(hy.Drops)+len(hy.Blocks)+len(hy.Shared) > 0 {
		fmt.Printf("hostile domains: %d whose MX drops the session after K RCPTs, %d on a blocking server, %d behind MX names of shared servers\n", len(hy.Drops), len(hy.Blocks), len(hy.Shared))
	}
	fmt.Printf("bulkd serve %s\n", strings.Join(flags, " "))
	for round := 1; round <= o.rounds; round++ {
		if err := r.round(ctx, round); err != nil {
			return err
		}
	}
	b.stop()
	if o.subRows > 0 && o.subJobs > 0 {
		return r.submissionLatency(srv.URL)
	}
	return nil
}

// lookupOpts are lookupMain's flags.
type lookupOpts struct {
	bin, retryDelays, extra             string
	rtt, greylist, timeout              time.Duration
	capHost, domains, perDomain, rounds int
	workers, subRows, subJobs, subWarm  int
	drops, blocked, shared              int
	seed                                int64
	target                              float64
}

func parseLookupFlags(args []string) lookupOpts {
	var o lookupOpts
	fs := flag.NewFlagSet("lookup", flag.ExitOnError)
	fs.StringVar(&o.bin, "bin", "bin/bulkd", "bulkd binary")
	fs.DurationVar(&o.rtt, "rtt", 50*time.Millisecond, "delay before every SMTP reply of the mail world")
	fs.IntVar(&o.capHost, "cap", 3, "sessions per MX host: the mail world's limit and bulkd's --smtp-sessions-per-host")
	fs.IntVar(&o.domains, "domains", 500, "company domains of the People world")
	fs.IntVar(&o.perDomain, "per-domain", 20, "people asked about per domain")
	fs.Int64Var(&o.seed, "seed", 1, "the People world's seed")
	fs.DurationVar(&o.greylist, "greylist", 2*time.Second, "greylisting period of the greylisting domains (shorter than the first retry delay)")
	fs.StringVar(&o.retryDelays, "retry-delays", "3s,5s", "bulkd --verify-retry-delays")
	fs.IntVar(&o.rounds, "rounds", 2, "lookup jobs of the same rows (the first cold, the next with learned patterns in Redis)")
	fs.IntVar(&o.workers, "workers", 0, "bulkd --workers (0: bulkd's default)")
	fs.StringVar(&o.extra, "bulkd-flags", "", "more bulkd serve flags for the lookup runs, space separated (e.g. \"--smtp-session-rate 20 --shard-size 2500\")")
	fs.IntVar(&o.subRows, "submit-rows", 10_000, "rows of the measured submissions (0 to skip)")
	fs.IntVar(&o.subJobs, "submit-jobs", 30, "submissions measured")
	fs.IntVar(&o.subWarm, "submit-warmup", 2, "unmeasured submissions first")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "the longest a job may take")
	fs.IntVar(&o.drops, "drops", 0, "domains whose MX drops the session after K RCPTs (K = 1..3; mailworld.Harden)")
	fs.IntVar(&o.blocked, "blocked", 0, "domains on a server that blocks the client (their people are right only when not verified)")
	fs.IntVar(&o.shared, "shared", 0, "domains with an MX name of their own on a few shared servers (many names, one server address)")
	fs.Float64Var(&o.target, "target", 0, "first-answer rows/s to report as met or not (0: none)")
	_ = fs.Parse(args)
	return o
}

// lookupRun is one lookupMain's world, bulkd and rows.
type lookupRun struct {
	o     lookupOpts
	w     *mailworld.World
	rdb   *redis.Client
	b     *bulkd
	hc    *http.Client
	key   string
	cases []mailworld.PersonCase
	hy    mailworld.Hostility
	rows  []lookupIn
	body  []byte
	// hostDomains: MX host -> the domains it receives mail for; rowsOf:
	// domain -> rows asking about it.
	hostDomains map[string][]string
	rowsOf      map[string]int
}

// round runs one lookup job of every row and reports it.
func (r *lookupRun) round(ctx context.Context, round int) error {
	o, w, b := r.o, r.w, r.b
	// The domains with a learned pattern before this round.
	learned := map[string]bool{}
	store := finder.NewRedisPatterns(r.rdb)
	for d := range r.rowsOf {
		if _, ok, _ := store.Get(ctx, d); ok {
			learned[d] = true
		}
	}
	w.ResetStats()
	cpu0 := cpuTimes(b, r.rdb)
	t0 := time.Now()
	id, err := submitTo(r.hc, b.base+"/v1/bulk-lookup", r.key, r.body)
	if err != nil {
		return err
	}
	accepted := time.Since(t0)
	tl, err := watchLookup(r.hc, b.base+"/v1/bulk-lookup/"+id, r.key, t0, o.timeout, w)
	if err != nil {
		return fmt.Errorf("%w (%s)", err, exitInfo(b))
	}
	cpu1 := cpuTimes(b, r.rdb)
	final := w.Stats()
	res, err := lookupRows(r.hc, b.base, r.key, id)
	if err != nil {
		return err
	}
	if len(res) != len(r.cases) {
		return fmt.Errorf("job %s: %d results for %d rows", id, len(res), len(r.cases))
	}
	n := float64(len(r.rows))
	label := "cold: empty pattern store, cold caches"
	if round > 1 {
		label = fmt.Sprintf("new job, same rows: %d of %d domains with a learned pattern in Redis", len(learned), len(r.rowsOf))
	}
	fmt.Printf("round %d (%s): submission accepted in %s\n", round, label, accepted.Round(time.Millisecond))
	fmt.Printf("  answered rows over time: %s\n", tl.progress())
	fmt.Printf("  all first answers (total_pending 0, %d rows retrying after greylisting) after %s; completed after %s (completed_at - created_at %s)\n",
		tl.retryingAtFirst, tl.firstAnswers.Round(time.Millisecond), tl.completed.Round(time.Millisecond), tl.serverTook.Round(time.Millisecond))
	s := tl.statsAtFirst
	fmt.Printf("  first answers: %d SMTP sessions, %d RCPTs (%.3f per row), 421 %d, 452 %d, 450 greylisted %d, most sessions at once on one host %d\n",
		s.Sessions, s.Rcpts, float64(s.Rcpts)/n, s.Rejected421, s.Replies452, s.Greylisted, maxConcurrent(s))
	fmt.Printf("  whole job:     %d SMTP sessions, %d RCPTs (%.3f per row), 421 %d, 452 %d, 450 greylisted %d, most sessions at once on one host %d\n",
		final.Sessions, final.Rcpts, float64(final.Rcpts)/n, final.Rejected421, final.Replies452, final.Greylisted, maxConcurrent(final))
	fmt.Printf("  CPU during the job (s): bulkd %.2f, redis-server %.2f, load generator + mail world %.2f (wall %.2f, 2 cores)\n",
		cpu1.bulkd-cpu0.bulkd, cpu1.redis-cpu0.redis, cpu1.self-cpu0.self, tl.completed.Seconds())
	fmt.Printf("  busiest hosts, sessions/RCPTs until the first answers: %s; whole job: %s\n", topHosts(tl.statsAtFirst, 4), topHosts(final, 4))
	if round > 1 && len(learned) > 0 {
		exact, exactRows, bound, boundRows := learnedRcpts(final, r.hostDomains, learned, r.rowsOf)
		fmt.Printf("  RCPTs per row on domains with a learned pattern (catch-all probes included): %.3f exact on the %d rows of learned domains with their own MX host; at most %.3f over all %d rows of learned domains (shared provider hosts' RCPTs all counted against them)\n",
			float64(exact)/float64(max(exactRows, 1)), exactRows, float64(bound)/float64(max(boundRows, 1)), boundRows)
	}
	fmt.Printf("  first pass: %.0f rows/s; most sessions at once on one server over the job %d (cap %d; servers over it %d)\n",
		n/tl.firstAnswers.Seconds(), maxConcurrent(final), o.capHost, overCap(final, o.capHost))
	if o.target > 0 && round == 1 {
		verdict := "met"
		if n/tl.firstAnswers.Seconds() < o.target {
			verdict = "NOT met"
		}
		fmt.Printf("  target %.0f rows/s in the first pass (cold): %s\n", o.target, verdict)
	}
	r.evaluate(res)
	return nil
}

// evaluate reports the hostile domains' rows on their own, then
// evaluates the others against the world's truth.
func (r *lookupRun) evaluate(res []lookupOut) {
	cases, hy := r.cases, r.hy
	evalCases, evalRes := cases, res
	if len(hy.Blocks) > 0 {
		// People of blocked domains: no verifier can see their
		// mailboxes; right is anything but a verified address.
		evalCases, evalRes = nil, nil
		bn, bright := 0, 0
		for i, c := range cases {
			if !hy.Blocks[c.Domain] {
				evalCases, evalRes = append(evalCases, c), append(evalRes, res[i])
				continue
			}
			bn++
			if res[i].Substatus == nil || *res[i].Substatus != "verified" {
				bright++
			}
		}
		fmt.Printf("  blocked domains: %d/%d rows not verified (right)\n", bright, bn)
	}
	if len(hy.Drops) > 0 {
		dn, dfound, dfindable := 0, 0, 0
		for i, c := range cases {
			if _, ok := hy.Drops[c.Domain]; !ok {
				continue
			}
			dn++
			if c.Findable {
				dfindable++
				if res[i].Email != nil && strings.EqualFold(*res[i].Email, c.Email) {
					dfound++
				}
			}
		}
		fmt.Printf("  drop domains: %d rows, %d/%d findable found with the true address\n", dn, dfound, dfindable)
	}
	evaluateLookup(evalCases, evalRes)
}

// submissionLatency measures submissions alone: processing is parked on a
// DNS server that never answers (a bound UDP socket nobody reads), so the
// workers hold no CPU and the numbers are the submission path's.
func (r *lookupRun) submissionLatency(redisURL string) error {
	o, cases := r.o, r.cases
	dead, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer dead.Close()
	bigFlags := []string{"--dns-server", dead.LocalAddr().String()}
	if o.workers > 0 {
		bigFlags = append(bigFlags, "--workers", strconv.Itoa(o.workers))
	}
	big, err := startBulkd(o.bin, redisURL, bigFlags...)
	if err != nil {
		return err
	}
	defer big.stop()
	sub := make([]lookupIn, 0, o.subRows)
	for i := 0; len(sub) < o.subRows; i++ {
		c := cases[i%len(cases)]
		if i >= len(cases) { // distinct rows past the world's
			c.FirstName = fmt.Sprintf("%s%d", c.FirstName, i/len(cases))
		}
		sub = append(sub, lookupIn{c.FirstName, c.LastName, c.Domain})
	}
	sb, _ := json.Marshal(map[string]any{"input": sub})
	var lat []time.Duration
	for i := 0; i < o.subWarm+o.subJobs; i++ {
		t0 := time.Now()
		if _, err := submitTo(r.hc, big.base+"/v1/bulk-lookup", r.key, sb); err != nil {
			return err
		}
		if i >= o.subWarm {
			lat = append(lat, time.Since(t0))
		}
	}
	fmt.Printf("submission of %d rows (%.2f MB) to POST /v1/bulk-lookup: p50 %s, p90 %s, min %s, max %s over %d (after %d unmeasured); API peak RSS %s\n",
		len(sub), float64(len(sb))/1e6, pct(lat, 0.5), pct(lat, 0.9), pct(lat, 0), pct(lat, 1), len(lat), o.subWarm, big.peakRSS())
	return nil
}

type lookupIn struct {
	FirstName string `json:"first_name"`
	LastName  string `json:"last_name"`
	Domain    string `json:"domain"`
}

type lookupOut struct {
	Status     string  `json:"status"`
	Substatus  *string `json:"substatus"`
	Email      *string `json:"email"`
	IsCatchAll *bool   `json:"is_catch_all"`
	Confidence *int    `json:"confidence"`
	FirstName  string  `json:"first_name"`
	LastName   string  `json:"last_name"`
	Domain     string  `json:"domain"`
}

// timeline is what watchLookup saw of a job.
type timeline struct {
	firstAnswers, completed, serverTook time.Duration
	retryingAtFirst                     int64
	statsAtFirst                        mailworld.Stats
	marks                               []mark
}

type mark struct {
	at       time.Duration
	answered int64 // rows with an answer, final or retrying
}

func (t *timeline) progress() string {
	if len(t.marks) == 0 {
		return "-"
	}
	total := t.marks[len(t.marks)-1].answered
	var out []string
	for _, p := range []float64{0.10, 0.25, 0.50, 0.75, 0.90, 0.99, 1} {
		want := int64(p * float64(total))
		for _, m := range t.marks {
			if m.answered >= want {
				out = append(out, fmt.Sprintf("%.0f%% %.1fs", 100*p, m.at.Seconds()))
				break
			}
		}
	}
	return strings.Join(out, ", ")
}

// watchLookup polls a lookup job until it is completed: it notes when no
// row is pending any more (every row has its first answer; greylisted ones
// wait for a retry) and takes the world's counters then.
func watchLookup(hc *http.Client, url, key string, t0 time.Time, d time.Duration, w *mailworld.World) (*timeline, error) {
	tl := &timeline{}
	deadline := t0.Add(d)
	var last int64 = -1
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("X-API-Key", key)
		res, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		var st struct {
			Status      string           `json:"status"`
			TotalRows   int64            `json:"total_rows"`
			Summary     map[string]int64 `json:"summary"`
			CreatedAt   time.Time        `json:"created_at"`
			CompletedAt *time.Time       `json:"completed_at"`
		}
		err = json.NewDecoder(res.Body).Decode(&st)
		res.Body.Close()
		if err != nil || res.StatusCode != 200 {
			return nil, fmt.Errorf("GET %s: %d %v", url, res.StatusCode, err)
		}
		now := time.Since(t0)
		answered := st.TotalRows - st.Summary["total_pending"]
		if answered != last {
			tl.marks = append(tl.marks, mark{now, answered})
			last = answered
		}
		if tl.firstAnswers == 0 && st.Summary["total_pending"] == 0 {
			tl.firstAnswers, tl.retryingAtFirst, tl.statsAtFirst = now, st.Summary["total_retrying"], w.Stats()
		}
		if st.Status == "completed" {
			if tl.firstAnswers == 0 {
				tl.firstAnswers, tl.statsAtFirst = now, w.Stats()
			}
			tl.completed = now
			if st.CompletedAt != nil {
				tl.serverTook = st.CompletedAt.Sub(st.CreatedAt)
			}
			return tl, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, fmt.Errorf("%s: not completed within %s", url, d)
}

func lookupRows(hc *http.Client, base, key, id string) ([]lookupOut, error) {
	var all []lookupOut
	for off := 0; ; off += 500 {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/v1/bulk-lookup/%s/results?limit=500&offset=%d", base, id, off), nil)
		req.Header.Set("X-API-Key", key)
		res, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		var page struct {
			TotalRows int         `json:"total_rows"`
			Results   []lookupOut `json:"results"`
		}
		err = json.NewDecoder(res.Body).Decode(&page)
		res.Body.Close()
		if err != nil {
			return nil, err
		}
		all = append(all, page.Results...)
		if off+500 >= page.TotalRows {
			return all, nil
		}
	}
}

// evaluateLookup compares every answer with the world's truth and prints
// the counts.
// byCount lists counts, the largest first: "found/verified 90, ...".
func byCount(counts map[string]int) string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return counts[keys[i]] > counts[keys[j]] })
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	return strings.Join(parts, ", ")
}

func evaluateLookup(cases []mailworld.PersonCase, res []lookupOut) {
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	var findable, found, findableGrey, foundGrey, wrong, wrongVerified, mismatched int
	var noAddr, noAddrNotFound, noAddrUnknown, mailless, maillessRight int
	var caPattern, caPatternRight, caGuess, caGuessRight, caNoTruth, caOther int
	subs := map[string]int{}
	var misses []string
	for i, c := range cases {
		r := res[i]
		if strings.TrimSpace(r.FirstName) != strings.TrimSpace(c.FirstName) || r.Domain != c.Domain {
			mismatched++
		}
		sub := str(r.Substatus)
		subs[r.Status+"/"+sub]++
		email := strings.ToLower(str(r.Email))
		right := email != "" && email == strings.ToLower(c.Email)
		if sub == "verified" && !right {
			wrongVerified++
		}
		switch {
		case c.CatchAll:
			switch {
			case c.Email == "":
				caNoTruth++ // the person is not in the directory: any address is a guess at nobody
			case sub == "catch_all_pattern":
				caPattern++
				if right {
					caPatternRight++
				}
			case sub == "catch_all_guess":
				caGuess++
				if right {
					caGuessRight++
				}
			default:
				caOther++
			}
		default:
			if email != "" && !right {
				wrong++ // an address on a domain that is not catch-all that is not the person's
			}
			switch {
			case c.Reason != "":
				mailless++
				if r.Status == "not_found" && sub == c.Reason {
					maillessRight++
				}
			case c.Findable:
				findable++
				ok := r.Status == "found" && sub == "verified" && right
				if ok {
					found++
				} else if len(misses) < 5 {
					misses = append(misses, fmt.Sprintf("%s %s @ %s (truth %s): %s/%s %s", c.FirstName, c.LastName, c.Domain, c.Email, r.Status, sub, email))
				}
				if c.Greylisted {
					findableGrey++
					if ok {
						foundGrey++
					}
				}
			default:
				noAddr++
				if r.Status == "not_found" {
					noAddrNotFound++
					if sub == "unknown" {
						noAddrUnknown++
						if len(misses) < 10 {
							misses = append(misses, fmt.Sprintf("%s %s @ %s (no address; greylisting domain %v): %s/%s", c.FirstName, c.LastName, c.Domain, c.Greylisted, r.Status, sub))
						}
					}
				}
			}
		}
	}
	fmt.Printf("  answers: %s\n", byCount(subs))
	fmt.Printf("  findable (ordinary and greylisting domains): %d/%d found verified with the true address (%.2f%%; greylisting domains %d/%d); wrong addresses on domains that are not catch-all %d; verified but not the true address %d\n",
		found, findable, 100*float64(found)/float64(max(findable, 1)), foundGrey, findableGrey, wrong, wrongVerified)
	fmt.Printf("  not in the directory (ordinary and greylisting domains): %d/%d not_found (%d of them unknown); domains without mail: %d/%d with the right substatus\n",
		noAddrNotFound, noAddr, noAddrUnknown, maillessRight, mailless)
	fmt.Printf("  catch-all domains: catch_all_pattern %d (true address %d), catch_all_guess %d (true address %d), other answers %d, people not in the directory %d\n",
		caPattern, caPatternRight, caGuess, caGuessRight, caOther, caNoTruth)
	for _, m := range misses {
		fmt.Printf("  missed: %s\n", m)
	}
	if mismatched > 0 {
		fmt.Printf("  WARNING: %d results did not echo the row at their position\n", mismatched)
	}
}

// learnedRcpts counts the RCPTs the mail world saw for the domains with a
// learned pattern: exactly where a domain has an MX host of its own, and,
// as an upper bound, with every RCPT of the shared provider hosts counted
// against the learned domains (the world counts per host, not per domain).
func learnedRcpts(s mailworld.Stats, hostDomains map[string][]string, learned map[string]bool, rowsOf map[string]int) (exact int64, exactRows int, bound int64, boundRows int) {
	for h, ds := range hostDomains {
		hs := s.PerHost[h]
		if len(ds) == 1 {
			if learned[ds[0]] {
				exact += hs.Rcpts
				exactRows += rowsOf[ds[0]]
				bound += hs.Rcpts
				boundRows += rowsOf[ds[0]]
			}
			continue
		}
		bound += hs.Rcpts
		for _, d := range ds {
			if learned[d] {
				boundRows += rowsOf[d]
			}
		}
	}
	return
}

func topHosts(s mailworld.Stats, n int) string {
	type hs struct {
		name string
		mailworld.HostStats
	}
	var all []hs
	for name, h := range s.PerHost {
		all = append(all, hs{name, h})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Sessions > all[j].Sessions })
	var out []string
	for i := 0; i < n && i < len(all); i++ {
		out = append(out, fmt.Sprintf("%s %d/%d", all[i].name, all[i].Sessions, all[i].Rcpts))
	}
	return strings.Join(out, ", ")
}

type cpuSample struct{ bulkd, redis, self float64 }

// cpuTimes reads the CPU seconds used so far by bulkd (/proc), the
// redis-server (INFO cpu) and this process.
func cpuTimes(b *bulkd, rdb *redis.Client) cpuSample {
	return cpuSample{bulkd: procCPU(b.cmd.Process.Pid), redis: redisCPU(rdb), self: procCPU(os.Getpid())}
}

func procCPU(pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which is in parentheses).
	s := string(raw)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

func redisCPU(rdb *redis.Client) float64 {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		return 0
	}
	u, _ := strconv.ParseFloat(infoField(info, "used_cpu_user"), 64)
	s, _ := strconv.ParseFloat(infoField(info, "used_cpu_sys"), 64)
	return u + s
}

// exitInfo says whether bulkd has exited, and how, without waiting.
func exitInfo(b *bulkd) string {
	var ws syscall.WaitStatus
	pid, err := syscall.Wait4(b.cmd.Process.Pid, &ws, syscall.WNOHANG, nil)
	switch {
	case err != nil:
		return "bulkd: " + err.Error()
	case pid == 0:
		return "bulkd still running"
	case ws.Signaled():
		return "bulkd killed by signal " + ws.Signal().String()
	default:
		return fmt.Sprintf("bulkd exited with status %d", ws.ExitStatus())
	}
}
