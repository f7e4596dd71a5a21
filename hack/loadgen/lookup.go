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
	fs := flag.NewFlagSet("lookup", flag.ExitOnError)
	bin := fs.String("bin", "bin/bulkd", "bulkd binary")
	rtt := fs.Duration("rtt", 50*time.Millisecond, "delay before every SMTP reply of the mail world")
	capHost := fs.Int("cap", 3, "sessions per MX host: the mail world's limit and bulkd's --smtp-sessions-per-host")
	domains := fs.Int("domains", 500, "company domains of the People world")
	perDomain := fs.Int("per-domain", 20, "people asked about per domain")
	seed := fs.Int64("seed", 1, "the People world's seed")
	greylist := fs.Duration("greylist", 2*time.Second, "greylisting period of the greylisting domains (shorter than the first retry delay)")
	retryDelays := fs.String("retry-delays", "3s,5s", "bulkd --verify-retry-delays")
	rounds := fs.Int("rounds", 2, "lookup jobs of the same rows (the first cold, the next with learned patterns in Redis)")
	workers := fs.Int("workers", 0, "bulkd --workers (0: bulkd's default)")
	extra := fs.String("bulkd-flags", "", "more bulkd serve flags for the lookup runs, space separated (e.g. \"--smtp-session-rate 20 --shard-size 2500\")")
	subRows := fs.Int("submit-rows", 10_000, "rows of the measured submissions (0 to skip)")
	subJobs := fs.Int("submit-jobs", 30, "submissions measured")
	subWarm := fs.Int("submit-warmup", 2, "unmeasured submissions first")
	timeout := fs.Duration("timeout", 5*time.Minute, "the longest a job may take")
	drops := fs.Int("drops", 0, "domains whose MX drops the session after K RCPTs (K = 1..3; mailworld.Harden)")
	blocked := fs.Int("blocked", 0, "domains on a server that blocks the client (their people are right only when not verified)")
	shared := fs.Int("shared", 0, "domains with an MX name of their own on a few shared servers (many names, one server address)")
	target := fs.Float64("target", 0, "first-answer rows/s to report as met or not (0: none)")
	_ = fs.Parse(args)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	spec, cases := mailworld.People(mailworld.PeopleOptions{Domains: *domains, PerDomain: *perDomain, RTT: *rtt,
		Seed: *seed, Greylist: *greylist, MaxConnsPerHost: *capHost})
	spec, hy := mailworld.Harden(spec, mailworld.HardenOptions{DropDomains: *drops, BlockDomains: *blocked, SharedDomains: *shared, Seed: *seed})
	for i := range spec.Hosts {
		if spec.Hosts[i].Name == mailworld.BlockHost || spec.Hosts[i].Provider == mailworld.SharedProvider {
			spec.Hosts[i].MaxConns = *capHost // counted and capped as every server
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
	need := int64(len(cases))*int64(*rounds) + int64(*subRows)*int64(*subJobs+*subWarm) + 1000
	key, err := paygKey(ctx, st, "load", credits.Whole(need))
	if err != nil {
		return err
	}
	flags := []string{"--dns-server", w.DNSAddr(),
		"--smtp-port", strconv.Itoa(w.SMTPPort()), "--outbound-allow-cidrs", mailworld.AllowCIDRs,
		"--smtp-sessions-per-host", strconv.Itoa(*capHost), "--verify-retry-delays", *retryDelays}
	if *workers > 0 {
		flags = append(flags, "--workers", strconv.Itoa(*workers))
	}
	flags = append(flags, strings.Fields(*extra)...)
	b, err := startBulkd(*bin, srv.URL, flags...)
	if err != nil {
		return err
	}
	defer b.stop()
	hc := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}

	rows := make([]lookupIn, len(cases))
	for i, c := range cases {
		rows[i] = lookupIn{c.FirstName, c.LastName, c.Domain}
	}
	body, _ := json.Marshal(map[string]any{"input": rows})
	hostDomains := map[string][]string{} // MX host -> the domains it receives mail for
	for _, d := range spec.Domains {
		for _, mx := range d.MX {
			hostDomains[mx] = append(hostDomains[mx], d.Name)
		}
	}
	rowsOf := map[string]int{}
	for _, c := range cases {
		rowsOf[c.Domain]++
	}
	fmt.Printf("lookup: %d rows (%d domains x %d people) of the People world (seed %d), SMTP round trip %v, %d sessions per MX host, %d MX hosts, greylist %v\n",
		len(rows), *domains, *perDomain, *seed, *rtt, *capHost, len(spec.Hosts), *greylist)
	if len(hy.Drops)+len(hy.Blocks)+len(hy.Shared) > 0 {
		fmt.Printf("hostile domains: %d whose MX drops the session after K RCPTs, %d on a blocking server, %d behind MX names of shared servers\n", len(hy.Drops), len(hy.Blocks), len(hy.Shared))
	}
	fmt.Printf("bulkd serve %s\n", strings.Join(flags, " "))

	for round := 1; round <= *rounds; round++ {
		// The domains with a learned pattern before this round.
		learned := map[string]bool{}
		store := finder.NewRedisPatterns(rdb)
		for d := range rowsOf {
			if _, ok, _ := store.Get(ctx, d); ok {
				learned[d] = true
			}
		}
		w.ResetStats()
		cpu0 := cpuTimes(b, rdb)
		t0 := time.Now()
		id, err := submitTo(hc, b.base+"/v1/bulk-lookup", key, body)
		if err != nil {
			return err
		}
		accepted := time.Since(t0)
		tl, err := watchLookup(hc, b.base+"/v1/bulk-lookup/"+id, key, t0, *timeout, w)
		if err != nil {
			return fmt.Errorf("%w (%s)", err, exitInfo(b))
		}
		cpu1 := cpuTimes(b, rdb)
		final := w.Stats()
		res, err := lookupRows(hc, b.base, key, id)
		if err != nil {
			return err
		}
		if len(res) != len(cases) {
			return fmt.Errorf("job %s: %d results for %d rows", id, len(res), len(cases))
		}
		n := float64(len(rows))
		label := "cold: empty pattern store, cold caches"
		if round > 1 {
			label = fmt.Sprintf("new job, same rows: %d of %d domains with a learned pattern in Redis", len(learned), len(rowsOf))
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
			exact, exactRows, bound, boundRows := learnedRcpts(final, hostDomains, learned, rowsOf)
			fmt.Printf("  RCPTs per row on domains with a learned pattern (catch-all probes included): %.3f exact on the %d rows of learned domains with their own MX host; at most %.3f over all %d rows of learned domains (shared provider hosts' RCPTs all counted against them)\n",
				float64(exact)/float64(max(exactRows, 1)), exactRows, float64(bound)/float64(max(boundRows, 1)), boundRows)
		}
		fmt.Printf("  first pass: %.0f rows/s; most sessions at once on one server over the job %d (cap %d; servers over it %d)\n",
			n/tl.firstAnswers.Seconds(), maxConcurrent(final), *capHost, overCap(final, *capHost))
		if *target > 0 && round == 1 {
			verdict := "met"
			if n/tl.firstAnswers.Seconds() < *target {
				verdict = "NOT met"
			}
			fmt.Printf("  target %.0f rows/s in the first pass (cold): %s\n", *target, verdict)
		}
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
	b.stop()

	if *subRows > 0 && *subJobs > 0 {
		// Submission latency alone: processing is parked on a DNS server
		// that never answers (a bound UDP socket nobody reads), so the
		// workers hold no CPU and the numbers are the submission path's.
		dead, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer dead.Close()
		bigFlags := []string{"--dns-server", dead.LocalAddr().String()}
		if *workers > 0 {
			bigFlags = append(bigFlags, "--workers", strconv.Itoa(*workers))
		}
		big, err := startBulkd(*bin, srv.URL, bigFlags...)
		if err != nil {
			return err
		}
		defer big.stop()
		sub := make([]lookupIn, 0, *subRows)
		for i := 0; len(sub) < *subRows; i++ {
			c := cases[i%len(cases)]
			if i >= len(cases) { // distinct rows past the world's
				c.FirstName = fmt.Sprintf("%s%d", c.FirstName, i/len(cases))
			}
			sub = append(sub, lookupIn{c.FirstName, c.LastName, c.Domain})
		}
		sb, _ := json.Marshal(map[string]any{"input": sub})
		var lat []time.Duration
		for i := 0; i < *subWarm+*subJobs; i++ {
			t0 := time.Now()
			if _, err := submitTo(hc, big.base+"/v1/bulk-lookup", key, sb); err != nil {
				return err
			}
			if i >= *subWarm {
				lat = append(lat, time.Since(t0))
			}
		}
		fmt.Printf("submission of %d rows (%.2f MB) to POST /v1/bulk-lookup: p50 %s, p90 %s, min %s, max %s over %d (after %d unmeasured); API peak RSS %s\n",
			len(sub), float64(len(sb))/1e6, pct(lat, 0.5), pct(lat, 0.9), pct(lat, 0), pct(lat, 1), len(lat), *subWarm, big.peakRSS())
	}
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
	keys := make([]string, 0, len(subs))
	for k := range subs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return subs[keys[i]] > subs[keys[j]] })
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, subs[k]))
	}
	fmt.Printf("  answers: %s\n", strings.Join(parts, ", "))
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
