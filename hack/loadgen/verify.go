package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/mailworld"
)

// verifyMain measures bulk email verification end to end: the real bulkd
// binary against the mail world's benchmark scenario (authoritative DNS and
// SMTP hosts on loopback with a round-trip delay per reply and a cap of
// sessions per MX host), then the submission of a 100,000-address job.
//
//	go run ./hack/loadgen verify --bin bin/bulkd [--rtt 50ms] [--cap 3]
func verifyMain(args []string) error {
	fs := flag.NewFlagSet("verify", flag.ExitOnError)
	bin := fs.String("bin", "bin/bulkd", "bulkd binary")
	rtt := fs.Duration("rtt", 50*time.Millisecond, "delay before every SMTP reply of the mail world")
	capHost := fs.Int("cap", 3, "sessions per MX host: the mail world's limit and bulkd's --smtp-sessions-per-host")
	domains := fs.Int("domains", 200, "domains of the mail world")
	perDomain := fs.Int("per-domain", 10, "addresses per domain")
	rounds := fs.Int("rounds", 2, "verification jobs of the same addresses (the first with cold caches)")
	bigRows := fs.Int("big", 100_000, "addresses of the large submissions (0 to skip)")
	bigJobs := fs.Int("big-jobs", 5, "large submissions measured")
	workers := fs.Int("workers", 0, "bulkd --workers (0: bulkd's default)")
	drops := fs.Int("drops", 0, "domains whose MX drops the session after K RCPTs (K = 1..3; mailworld.Harden)")
	blocked := fs.Int("blocked", 0, "domains on a server that blocks the client (DNSBL reply; truth unknown/blocked)")
	shared := fs.Int("shared", 0, "domains with an MX name of their own on a few shared servers (many names, one server address)")
	retryDelays := fs.String("retry-delays", "3s,3s", "bulkd --verify-retry-delays")
	extra := fs.String("bulkd-flags", "", "more bulkd serve flags, space separated")
	target := fs.Float64("target", 0, "first-pass addresses/s to report as met or not (0: none)")
	_ = fs.Parse(args)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	spec := mailworld.Bench(mailworld.BenchOptions{Domains: *domains, PerDomain: *perDomain, RTT: *rtt, MaxConnsPerHost: *capHost, Seed: 1})
	spec, hy := mailworld.Harden(spec, mailworld.HardenOptions{DropDomains: *drops, BlockDomains: *blocked, SharedDomains: *shared, Seed: 1})
	for i := range spec.Hosts {
		// Every server counts (and caps) sessions the same way, the
		// hostile ones too.
		spec.Hosts[i].MaxConns = *capHost
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
	key, err := paygKey(ctx, st, "load", credits.Whole(1_000_000))
	if err != nil {
		return err
	}
	flags := []string{"--dns-server", w.DNSAddr(), "--smtp-port", strconv.Itoa(w.SMTPPort()), "--outbound-allow-cidrs", mailworld.AllowCIDRs,
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

	var emails []string
	for _, c := range w.Cases() {
		emails = append(emails, c.Email)
	}
	body, _ := json.Marshal(map[string]any{"emails": emails})
	fmt.Printf("verify: %d addresses over %d domains (%d with drops after K RCPTs, %d on a blocking server, %d behind MX names of shared servers), %d servers, SMTP round trip %v, %d sessions per server\n",
		len(emails), *domains, len(hy.Drops), len(hy.Blocks), len(hy.Shared), len(spec.Hosts), *rtt, *capHost)
	fmt.Printf("bulkd serve %s\n", strings.Join(flags, " "))
	v := &verifyRun{w: w, b: b, hc: hc, key: key, body: body, n: float64(len(emails)), hy: hy, capHost: *capHost, target: *target}
	for round := 1; round <= *rounds; round++ {
		if err := v.round(round); err != nil {
			return err
		}
	}
	b.stop()

	if *bigRows > 0 {
		return bigSubmissions(*bin, srv.URL, *workers, *bigRows, *bigJobs, hc, key)
	}
	return nil
}

// verifyRun is one verifyMain's world, bulkd and addresses.
type verifyRun struct {
	w       *mailworld.World
	b       *bulkd
	hc      *http.Client
	key     string
	body    []byte
	n       float64 // addresses
	hy      mailworld.Hostility
	capHost int
	target  float64
}

// round runs one verification job of every address and reports it.
func (v *verifyRun) round(round int) error {
	w, b, n := v.w, v.b, v.n
	w.ResetStats()
	t0 := time.Now()
	id, err := submitTo(v.hc, b.base+"/v1/bulk", v.key, v.body)
	if err != nil {
		return err
	}
	first, err := waitStatus(v.hc, b.base+"/v1/bulk/"+id, v.key, 120*time.Second, "partial_complete_retrying", "complete")
	if err != nil {
		return err
	}
	firstPass := time.Since(t0)
	s := w.Stats()
	if _, err := waitStatus(v.hc, b.base+"/v1/bulk/"+id, v.key, 120*time.Second, "complete"); err != nil {
		return err
	}
	all := time.Since(t0)
	final := w.Stats()
	rows, err := verifyRows(v.hc, b.base, v.key, id)
	if err != nil {
		return err
	}
	t, err := tallyVerify(rows, w, v.hy)
	if err != nil {
		return err
	}
	label := "cold caches"
	if round > 1 {
		label = "warm caches"
	}
	fmt.Printf("round %d (%s): first pass %s = %.0f addresses/s (status %s); all final after %s (%d addresses retried after greylisting)\n",
		round, label, firstPass.Round(time.Millisecond), n/firstPass.Seconds(), first, all.Round(time.Millisecond), t.greyFirst)
	fmt.Printf("  first pass: %d SMTP sessions (%.3f per address), %d RCPTs (%.3f per address), 421 answers %d, 452 answers %d, most sessions on one server %d (cap %d; servers over it %d), drops %d, blocks %d\n",
		s.Sessions, float64(s.Sessions)/n, s.Rcpts, float64(s.Rcpts)/n, s.Rejected421, s.Replies452, maxConcurrent(s), v.capHost, overCap(s, v.capHost), dropCount(s), blockCount(s))
	if v.target > 0 && round == 1 {
		verdict := "met"
		if n/firstPass.Seconds() < v.target {
			verdict = "NOT met"
		}
		fmt.Printf("  target %.0f addresses/s in the first pass (cold): %s\n", v.target, verdict)
	}
	fmt.Printf("  whole job:  %d sessions, %d RCPTs, 421 answers %d; accuracy %d/%d knowable (%.1f%%), false deliverable %d\n",
		final.Sessions, final.Rcpts, final.Rejected421, t.right, t.knowable, 100*float64(t.right)/float64(max(t.knowable, 1)), t.falseDeliverable)
	if t.dropN+t.blockN > 0 {
		fmt.Printf("  drop servers: %d/%d right; blocking server: %d/%d unknown/blocked; most sessions on one server over the job %d (servers over the cap %d)\n",
			t.dropRight, t.dropN, t.blockRight, t.blockN, maxConcurrent(final), overCap(final, v.capHost))
	}
	return nil
}

// verifyTally counts a verification job's rows against the world's truth.
type verifyTally struct {
	knowable, right, falseDeliverable, greyFirst int
	dropN, dropRight, blockN, blockRight         int
}

func tallyVerify(rows []vrow, w *mailworld.World, hy mailworld.Hostility) (verifyTally, error) {
	var t verifyTally
	for _, r := range rows {
		c, ok := w.Expect(r.Input)
		if !ok {
			return t, fmt.Errorf("row %q not in the world", r.Input)
		}
		if r.Status == "deliverable" && c.Status != "deliverable" {
			t.falseDeliverable++
		}
		if r.Attempts > 1 {
			t.greyFirst++
		}
		right := r.Status == c.Status && r.Reason == c.Reason
		if c.Knowable {
			t.knowable++
			if right {
				t.right++
			}
		}
		dom := r.Input[strings.LastIndexByte(r.Input, '@')+1:]
		if _, ok := hy.Drops[dom]; ok {
			t.dropN++
			if right {
				t.dropRight++
			}
		}
		if hy.Blocks[dom] {
			t.blockN++
			if right {
				t.blockRight++
			}
		}
	}
	return t, nil
}

// bigSubmissions measures submissions of a large job. Processing is parked
// on a DNS server that never answers (a bound UDP socket nobody reads), so
// the numbers are the submission path's, not the verifier's.
func bigSubmissions(bin, redisURL string, workers, bigRows, bigJobs int, hc *http.Client, key string) error {
	dead, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer dead.Close()
	bigFlags := []string{"--dns-server", dead.LocalAddr().String()}
	if workers > 0 {
		bigFlags = append(bigFlags, "--workers", strconv.Itoa(workers))
	}
	big, err := startBulkd(bin, redisURL, bigFlags...)
	if err != nil {
		return err
	}
	defer big.stop()
	var buf bytes.Buffer
	buf.WriteString(`{"emails":[`)
	for i := 0; i < bigRows; i++ {
		if i > 0 {
			buf.WriteByte(',')
		}
		fmt.Fprintf(&buf, `"user.%d@company-%d.example"`, i, i%5000)
	}
	buf.WriteString("]}")
	var lat []time.Duration
	for i := 0; i < bigJobs; i++ {
		t0 := time.Now()
		if _, err := submitTo(hc, big.base+"/v1/bulk", key, buf.Bytes()); err != nil {
			return err
		}
		lat = append(lat, time.Since(t0))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	fmt.Printf("submission of %d addresses (%.1f MB): p50 %s, max %s over %d; API peak RSS %s\n", bigRows, float64(buf.Len())/1e6,
		pct(lat, 0.5).Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond), len(lat), big.peakRSS())
	return nil
}

// overCap counts the servers that saw more concurrent sessions than cap.
func overCap(s mailworld.Stats, cap int) int {
	n := 0
	for _, v := range s.MaxConcurrent {
		if v > cap {
			n++
		}
	}
	return n
}

func dropCount(s mailworld.Stats) (n int64) {
	for _, h := range s.PerHost {
		n += h.Drops
	}
	return n
}

func blockCount(s mailworld.Stats) (n int64) {
	for _, h := range s.PerHost {
		n += h.Blocks
	}
	return n
}

func maxConcurrent(s mailworld.Stats) int {
	m := 0
	for _, v := range s.MaxConcurrent {
		m = max(m, v)
	}
	return m
}

func submitTo(hc *http.Client, url, key string, body []byte) (string, error) {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	res, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		return "", fmt.Errorf("submit: %d %.300s", res.StatusCode, raw)
	}
	var r struct {
		JobID string `json:"job_id"`
	}
	return r.JobID, json.Unmarshal(raw, &r)
}

// waitStatus polls a job until its status is one of want.
func waitStatus(hc *http.Client, url, key string, d time.Duration, want ...string) (string, error) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("X-API-Key", key)
		res, err := hc.Do(req)
		if err != nil {
			return "", err
		}
		var st struct {
			Status string `json:"status"`
		}
		_ = json.NewDecoder(res.Body).Decode(&st)
		res.Body.Close()
		for _, w := range want {
			if st.Status == w {
				return st.Status, nil
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return "", fmt.Errorf("%s: not %v within %s", url, want, d)
}

type vrow struct {
	Input    string `json:"input"`
	Status   string `json:"status"`
	Reason   string `json:"reason"`
	Attempts int    `json:"attempts"`
}

func verifyRows(hc *http.Client, base, key, id string) ([]vrow, error) {
	var all []vrow
	for off := 0; ; off += 500 {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/v1/bulk/%s/results?limit=500&offset=%d", base, id, off), nil)
		req.Header.Set("X-API-Key", key)
		res, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		var page struct {
			TotalRows int    `json:"total_rows"`
			Results   []vrow `json:"results"`
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
