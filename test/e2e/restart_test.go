package e2e

// Kill-and-restart: the real `bulkd serve` binary is SIGKILLed in the middle
// of a company job and started again on the same Redis. The job must finish
// with every row answered exactly once, results consistent with the data,
// and the account charged exactly once (SPEC 2.5 rule 6: nothing is
// refunded after the job is accepted).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/company"
	"github.com/bulkd/bulkd/internal/company/normalize"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/bulkd/bulkd/test/companyapi"
)

// TestRestart kills `bulkd serve` mid-job and starts it again.
//
// same_instance restarts it as a supervisor would: same host, same flags.
// It takes back the shards its previous life held at once.
//
// other_instance starts the replacement on another address (a new instance
// elsewhere): the shards the dead process held are taken over once their
// leases expire and a resume pass runs (30 s each by default; faster when
// the binary has a --lease-ttl flag).
func TestRestart(t *testing.T) {
	bin := restartBuild(t)
	t.Run("same_instance", func(t *testing.T) { restartRun(t, bin, true) })
	t.Run("other_instance", func(t *testing.T) {
		if testing.Short() {
			t.Skip("waits for the dead instance's shard leases to expire")
		}
		restartRun(t, bin, false)
	})
}

// restartLeaseFlags shortens shard leases when the binary can.
func restartLeaseFlags(bin string) []string {
	out, _ := exec.Command(bin, "serve", "-h").CombinedOutput()
	if strings.Contains(string(out), "-lease-ttl") {
		return []string{"--lease-ttl", "2s"}
	}
	return nil
}

const (
	restartProxyDelay       = 30 * time.Millisecond // per website request
	restartProxyConcurrency = 2                     // requests the slow upstream serves at once
	restartDomains          = 240
	restartNetworkRows      = 10
)

// restartBuild builds cmd/bulkd from the module root.
func restartBuild(t *testing.T) string {
	t.Helper()
	root := "../.."
	if out, err := exec.Command("go", "env", "GOMOD").Output(); err == nil {
		if mod := strings.TrimSpace(string(out)); mod != "" && mod != os.DevNull {
			root = filepath.Dir(mod)
		}
	}
	bin := filepath.Join(t.TempDir(), "bulkd")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/bulkd")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/bulkd: %v\n%s", err, out)
	}
	return bin
}

// restartProxy stands in for the internet: every website answers after a
// delay, at most restartProxyConcurrency at a time, so a job of a few
// hundred domains takes seconds. moved-N.example redirects to
// elsewhere-N.example.
type restartProxy struct {
	sem  chan struct{}
	mu   sync.Mutex
	hits map[string][]time.Time
}

func (p *restartProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host := r.URL.Hostname()
	if host == "" {
		host, _, _ = strings.Cut(r.Host, ":")
	}
	p.mu.Lock()
	p.hits[host] = append(p.hits[host], time.Now())
	p.mu.Unlock()
	if r.Method == http.MethodConnect {
		http.Error(w, "no TLS here", http.StatusBadGateway)
		return
	}
	select {
	case p.sem <- struct{}{}:
	case <-r.Context().Done():
		return
	}
	time.Sleep(restartProxyDelay)
	<-p.sem
	if rest, ok := strings.CutPrefix(host, "moved-"); ok {
		w.Header().Set("Location", "http://elsewhere-"+rest+"/")
		w.WriteHeader(http.StatusMovedPermanently)
		return
	}
	_, _ = io.WriteString(w, "<html><body>welcome</body></html>")
}

// hitsSince lists the hosts requested at or after t0.
func (p *restartProxy) hitsSince(t0 time.Time) map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for h, ts := range p.hits {
		for _, ti := range ts {
			if !ti.Before(t0) {
				out[h]++
			}
		}
	}
	return out
}

type restartBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *restartBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *restartBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type restartProc struct {
	cmd  *exec.Cmd
	url  string
	logs *restartBuffer
	done chan struct{}
}

// restartServe starts `bulkd serve` and waits until it answers HTTP.
func restartServe(t *testing.T, bin, listen string, args ...string) *restartProc {
	t.Helper()
	all := append([]string{"serve", "--listen", listen}, args...)
	// No metrics listener when the binary has one: its default address
	// would be shared by every bulkd the suites start at once.
	if out, _ := exec.Command(bin, "serve", "-h").CombinedOutput(); strings.Contains(string(out), "-metrics-listen") {
		all = append(all, "--metrics-listen", "0")
	}
	cmd := exec.Command(bin, all...)
	for _, kv := range os.Environ() { // only our flags configure it
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "BULKD_") && !strings.HasSuffix(strings.ToUpper(k), "_PROXY") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	p := &restartProc{cmd: cmd, url: "http://" + listen, logs: &restartBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("bulkd %s log (last 4 KB):\n%s", listen, restartTail(p.logs.String(), 4096))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-p.done:
			t.Fatalf("bulkd serve exited at start:\n%s", p.logs.String())
		default:
		}
		res, err := http.Get(p.url + "/v1/credits")
		if err == nil {
			res.Body.Close()
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("bulkd serve not answering on %s: %v\n%s", listen, err, p.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill SIGKILLs the process: no graceful shutdown, no lease released.
func (p *restartProc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
}

func restartTail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// restartAPI is the company API client on one bulkd process.
func restartAPI(t *testing.T, p *restartProc) companyapi.Client {
	return companyapi.Client{T: t, URL: p.url}
}

func restartGetStatus(t *testing.T, p *restartProc, key, id string) companyapi.JobStatus {
	t.Helper()
	code, st := restartAPI(t, p).Status(key, id)
	if code != http.StatusOK {
		t.Fatalf("status: %d", code)
	}
	return st
}

// restartResults pages through a job's results with limit.
func restartResults(t *testing.T, p *restartProc, key, id string, total, limit int) []map[string]any {
	t.Helper()
	var rows []map[string]any
	for off := 0; off < total; off += limit {
		code, b := restartAPI(t, p).Do(http.MethodGet, fmt.Sprintf("%s/%s/results?limit=%d&offset=%d", companyapi.BulkPath, id, limit, off), key, nil)
		if code != http.StatusOK {
			t.Fatalf("results at %d: %d %s", off, code, b)
		}
		var page struct {
			TotalRows int              `json:"total_rows"`
			Offset    int              `json:"offset"`
			Limit     int              `json:"limit"`
			Results   []map[string]any `json:"results"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			t.Fatalf("results page: %v", err)
		}
		if page.TotalRows != total || page.Offset != off || page.Limit != limit || len(page.Results) != min(limit, total-off) {
			t.Fatalf("page at %d: total %d offset %d limit %d, %d rows", off, page.TotalRows, page.Offset, page.Limit, len(page.Results))
		}
		rows = append(rows, page.Results...)
	}
	return rows
}

// restartRow is one submitted row and what its result must be.
type restartRow struct {
	body     map[string]any
	input    string
	key      string // normalized input; "" when invalid
	result   string // found, not_found or invalid_url
	credits  float64
	host     string // domain rows: the website checked
	redirect string // domain rows: where it redirects ("" = nowhere)
}

// restartWorkload builds the companies and the submission: restartDomains
// domains (a third unknown, every tenth redirecting elsewhere), some
// network URLs, repeats written differently, and invalid rows, shuffled.
func restartWorkload() ([]company.Record, []restartRow) {
	var recs []company.Record
	host := func(i int) string {
		if i%10 == 7 {
			return fmt.Sprintf("moved-%d.example", i)
		}
		return fmt.Sprintf("co-%d.example", i)
	}
	known := func(i int) bool { return i%3 != 0 }
	for i := 0; i < restartDomains; i++ {
		if !known(i) {
			continue
		}
		h := host(i)
		recs = append(recs, company.Record{
			Name:       new(fmt.Sprintf("Company %d", i)),
			NetworkURL: new(fmt.Sprintf("https://www.linkedin.com/company/co-%d", i)),
			Website:    new("https://www." + h), Domain: new(h),
		})
	}
	var rows []restartRow
	dom := func(i int, written string) restartRow {
		r := restartRow{body: map[string]any{"domain": written}, input: written, host: host(i), result: "not_found"}
		if known(i) {
			r.result = "found"
		}
		if i%10 == 7 {
			r.redirect = fmt.Sprintf("elsewhere-%d.example", i)
		}
		return r
	}
	for i := 0; i < restartDomains; i++ {
		h := host(i)
		rows = append(rows, dom(i, h))
		if i%4 == 1 {
			rows = append(rows, dom(i, "WWW."+strings.ToUpper(h)))
		}
		if i%8 == 3 {
			rows = append(rows, dom(i, "https://"+h+"/about"))
		}
	}
	for i := 0; i < restartNetworkRows; i++ {
		u := fmt.Sprintf("https://www.linkedin.com/company/co-%d", i)
		r := restartRow{body: map[string]any{"network_url": u}, input: u, result: "not_found"}
		if known(i) {
			r.result = "found"
		}
		rows = append(rows, r)
	}
	for i := 0; i < 15; i++ {
		var r restartRow
		switch i % 3 {
		case 0:
			r.body = map[string]any{"network_url": fmt.Sprintf("https://www.linkedin.com/in/person-%d", i)}
			r.input = r.body["network_url"].(string)
		case 1:
			r.body = map[string]any{"domain": "not a domain"}
			r.input = "not a domain"
		default:
			r.body = map[string]any{"domain": fmt.Sprintf("https://www.linkedin.com/company/co-%d", i)}
			r.input = r.body["domain"].(string)
		}
		r.result = "invalid_url"
		rows = append(rows, r)
	}
	rng := rand.New(rand.NewSource(7))
	rng.Shuffle(len(rows), func(a, b int) { rows[a], rows[b] = rows[b], rows[a] })
	norm := normalize.New(normalize.DefaultHosts)
	seen := map[string]bool{}
	for k := range rows {
		r := &rows[k]
		if r.result == "invalid_url" {
			continue
		}
		nu, _ := r.body["network_url"].(string)
		d, _ := r.body["domain"].(string)
		in, err := norm.Row(nu, d)
		if err != nil {
			panic(fmt.Sprintf("workload row %v: %v", r.body, err))
		}
		r.key = in.Key
		if !seen[r.key] {
			seen[r.key] = true
			r.credits = 1
		}
	}
	return recs, rows
}

// checkRow compares a final result row with what the workload implies.
func (r restartRow) check(t *testing.T, i int, got map[string]any) {
	t.Helper()
	bad := func(format string, args ...any) {
		t.Helper()
		t.Errorf("row %d (%q): "+format, append([]any{i, r.input}, args...)...)
	}
	if got["result"] != r.result {
		bad("result %v, want %s", got["result"], r.result)
	}
	if got["input"] != r.input {
		bad("input %v", got["input"])
	}
	if got["credits_consumed"] != r.credits {
		bad("credits_consumed %v, want %v", got["credits_consumed"], r.credits)
	}
	if r.host != "" {
		if r.redirect != "" && (got["is_redirect"] != true || got["redirected_to"] != r.redirect) {
			bad("is_redirect %v redirected_to %v, want %s", got["is_redirect"], got["redirected_to"], r.redirect)
		}
		if r.redirect == "" && (got["is_redirect"] != false || got["redirected_to"] != nil) {
			bad("is_redirect %v redirected_to %v, want no redirect", got["is_redirect"], got["redirected_to"])
		}
		if r.result == "found" && got["domain"] != r.host {
			bad("domain %v, want %s", got["domain"], r.host)
		}
	}
	if r.result == "found" && !strings.HasPrefix(fmt.Sprint(got["name"]), "Company ") {
		bad("name %v", got["name"])
	}
	if r.result != "found" && got["name"] != nil {
		bad("name %v on a %s row", got["name"], r.result)
	}
}

func restartRun(t *testing.T, bin string, sameInstance bool) {
	srv, err := testredis.StartProcess(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()

	recs, rows := restartWorkload()
	var jl bytes.Buffer
	for _, r := range recs {
		b, _ := json.Marshal(r)
		jl.Write(b)
		jl.WriteByte('\n')
	}
	if _, err := company.Import(ctx, &jl, company.Format("jsonl"), company.NewStore(rdb, "bulkd:"), normalize.New(normalize.DefaultHosts), nil); err != nil {
		t.Fatal(err)
	}
	as := accounts.NewStore(rdb, nil)
	opening := credits.Whole(10_000)
	acct, err := as.CreateAccount(ctx, "restart test", opening)
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := as.CreateKey(ctx, acct.ID, accounts.PayAsYouGo)
	if err != nil {
		t.Fatal(err)
	}

	proxy := &restartProxy{sem: make(chan struct{}, restartProxyConcurrency), hits: map[string][]time.Time{}}
	ps := httptest.NewServer(proxy)
	t.Cleanup(ps.Close)

	flags := []string{"--redis-url", srv.URL, "--shard-size", "20", "--workers", "2", "--redirect-checks=true",
		"--http-proxy", ps.URL, "--log-format", "text", "--rate-limit", "1000"}
	if !sameInstance {
		flags = append(flags, restartLeaseFlags(bin)...)
	}
	listen := bulkdtest.FreeAddr(t)
	p1 := restartServe(t, bin, listen, flags...)

	body := map[string]any{"input": func() []map[string]any {
		out := make([]map[string]any, len(rows))
		for i, r := range rows {
			out[i] = r.body
		}
		return out
	}()}
	code, b := restartAPI(t, p1).Do(http.MethodPost, companyapi.BulkPath, key, body)
	if code != http.StatusOK {
		t.Fatalf("submit: %d %s", code, b)
	}
	var sub companyapi.Submitted
	if err := json.Unmarshal(b, &sub); err != nil {
		t.Fatal(err)
	}
	var distinct, invalid int
	for _, r := range rows {
		if r.credits == 1 {
			distinct++
		}
		if r.result == "invalid_url" {
			invalid++
		}
	}
	if sub.TotalRows != int64(len(rows)) || sub.TotalInvalid != int64(invalid) || sub.CreditsConsumed != float64(distinct) {
		t.Fatalf("submission %s; want %d rows, %d invalid, %d credits", b, len(rows), invalid, distinct)
	}
	afterCharge := opening - credits.Whole(int64(distinct))
	t0 := time.Now()

	// Wait until a good part, but not all, of the valid rows are answered.
	valid := int64(len(rows) - invalid)
	for {
		st := restartGetStatus(t, p1, key, sub.JobID)
		done := st.TotalProcessed - st.TotalInvalid
		if st.Status == "completed" {
			t.Fatalf("job completed in %v before it could be killed: make the proxy slower", time.Since(t0))
		}
		if done >= valid/5 {
			break
		}
		if time.Since(t0) > 60*time.Second {
			t.Fatalf("no progress: %+v", st)
		}
		time.Sleep(30 * time.Millisecond)
	}
	// Snapshot what is answered, then kill at once: everything answered in
	// the snapshot was recorded before the kill.
	snapshot := restartResults(t, p1, key, sub.JobID, len(rows), 500)
	p1.kill(t)
	killedAt := time.Now()
	meta := rdb.HGetAll(ctx, "bulkd:job:{"+sub.JobID+"}").Val()
	leases := rdb.Keys(ctx, "bulkd:job:{"+sub.JobID+"}:lease:*").Val()
	answeredBefore := map[int]bool{}
	for i, r := range snapshot {
		if r["result"] != "pending" {
			answeredBefore[i] = true
		}
	}
	t.Logf("killed after %v: rows %s/%s, distinct %s/%s, shards %s/%s done, %d leases held, %d rows in the snapshot answered",
		killedAt.Sub(t0).Round(time.Millisecond), meta["rows_processed"], meta["total_rows"], meta["distinct_processed"],
		meta["distinct"], meta["shards_done"], meta["shards"], len(leases), len(answeredBefore))
	if meta["status"] != "running" || meta["distinct_processed"] == meta["distinct"] {
		t.Fatalf("job not mid-way at the kill: %v", meta)
	}
	if len(answeredBefore) <= invalid {
		t.Fatal("no valid row answered in the snapshot")
	}

	// Restart on the same Redis.
	listen2 := listen
	if !sameInstance {
		listen2 = bulkdtest.FreeAddr(t)
	}
	restartAt := time.Now()
	p2 := restartServe(t, bin, listen2, flags...)
	var st companyapi.JobStatus
	for {
		st = restartGetStatus(t, p2, key, sub.JobID)
		if st.Status == "completed" {
			break
		}
		if time.Since(restartAt) > 150*time.Second {
			t.Fatalf("job not completed %v after the restart: %+v", time.Since(restartAt), st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("completed %v after the restart", time.Since(restartAt).Round(time.Millisecond))

	// Every row answered exactly once.
	if st.TotalRows != int64(len(rows)) || st.TotalProcessed != st.TotalRows || st.TotalInvalid != int64(invalid) || st.TotalDistinct != int64(distinct) {
		t.Errorf("status %+v; want %d rows all processed, %d invalid, %d distinct", st, len(rows), invalid, distinct)
	}
	var sum int64
	for _, n := range st.Summary {
		sum += n
	}
	if sum != st.TotalRows || st.Summary["total_pending"] != 0 || st.Summary["total_error"] != 0 {
		t.Errorf("summary %v sums to %d, want %d rows, none pending or error", st.Summary, sum, st.TotalRows)
	}
	meta = rdb.HGetAll(ctx, "bulkd:job:{"+sub.JobID+"}").Val()
	if meta["distinct_processed"] != meta["distinct"] || meta["distinct"] != fmt.Sprint(distinct) ||
		meta["rows_processed"] != fmt.Sprint(len(rows)) || meta["shards_done"] != meta["shards"] {
		t.Errorf("job metadata %v", meta)
	}
	if n := rdb.HLen(ctx, "bulkd:job:{"+sub.JobID+"}:ans").Val(); n != int64(distinct) {
		t.Errorf("%d answers stored, want %d", n, distinct)
	}
	if rdb.SIsMember(ctx, "bulkd:jobs:active", sub.JobID).Val() {
		t.Error("completed job still active")
	}

	// Results are consistent page by page and with the data; what was
	// answered before the kill did not change.
	final := restartResults(t, p2, key, sub.JobID, len(rows), 50)
	if big := restartResults(t, p2, key, sub.JobID, len(rows), 500); !reflect.DeepEqual(big, final) {
		t.Error("pages of 500 and pages of 50 differ")
	}
	var creditSum float64
	byKey := map[string]map[string]any{}
	for i, r := range rows {
		got := final[i]
		r.check(t, i, got)
		creditSum += got["credits_consumed"].(float64)
		if answeredBefore[i] && !reflect.DeepEqual(snapshot[i], got) {
			t.Errorf("row %d changed across the restart:\n before %v\n after  %v", i, snapshot[i], got)
		}
		if r.key != "" { // repeats carry the first row's data
			data := map[string]any{}
			for k, v := range got {
				if k != "input" && k != "input_url" && k != "credits_consumed" {
					data[k] = v
				}
			}
			if prev, ok := byKey[r.key]; ok && !reflect.DeepEqual(prev, data) {
				t.Errorf("row %d: data differs from the first row of %s", i, r.key)
			}
			byKey[r.key] = data
		}
	}
	if creditSum != float64(distinct) {
		t.Errorf("credits over all rows %v, want %d", creditSum, distinct)
	}

	// Websites answered before the kill were not checked again.
	again := proxy.hitsSince(restartAt)
	var rechecked []string
	for i := range answeredBefore {
		if h := rows[i].host; h != "" && again[h] > 0 {
			rechecked = append(rechecked, h)
		}
	}
	if len(rechecked) > 0 {
		sort.Strings(rechecked)
		t.Errorf("websites of rows answered before the kill checked again: %v", rechecked)
	}

	// Charged exactly once, nothing refunded.
	bl := billing.New(rdb, nil)
	if bal, err := bl.Balance(ctx, acct.ID); err != nil || bal != afterCharge {
		t.Errorf("balance %s (%v), want %s: charged exactly once", bal, err, afterCharge)
	}
	es, err := bl.Entries(ctx, acct.ID, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || es[0].Kind != billing.KindCharge || es[0].JobID != sub.JobID || es[0].Amount != fmt.Sprint(-distinct) {
		t.Errorf("ledger %+v, want exactly one charge of %d for the job", es, distinct)
	}
	if n := rdb.ZCard(ctx, "bulkd:{jobs}:pending").Val(); n != 0 {
		t.Errorf("%d submission marks pending", n)
	}
}
