package dashboard_test

// The dashboard within the API's budgets (issue 26, item 1): a draft's
// rows are counted while it is parsed, and the review and the submit
// stream through the API's decoding admission instead of building every
// row and the whole JSON body first.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/dashboard"
)

// emailRows is a CSV of n email rows (after a header) of about width
// bytes each (at least 14), every one distinct and well formed: the
// domain is labels of at most 60 characters.
func emailRows(n, width int) string {
	var b strings.Builder
	b.Grow(n * (width + 1))
	b.WriteString("email\n")
	var dom strings.Builder
	for left := width - 18; left > 0; left -= 61 {
		dom.WriteString(strings.Repeat("x", min(left, 60)))
		dom.WriteByte('.')
	}
	for i := range n {
		fmt.Fprintf(&b, "%d@%sexample\n", i, dom.String())
	}
	return b.String()
}

// plantDraft stores a draft as the upload step does, without its checks:
// one a user uploaded before the row count was checked at upload (drafts
// live 2 hours), or one that got past it.
func plantDraft(t *testing.T, e *bulkdtest.Env, acct, data string) string {
	t.Helper()
	id := fmt.Sprintf("planted%017d", time.Now().UnixNano()%1e17)
	k := "bulkd:acct:{" + acct + "}:dashdraft:" + id
	if err := e.Redis.HSet(context.Background(), k, "family", "email_verification", "pay", "credits", "name", "big.csv", "data", data).Err(); err != nil {
		t.Fatal(err)
	}
	e.Redis.Expire(context.Background(), k, time.Hour)
	return id
}

// An upload of 1,000,000 rows is refused while it is parsed: nothing is
// stored, and the page says the limit.
func TestMillionRowUploadRefused(t *testing.T) {
	e, d := start(t, bulkdtest.NoWorkers())
	b, acct, _ := signedIn(t, e, d, 100*credits.Scale)
	big := emailRows(1_000_000, 0) // 13 MB
	start := time.Now()
	st, body := b.upload(big)
	if st != http.StatusUnprocessableEntity || !strings.Contains(body, "more than 100,000 rows") {
		t.Fatalf("1,000,000-row upload: %d\n%.2000s", st, body)
	}
	t.Logf("1,000,000-row upload (%d bytes) refused in %v", len(big), time.Since(start))
	if n := len(keysOf(t, e, "bulkd:acct:{"+acct+"}:dashdraft:*")); n != 0 {
		t.Fatalf("%d drafts stored", n)
	}
	// The limit itself, with a header row, is taken.
	if st, body := b.upload(emailRows(100_000, 0)); st != http.StatusOK {
		t.Fatalf("100,000-row upload: %d\n%.2000s", st, body)
	}
}

// The review of a 1,000,000-row draft stops reading at the family's row
// limit: the API's answer (400, the verification family's), in under a second, without building the
// rows (before: every row and the whole body were built first).
func TestMillionRowDraftReviewAnswersFast(t *testing.T) {
	e, d := start(t, bulkdtest.NoWorkers())
	b, acct, _ := signedIn(t, e, d, 100*credits.Scale)
	id := plantDraft(t, e, acct, emailRows(1_000_000, 0))
	_, page := b.get(dashboard.Base + "/jobs/new/" + id)
	// The server runs in this process: its CPU time is the review's cost
	// whatever else the machine runs (on a shared, loaded machine the wall
	// time is several times that; it is logged, and bounded loosely).
	cpu0, start := cpuTime(), time.Now()
	st, body := b.post(dashboard.Base+"/jobs/new/"+id, url.Values{"csrf_token": {csrf(t, page)}, "has_header": {"1"}, "map_email": {"0"}})
	took, cpu := time.Since(start), cpuTime()-cpu0
	if st != http.StatusBadRequest || !strings.Contains(body, "at most 100000") {
		t.Fatalf("review of a 1,000,000-row draft: %d\n%.2000s", st, body)
	}
	t.Logf("review of a 1,000,000-row draft: %d in %v, %v of CPU", st, took, cpu)
	if cpu > time.Second || took > 10*time.Second {
		t.Fatalf("review of a 1,000,000-row draft answered after %v, %v of CPU", took, cpu)
	}
	// Its confirm is refused the same way and charges nothing.
	st, _ = b.post(dashboard.Base+"/jobs/new/"+id+"/confirm", url.Values{"csrf_token": {csrf(t, page)}})
	if st != http.StatusBadRequest {
		t.Fatalf("confirm of a 1,000,000-row draft: %d", st)
	}
	if bal := e.Balance(acct); bal != 100*credits.Scale {
		t.Fatalf("balance %v after a refused confirm", bal)
	}
}

// The memory test's child: a standalone bulkd with the dashboard, under
// the GOMEMLIMIT its parent gives it, until its stdin closes.
func TestDashboardMemoryChild(t *testing.T) {
	if os.Getenv("BULKD_DASHBOARD_MEMORY_CHILD") != "1" {
		t.Skip("run by TestEightReviewsOfTheLargestDraftStayInTheRequest")
	}
	e, d := start(t, bulkdtest.NoWorkers(), bulkdtest.WithConfig(func(c *config.Config) { c.RateLimit = 1_000_000 }))
	_, email, _ := user(t, e, d, 1_000_000*credits.Scale)
	fmt.Printf("CHILD %s %s\n", e.URL, email)
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// TestEightReviewsOfTheLargestDraftStayInTheRequest is the repro
// with the largest draft the limits allow (100,000 distinct addresses,
// 16 MB, each byte mapped into the body): 8 reviews at once of a bulkd
// running in its own process under the chart's Go memory limit (90% of
// the API pod's 768 MiB). The process's peak RSS during the reviews must
// stay under the API pod's memory request.
func TestEightReviewsOfTheLargestDraftStayInTheRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("uploads 16 MB and runs 8 reviews of it in a child bulkd")
	}
	if raceEnabled {
		t.Skip("the race detector multiplies memory: RSS says nothing under it")
	}
	limit, request := chartAPIMemory(t)
	goMemLimit := limit / 10 * 9
	cmd := exec.Command(os.Args[0], "-test.run=^TestDashboardMemoryChild$", "-test.v")
	cmd.Env = append(os.Environ(), "BULKD_DASHBOARD_MEMORY_CHILD=1", "GOMEMLIMIT="+strconv.FormatInt(goMemLimit, 10))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	sc := bufio.NewScanner(stdout)
	var base, email string
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "CHILD" {
			base, email = f[1], f[2]
			break
		}
	}
	if base == "" {
		t.Fatal("the child bulkd did not start")
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()

	jar := &bulkdtest.Env{URL: base}
	b := newBrowser(t, jar)
	if st, body := b.signIn(email, "correct horse battery"); st != http.StatusOK {
		t.Fatalf("sign in: %d\n%.1000s", st, body)
	}
	csvText := emailRows(100_000, 166)
	if int64(len(csvText)) > 16<<20 {
		t.Fatalf("draft of %d bytes is over the upload limit", len(csvText))
	}
	st, page := b.upload(csvText)
	m := regexp.MustCompile(`/jobs/new/([A-Za-z0-9_-]{20,64})`).FindStringSubmatch(b.last.Request.URL.Path)
	if st != http.StatusOK || m == nil {
		t.Fatalf("upload: %d\n%.1000s", st, page)
	}
	draft, token := m[1], csrf(t, page)

	pid := cmd.Process.Pid
	before := procStatus(t, pid, "VmRSS")
	// The peak from here on: the upload's own copies are not the reviews'.
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Logf("cannot reset the peak RSS (%v); sampling it", err)
	}
	var mu sync.Mutex
	sampled := int64(0)
	stop := make(chan struct{})
	sampler := make(chan struct{})
	go func() {
		defer close(sampler)
		for {
			if v := procStatusOK(pid, "VmRSS"); v > 0 {
				mu.Lock()
				sampled = max(sampled, v)
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	statuses := make([]int, 8)
	var wg sync.WaitGroup
	started := time.Now()
	for i := range statuses {
		wg.Go(func() {
			b := &browser{t: b.t, base: b.base, c: b.c, origin: b.origin} // its cookies
			st, body := b.post(dashboard.Base+"/jobs/new/"+draft, url.Values{"csrf_token": {token}, "has_header": {"1"}, "map_email": {"0"}})
			statuses[i] = st
			if st != http.StatusOK && st != http.StatusTooManyRequests {
				t.Errorf("review %d: %d\n%.1000s", i, st, body)
			}
		})
	}
	wg.Wait()
	close(stop)
	<-sampler
	took := time.Since(started)
	peak := max(procStatus(t, pid, "VmHWM"), sampled)
	t.Logf("8 reviews of a %d-byte, 100,000-row draft in %v: statuses %v; RSS before %d MiB, peak %d MiB (sampled %d MiB); GOMEMLIMIT %d MiB, pod request %d MiB",
		len(csvText), took.Round(time.Millisecond), statuses, before>>20, peak>>20, sampled>>20, goMemLimit>>20, request>>20)
	if peak >= request {
		t.Fatalf("peak RSS %d MiB during the reviews, over the API pod's request of %d MiB", peak>>20, request>>20)
	}
	ok := 0
	for _, st := range statuses {
		if st == http.StatusOK {
			ok++
		}
	}
	if ok == 0 {
		t.Fatal("no review was answered")
	}
}

// chartAPIMemory is the chart's apiserver memory limit and request.
func chartAPIMemory(t *testing.T) (limit, request int64) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "charts", "bulkd", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		APIServer struct {
			Resources struct {
				Requests struct{ Memory string } `json:"requests"`
				Limits   struct{ Memory string } `json:"limits"`
			} `json:"resources"`
		} `json:"apiserver"`
	}
	if err := yaml.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	l := resource.MustParse(v.APIServer.Resources.Limits.Memory)
	r := resource.MustParse(v.APIServer.Resources.Requests.Memory)
	return l.Value(), r.Value()
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procStatus reads a size field (kB) of /proc/PID/status, in bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	v := procStatusOK(pid, field)
	if v <= 0 {
		t.Fatalf("no %s for process %d", field, pid)
	}
	return v
}

func procStatusOK(pid int, field string) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
