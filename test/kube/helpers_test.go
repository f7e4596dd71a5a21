package kube_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/company"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
)

const bulkPath = "/v1/company-enrichment/bulk"

func str(s string) *string { return &s }

// companies is the company data of every test (both modes).
func companies() []company.Record {
	recs := []company.Record{
		{Name: str("Northwind Traders"), NetworkURL: str("https://www.linkedin.com/company/northwind-traders"),
			Website: str("https://www.northwind.example"), Domain: str("northwind.example"), Industry: str("Wholesale")},
		{Name: str("Contoso"), NetworkURL: str("https://www.linkedin.com/company/contoso"), Website: str("https://contoso.example")},
		{Name: str("New Home"), NetworkURL: str("https://www.linkedin.com/company/newhome"), Website: str("https://www.newhome.example")},
		{Name: str("Moved Co"), NetworkURL: str("https://www.linkedin.com/company/moved-co"), Website: str("https://moved.example")},
	}
	for i := 0; i < 60; i += 2 { // co-00, co-02, ... exist; odd ones do not
		recs = append(recs, company.Record{Name: str(fmt.Sprintf("Company %02d", i)),
			NetworkURL: str(fmt.Sprintf("https://www.linkedin.com/company/co-%02d", i)),
			Website:    str(fmt.Sprintf("https://site-%02d.example", i))})
	}
	return recs
}

func (h *harness) loadCompanies(ctx context.Context) error {
	var buf bytes.Buffer
	for _, r := range companies() {
		b, _ := json.Marshal(r)
		buf.Write(b)
		buf.WriteByte('\n')
	}
	_, err := company.Import(ctx, &buf, company.Format("jsonl"), h.parts.Companies, h.parts.Normalize, nil)
	return err
}

// in is a submitted row.
type in struct {
	NetworkURL *string `json:"network_url,omitempty"`
	Domain     *string `json:"domain,omitempty"`
}

func nu(s string) in  { return in{NetworkURL: &s} }
func dom(s string) in { return in{Domain: &s} }

// co is the network URL of generated company n (found when n is even).
func co(n int) in { return nu(fmt.Sprintf("https://www.linkedin.com/company/co-%02d", n)) }

// site is the domain of generated company n.
func site(n int) in { return dom(fmt.Sprintf("site-%02d.example", n)) }

// account makes an account with balance and a pay-as-you-go key on the
// shared Redis.
func (h *harness) account(t *testing.T, balance credits.Amount) (string, string) {
	t.Helper()
	ctx := context.Background()
	a, err := h.parts.API.Accounts.CreateAccount(ctx, "kube-e2e", balance)
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := h.parts.API.Accounts.CreateKey(ctx, a.ID, accounts.PayAsYouGo)
	if err != nil {
		t.Fatal(err)
	}
	return a.ID, key
}

func (h *harness) balance(t *testing.T, accountID string) credits.Amount {
	t.Helper()
	b, err := h.parts.API.Billing.Balance(context.Background(), accountID)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// api is an HTTP client of one bulkd API.
type api struct {
	t   *testing.T
	url string
}

func (a api) do(method, path, key string, body any) (int, []byte) {
	a.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			a.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, a.url+path, rd)
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

type submitted struct {
	JobID           string  `json:"job_id"`
	Status          string  `json:"status"`
	TotalRows       int64   `json:"total_rows"`
	TotalInvalid    int64   `json:"total_invalid"`
	CreditsConsumed float64 `json:"credits_consumed"`
}

func (a api) submit(key string, rows []in) submitted {
	a.t.Helper()
	code, b := a.do(http.MethodPost, bulkPath, key, map[string]any{"input": rows})
	if code != http.StatusOK {
		a.t.Fatalf("submit: %d %s", code, b)
	}
	var s submitted
	if err := json.Unmarshal(b, &s); err != nil {
		a.t.Fatal(err)
	}
	return s
}

type jobStatus struct {
	JobID           string           `json:"job_id"`
	Status          string           `json:"status"`
	TotalRows       int64            `json:"total_rows"`
	TotalProcessed  int64            `json:"total_processed"`
	TotalInvalid    int64            `json:"total_invalid"`
	TotalDistinct   int64            `json:"total_distinct"`
	CreditsConsumed float64          `json:"credits_consumed"`
	Summary         map[string]int64 `json:"summary"`
	CompletedAt     *time.Time       `json:"completed_at"`
}

func (a api) status(key, id string) (int, jobStatus) {
	a.t.Helper()
	code, b := a.do(http.MethodGet, bulkPath+"/"+id, key, nil)
	var s jobStatus
	if code == http.StatusOK {
		if err := json.Unmarshal(b, &s); err != nil {
			a.t.Fatal(err)
		}
	}
	return code, s
}

// wait polls the job status until it is completed.
func (a api) wait(key, id string, d time.Duration) jobStatus {
	a.t.Helper()
	deadline := time.Now().Add(d)
	for {
		code, s := a.status(key, id)
		if code == http.StatusOK && s.Status == "completed" {
			return s
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("job %s not completed after %v: %d %+v", id, d, code, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// results reads every result row, page by page.
func (a api) results(key, id string) []map[string]any {
	a.t.Helper()
	var all []map[string]any
	for offset := 0; ; offset += 500 {
		code, b := a.do(http.MethodGet, fmt.Sprintf("%s/%s/results?limit=500&offset=%d", bulkPath, id, offset), key, nil)
		if code != http.StatusOK {
			a.t.Fatalf("results: %d %s", code, b)
		}
		var page struct {
			TotalRows int              `json:"total_rows"`
			Results   []map[string]any `json:"results"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			a.t.Fatal(err)
		}
		all = append(all, page.Results...)
		if offset+500 >= page.TotalRows {
			return all
		}
	}
}

func (h *harness) kubeAPI(t *testing.T) api { return api{t: t, url: h.apiURL} }

// standalone runs the same rows through a standalone bulkd (its own Redis,
// in-process workers, the same company data and settings) and returns its
// results: what Kubernetes mode must return too.
func standalone(t *testing.T, rows []in) (jobStatus, []map[string]any) {
	t.Helper()
	env := bulkdtest.Start(t, bulkdtest.WithConfig(func(c *config.Config) {
		ref := apiConfig()
		c.ShardSize, c.BatchSize, c.RateLimit = ref.ShardSize, ref.BatchSize, ref.RateLimit
		c.RedirectChecks, c.HTTPProxy = ref.RedirectChecks, ref.HTTPProxy
	}))
	env.PutCompanies(companies()...)
	_, key := env.Account(credits.Whole(1000))
	a := api{t: t, url: env.URL}
	sub := a.submit(key, rows)
	st := a.wait(key, sub.JobID, 30*time.Second)
	return st, a.results(key, sub.JobID)
}

// sameResults compares two result lists row by row.
func sameResults(t *testing.T, got, want []map[string]any) {
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

func (h *harness) bulkJob(t *testing.T, id string) *v1alpha1.BulkJob {
	t.Helper()
	var bj v1alpha1.BulkJob
	if err := h.k8s.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: id}, &bj); err != nil {
		t.Fatal(err)
	}
	return &bj
}

// waitBulkJob polls the BulkJob until ok holds.
func (h *harness) waitBulkJob(t *testing.T, id string, d time.Duration, what string, ok func(*v1alpha1.BulkJob) bool) *v1alpha1.BulkJob {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		var bj v1alpha1.BulkJob
		err := h.k8s.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: id}, &bj)
		if err == nil && ok(&bj) {
			return &bj
		}
		if time.Now().After(deadline) {
			t.Fatalf("BulkJob %s: not %s after %v (err %v): %+v", id, what, d, err, bj.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func completed(bj *v1alpha1.BulkJob) bool { return bj.Status.Phase == v1alpha1.PhaseCompleted }

func conditionTrue(bj *v1alpha1.BulkJob, typ string) bool {
	return meta.IsStatusConditionTrue(bj.Status.Conditions, typ)
}

// jobKeys lists the Redis keys of a job.
func (h *harness) jobKeys(t *testing.T, id string) []string {
	t.Helper()
	keys, err := h.rdb.Keys(context.Background(), "bulkd:job:{"+id+"}*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// rowsOf counts rows per result value.
func rowsOf(res []map[string]any) map[string]int64 {
	out := map[string]int64{}
	for _, r := range res {
		out[fmt.Sprint(r["result"])]++
	}
	return out
}

// eventReasons lists the reasons of the events about a BulkJob.
func (h *harness) eventReasons(t *testing.T, id string) string {
	t.Helper()
	var evs eventsv1.EventList
	if err := h.k8s.List(context.Background(), &evs, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range evs.Items {
		if e.Regarding.Name == id {
			reasons = append(reasons, e.Reason)
		}
	}
	return strings.Join(reasons, ",")
}
