package bulkctl_test

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/bulkctl"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/company"
	"github.com/bulkd/bulkd/internal/credits"
)

func putCompanies(env *bulkdtest.Env) {
	env.PutCompanies(
		company.Record{NetworkURL: new("https://www.linkedin.com/company/northwind-traders"), Name: new("Northwind Traders"),
			Website: new("https://northwind.example"), Domain: new("northwind.example")},
		company.Record{NetworkURL: new("https://www.linkedin.com/company/contoso"), Name: new("Contoso"),
			Website: new("https://contoso.example"), Domain: new("contoso.example")},
	)
}

// Company enrichment: columns guessed (a LinkedIn column and a website
// column, the value deciding network_url or domain), a manifest, wait,
// results as CSV and as JSON Lines, status by bare job id, credits.
func TestCompanySubmitWaitResults(t *testing.T) {
	env := bulkdtest.Start(t)
	putCompanies(env)
	_, key := env.Account(credits.Whole(100))
	c := ctl{t: t, url: env.URL, key: key}
	in := writeFile(t, "companies.csv", "Company,LinkedIn URL,Website\n"+
		"Northwind,https://www.linkedin.com/company/northwind-traders,\n"+
		"Contoso,,https://contoso.example/about\n"+
		"Nobody,,nobody.example\n"+
		"Northwind again,linkedin.com/company/northwind-traders/about/,northwind.example\n"+
		"Blank,,\n")
	manifest := filepath.Join(t.TempDir(), "m.json")
	h := c.must("company", "submit", in, "--manifest", manifest)
	if !strings.HasPrefix(h, "company:") || strings.Contains(h, ",") {
		t.Fatalf("handle %q", h)
	}
	m, err := bulkctl.ReadManifest(manifest)
	if err != nil || m.Handle != h || !m.Complete || len(m.Jobs) != 1 || m.RowsRead != 5 || m.RowsSubmitted != 5 {
		t.Fatalf("manifest %+v, %v", m, err)
	}

	var st bulkctl.Combined
	if err := json.Unmarshal([]byte(c.must("wait", manifest, "--interval", "50ms", "--timeout", "30s")), &st); err != nil {
		t.Fatal(err)
	}
	if !st.Finished || st.Status != "completed" || st.Total != 5 || st.Processed != 5 {
		t.Fatalf("wait: %+v", st)
	}

	out := filepath.Join(t.TempDir(), "out.csv")
	c.must("results", h, "--out", out)
	head, rows := readCSV(t, out)
	if got, want := column(t, head, rows, "result"), []string{"found", "found", "not_found", "found", "invalid_url"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("results %v, want %v", got, want)
	}
	if got := column(t, head, rows, "name"); got[0] != "Northwind Traders" || got[1] != "Contoso" {
		t.Fatalf("names %v", got)
	}

	// The same as JSON Lines on stdout, by bare job id (the family found
	// by asking), after status.
	id := strings.TrimPrefix(h, "company:")
	if err := json.Unmarshal([]byte(c.must("status", id)), &st); err != nil || st.Handle != h || !st.Finished {
		t.Fatalf("status by id: %+v %v", st, err)
	}
	lines := strings.Split(c.must("results", id), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d JSON lines", len(lines))
	}
	var row struct {
		Result string `json:"result"`
		Input  string `json:"input"`
	}
	if err := json.Unmarshal([]byte(lines[3]), &row); err != nil || row.Result != "found" ||
		row.Input != "linkedin.com/company/northwind-traders/about/" {
		t.Fatalf("row 4 %s", lines[3])
	}

	var bal struct{ Credits float64 }
	if err := json.Unmarshal([]byte(c.must("credits")), &bal); err != nil || bal.Credits != 97 {
		t.Fatalf("credits %+v %v", bal, err)
	}
}

// Email verification: JSON Lines input with an "E-mail" key, repeats
// dropped, results as CSV.
func TestVerifySubmitWaitResults(t *testing.T) {
	env := startWithWorld(t)
	_, key := env.Account(credits.Whole(10))
	c := ctl{t: t, url: env.URL, key: key}
	c.stdin = `{"E-mail": "alice@acme.test", "name": "Alice"}
{"E-mail": "nobody@acme.test"}
{"E-mail": "ALICE@acme.test"}
{"E-mail": "x@nullmx.test"}
{"E-mail": "x@nxdomain.test"}
{"E-mail": "anyone@catchall.test"}
{"E-mail": "not-an-email"}
{"E-mail": ""}
`
	h := c.must("verify", "submit", "-")
	if !strings.HasPrefix(h, "verify:") {
		t.Fatalf("handle %q", h)
	}
	c.must("wait", h, "--interval", "50ms", "--timeout", "30s")
	out := filepath.Join(t.TempDir(), "v.csv")
	c.must("results", h, "--out", out)
	head, rows := readCSV(t, out)
	inputs, statuses, reasons := column(t, head, rows, "input"), column(t, head, rows, "status"), column(t, head, rows, "reason")
	got := map[string]string{}
	for i, in := range inputs {
		got[in] = statuses[i] + "/" + reasons[i]
	}
	want := map[string]string{
		"alice@acme.test":      "deliverable/accepted",
		"nobody@acme.test":     "undeliverable/mailbox_not_found",
		"x@nullmx.test":        "undeliverable/null_mx",
		"x@nxdomain.test":      "undeliverable/no_such_domain",
		"anyone@catchall.test": "risky/catch_all",
		"not-an-email":         "undeliverable/invalid_syntax",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("verdicts %v\nwant %v", got, want)
	}
	if inputs[0] != "alice@acme.test" || inputs[5] != "not-an-email" {
		t.Fatalf("order %v", inputs)
	}
}

// Email lookup: a semicolon CSV with variant column names, a repeat
// written differently, results in order; then an unlimited-plan key is
// noticed and its jobs go to /v1/unlimited/bulk-lookup.
func TestLookupSubmitWaitResults(t *testing.T) {
	env := startWithWorld(t)
	acct, key := env.Account(credits.Whole(10))
	c := ctl{t: t, url: env.URL, key: key}
	in := writeFile(t, "people.csv", "Given Name;Surname;Company Domain\n"+
		"Jane;Doe;initech.test\n"+
		"John;Smith;initech.test\n"+
		" jane;DOE;INITECH.test\n"+
		"Max;Mustermann;initech.test\n"+
		"Ann;Other;nxdomain.test\n")
	h := c.must("lookup", "submit", in, "--wait", "--interval", "50ms", "--timeout", "60s")
	h = strings.SplitN(h, "\n", 2)[0]
	if !strings.HasPrefix(h, "lookup:") {
		t.Fatalf("handle %q", h)
	}
	out := filepath.Join(t.TempDir(), "l.jsonl")
	c.must("results", h, "--out", out)
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(readAll(t, out)), "\n") {
		var r struct{ Status, Email, FirstName string }
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		got = append(got, r.Status+" "+r.Email)
	}
	want := []string{"found jane.doe@initech.test", "found john.smith@initech.test", "not_found ", "not_found "}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("rows %q, want %q", got, want)
	}
	if b := env.Balance(acct); b != credits.Whole(6) {
		t.Fatalf("balance %v (4 unique rows charged)", b)
	}

	if err := env.Parts.API.Accounts.SetPlan(context.Background(), acct, accounts.PlanStarter, accounts.StateActive, time.Now().Add(24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	u := ctl{t: t, url: env.URL, key: env.Key(acct, accounts.Unlimited)}
	u.stdin = `{"first_name": "Jane", "last_name": "Doe", "domain": "initech.test"}` + "\n"
	uh := u.must("lookup", "submit", "-")
	if !strings.HasPrefix(uh, "unlimited-lookup:") {
		t.Fatalf("unlimited handle %q", uh)
	}
	u.must("wait", uh, "--interval", "50ms", "--timeout", "30s")
	if r := u.must("results", uh); !strings.Contains(r, "jane.doe@initech.test") {
		t.Fatalf("unlimited results %s", r)
	}
	var usage struct {
		Used int `json:"bulk_searches_used"`
	}
	if err := json.Unmarshal([]byte(u.must("usage")), &usage); err != nil || usage.Used != 1 {
		t.Fatalf("usage %+v %v", usage, err)
	}
	// The payg key on the unlimited endpoint: refused, exit 2.
	if r := c.run("usage"); r.code != bulkctl.ExitRefused || !strings.Contains(r.stderr, "wrong_key_plan") {
		t.Fatalf("usage with a payg key: %+v", r)
	}
}

// delete: a finished job's handle is deleted (one JSON answer a job), and
// its status is then 404 (bulkctl status exits with the API's error).
func TestDeleteJob(t *testing.T) {
	env := startWithWorld(t)
	_, key := env.Account(credits.Whole(10))
	c := ctl{t: t, url: env.URL, key: key}
	c.stdin = "email\nalice@acme.test\nnobody@acme.test\n"
	h := c.must("verify", "submit", "-")
	c.must("wait", h, "--interval", "50ms", "--timeout", "30s")
	out := c.must("delete", h)
	var d struct {
		Status string `json:"status"`
		Rows   int    `json:"total_rows"`
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil || d.Status != "deleted" || d.Rows != 2 {
		t.Fatalf("delete answered %q (%v)", out, err)
	}
	id := strings.TrimPrefix(h, "verify:")
	if r := env.Get("/v1/bulk/"+id, key); r.Status != http.StatusNotFound {
		t.Fatalf("status after delete: %d %s", r.Status, r.Body)
	}
	if r := c.run("delete", h); r.code == 0 {
		t.Fatalf("a second delete exited 0: %s", r.stdout)
	}
}
