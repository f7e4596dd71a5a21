package companyapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/company"
	"github.com/bulkd/bulkd/internal/jobs"
)

// Companies is the company data both suites load: four named companies
// (one on moved.example, whose site redirects to newhome.example) and
// co-00, co-02, … co-58 with websites site-NN.example; odd co-NN do not
// exist.
func Companies() []company.Record {
	recs := []company.Record{
		{Name: new("Northwind Traders"), NetworkURL: new("https://www.linkedin.com/company/northwind-traders"),
			Website: new("https://www.northwind.example"), Domain: new("northwind.example"), Industry: new("Wholesale")},
		{Name: new("Contoso"), NetworkURL: new("https://www.linkedin.com/company/contoso"), Website: new("https://contoso.example")},
		{Name: new("New Home"), NetworkURL: new("https://www.linkedin.com/company/newhome"), Website: new("https://www.newhome.example")},
		{Name: new("Moved Co"), NetworkURL: new("https://www.linkedin.com/company/moved-co"), Website: new("https://moved.example")},
	}
	for i := 0; i < 60; i += 2 {
		recs = append(recs, company.Record{Name: new(fmt.Sprintf("Company %02d", i)),
			NetworkURL: new(fmt.Sprintf("https://www.linkedin.com/company/co-%02d", i)),
			Website:    new(fmt.Sprintf("https://site-%02d.example", i))})
	}
	return recs
}

// Site is a row submitted by the website domain of test company n.
func Site(n int) Row { return Domain(fmt.Sprintf("site-%02d.example", n)) }

// ScenarioRows is a submission with every kind of row: found by URL and by
// domain, a repeat written differently, not found, a person URL (invalid),
// a redirecting domain, a blank domain, and twenty numbered companies.
func ScenarioRows() []Row {
	rows := []Row{
		NetworkURL("linkedin.com/company/northwind-traders/about"),
		NetworkURL("https://www.linkedin.com/company/northwind-traders"), // repeat
		Domain("northwind.example"),
		Domain("nobody.example"),
		NetworkURL("https://www.linkedin.com/in/someone"), // a person: invalid
		Domain("moved.example"),                           // redirects to newhome.example
	}
	for i := 0; i < 20; i++ {
		rows = append(rows, Company(i))
	}
	return append(rows, Site(0), Site(1), Domain(""), Company(3))
}

// SameResults fails unless got equals want row by row.
func SameResults(t testing.TB, got, want []map[string]any) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d result rows, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			g, _ := json.Marshal(got[i])
			w, _ := json.Marshal(want[i])
			t.Fatalf("row %d differs from standalone mode:\n got %s\nwant %s", i, g, w)
		}
	}
}

// ExactlyOnce checks a finished job's counters in Redis: every row answered
// once, every distinct input once, per-outcome counts adding up, and the
// status answer agreeing.
func ExactlyOnce(t testing.TB, st *jobs.Store, rdb redis.UniversalClient, jobID string, status JobStatus) {
	t.Helper()
	ctx := context.Background()
	j, err := st.Get(ctx, jobID)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, n := range j.Outcomes {
		sum += n
	}
	answers, err := rdb.HLen(ctx, "bulkd:job:{"+jobID+"}:ans").Result()
	if err != nil {
		t.Fatal(err)
	}
	if j.RowsProcessed != j.TotalRows || j.DistinctProcessed != j.Distinct || answers != j.Distinct ||
		sum+j.TotalInvalid != j.TotalRows || j.ShardsDone != int64(j.Shards) || j.Status != "completed" {
		t.Fatalf("not exactly once: %+v (answers %d)", j, answers)
	}
	if status.TotalProcessed != j.TotalRows {
		t.Fatalf("status %+v", status)
	}
}

// Web is a forward proxy standing for every website: the redirect checks of
// domain rows reach it through BULKD_HTTP_PROXY. Sites answer 200,
// moved.example redirects, and a site can be told to hang its first request
// until the request is abandoned (its process killed).
type Web struct {
	mu        sync.Mutex
	redirects map[string]string
	hang      map[string]bool // host -> already hung once
	// Hits receives each host whose first request is hanging.
	Hits chan string
}

// NewWeb returns the stand-in; serve it with httptest or http.Server.
func NewWeb() *Web {
	return &Web{redirects: map[string]string{"moved.example": "http://www.newhome.example/"},
		hang: map[string]bool{}, Hits: make(chan string, 16)}
}

// HangOnce makes host's first request hang; it shows up on Hits.
func (w *Web) HangOnce(host string) {
	w.mu.Lock()
	w.hang[host] = false
	w.mu.Unlock()
}

// WaitHang waits up to d for host's first request to be hanging.
func (w *Web) WaitHang(t testing.TB, host string, d time.Duration) {
	t.Helper()
	select {
	case got := <-w.Hits:
		if got != host {
			t.Fatalf("hang on %s, want %s", got, host)
		}
	case <-time.After(d):
		t.Fatalf("no request to the hanging website %s within %v", host, d)
	}
}

// ServeHTTP answers absolute-form proxy requests.
func (w *Web) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect || !r.URL.IsAbs() {
		http.Error(rw, "no TLS sites here", http.StatusBadGateway)
		return
	}
	host := r.URL.Hostname()
	w.mu.Lock()
	hung, isHang := w.hang[host]
	if isHang && !hung {
		w.hang[host] = true
	}
	loc := w.redirects[host]
	w.mu.Unlock()
	if isHang && !hung {
		w.Hits <- host
		<-r.Context().Done() // until the client goes away
		return
	}
	if loc != "" {
		rw.Header().Set("Location", loc)
		rw.WriteHeader(http.StatusMovedPermanently)
		return
	}
	rw.Header().Set("Content-Type", "text/html")
	fmt.Fprint(rw, "<p>hello</p>")
}

// HangRows are 30 distinct inputs whose input 15 is Domain(host): with a
// website stand-in whose check of host hangs, a processor answering batches
// of 5 records inputs up to 14 of that batch's shard and then blocks (how
// the shards fall is the suite's layout).
func HangRows(host string) []Row {
	var rows []Row
	for i := 20; i < 35; i++ {
		rows = append(rows, Company(i))
	}
	rows = append(rows, Domain(host))
	for i := 35; i < 49; i++ {
		rows = append(rows, Company(i))
	}
	return rows
}
