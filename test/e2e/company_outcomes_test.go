package e2e

// SPEC 2.4 to 2.6: the row outcomes of the 2.5 table, each end to end
// through HTTP: found, not_found, error, invalid_url and pending.

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/company"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/enrich"
	"github.com/bulkd/bulkd/internal/testredis"
)

func coInt(n int) *int            { return &n }
func coInt64(n int64) *int64      { return &n }
func coStrs(s ...string) []string { return s }

// coNorthwind is a company with every field of SPEC 2.4 and 2.6 known.
func coNorthwind() company.Record {
	return company.Record{
		NetworkURL:    new("https://www.linkedin.com/company/northwind-traders"),
		NetworkID:     coInt64(4242),
		Name:          new("Northwind Traders"),
		Description:   new(strings.Repeat("Northwind Traders imports and exports specialty foods from around the world. ", 40)),
		Website:       new("https://www.northwind.example/home"),
		Domain:        new("northwind.example"),
		EmailDomain:   new("mail.northwind.example"),
		Industry:      new("Food & Beverages"),
		CompanySize:   &company.CompanySize{Label: new("51-200"), Min: coInt(51), Max: coInt(200)},
		EmployeeCount: coInt(137),
		CompanyType:   new("Privately Held"),
		Headquarters:  &company.Headquarters{Text: new("Seattle, WA, United States"), City: new("Seattle"), Region: new("WA"), Country: new("United States")},
		FoundedYear:   coInt(1998),
		Specialties:   coStrs("imports", "specialty foods", "logistics"),
		FollowerCount: coInt(12345),
		SimilarCompanies: []company.SimilarCompany{
			{Name: new("Contoso Foods"), NetworkURL: new("https://www.linkedin.com/company/contoso-foods"), Industry: new("Food & Beverages"), Location: new("Redmond, WA")},
			{Name: new("Fabrikam"), NetworkURL: nil, Industry: nil, Location: nil},
		},
	}
}

// coNorthwindData is northwind's data as a found row must carry it.
func coNorthwindData(t *testing.T) map[string]any {
	var m map[string]any
	coDecode(t, []byte(`{
		"result": "found", "is_redirect": false, "redirected_to": null, "reason": null,
		"network_url": "https://www.linkedin.com/company/northwind-traders",
		"network_id": 4242,
		"name": "Northwind Traders",
		"description": `+coJSONString(*coNorthwind().Description)+`,
		"website": "https://www.northwind.example/home",
		"domain": "northwind.example",
		"email_domain": "mail.northwind.example",
		"industry": "Food & Beverages",
		"company_size": {"label": "51-200", "min": 51, "max": 200},
		"employee_count": 137,
		"company_type": "Privately Held",
		"headquarters": {"text": "Seattle, WA, United States", "city": "Seattle", "region": "WA", "country": "United States"},
		"founded_year": 1998,
		"specialties": ["imports", "specialty foods", "logistics"],
		"follower_count": 12345,
		"similar_companies": [
			{"name": "Contoso Foods", "network_url": "https://www.linkedin.com/company/contoso-foods", "industry": "Food & Beverages", "location": "Redmond, WA"},
			{"name": "Fabrikam", "network_url": null, "industry": null, "location": null}
		]
	}`), &m)
	return m
}

func coJSONString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestCompanyRowOutcomes submits one row per answered outcome of SPEC 2.5
// and checks each row field by field, the job's counters and the charge.
func TestCompanyRowOutcomes(t *testing.T) {
	a := companyStart(t)
	a.PutCompanies(coNorthwind(), company.Record{
		// A company known only by its network page: no website of its own.
		NetworkURL: new("https://www.linkedin.com/company/offline-co"), Name: new("Offline Co"),
	}, company.Record{
		// A website but no email domain on record: email on the website's.
		NetworkURL: new("https://www.linkedin.com/company/quiet-mail"), Name: new("Quiet Mail"),
		Website: new("https://www.quietmail.example"), Domain: new("quietmail.example"),
	})
	acct, key := a.Account(credits.Whole(100))

	rows := []coIn{
		coURL("https://www.linkedin.com/company/northwind-traders"), // 0 found by network URL
		coDomain("northwind.example"),                               // 1 found by domain: a second input
		coURL("https://www.linkedin.com/company/Nobody-Here/"),      // 2 not_found, keeps its canonical URL
		coDomain("nobody-here.example"),                             // 3 not_found, network_url null
		coURL("https://www.linkedin.com/in/jane-doe"),               // 4 invalid_url
		coURL("linkedin.com/company/offline-co"),                    // 5 found, no domain
		{NetworkURL: new("https://www.linkedin.com/company/northwind-traders"), Domain: new("nobody-here.example")}, // 6 both: network URL used
		{NetworkURL: new(""), Domain: new("northwind.example")},                                                     // 7 blank network URL gives way to the domain
		{NetworkURL: new("\u200b\ufeff"), Domain: new("www.northwind.example")},                                     // 8 so does an invisibly blank one
		coURL("https://www.linkedin.com/company/quiet-mail"),                                                        // 9 found, email_domain from its domain
	}
	sub := a.submit(t, key, rows)
	if sub.TotalInvalid != 1 || sub.CreditsConsumed != 6 {
		t.Fatalf("submission %+v: want 1 invalid row and 6 distinct inputs charged", sub)
	}
	coWantBalance(t, a, acct, credits.Whole(94))
	st := a.wait(t, key, sub.JobID)
	want := map[string]int64{"total_found": 7, "total_not_found": 2, "total_error": 0, "total_invalid_url": 1, "total_pending": 0}
	if !coSameJSON(st.Summary, want) || st.TotalProcessed != 10 || st.TotalDistinct != 6 || st.CreditsConsumed != 6 || st.TotalInvalid != 1 {
		t.Fatalf("status %+v, want summary %v", st, want)
	}
	if st.CompletedAt.Before(st.CreatedAt) || time.Since(st.CreatedAt) > time.Minute {
		t.Fatalf("timestamps: created %v completed %v", st.CreatedAt, st.CompletedAt)
	}
	res := a.results(t, key, sub.JobID, 50)

	t.Run("found by network URL carries every field", func(t *testing.T) {
		r := res[0]
		got := r.data()
		if !coSameJSON(got, coNorthwindData(t)) {
			t.Fatalf("found row data\n got %s\nwant %s", coMustJSON(got), coMustJSON(coNorthwindData(t)))
		}
		if *r.Input != *rows[0].NetworkURL || *r.InputURL != *rows[0].NetworkURL || r.CreditsConsumed != 1 {
			t.Fatalf("found row echo/credits: %s", r)
		}
	})
	t.Run("found by domain is a second input with the same company", func(t *testing.T) {
		r := res[1]
		if !coSameJSON(r.data(), coNorthwindData(t)) || *r.Input != "northwind.example" || r.InputURL != nil || r.CreditsConsumed != 1 {
			t.Fatalf("domain row: %s", r)
		}
	})
	t.Run("not_found by network URL keeps the canonical URL", func(t *testing.T) {
		r := res[2]
		if r.Result != "not_found" || r.CreditsConsumed != 1 || r.Reason != nil || r.IsRedirect || r.RedirectedTo != nil {
			t.Fatalf("row: %s", r)
		}
		if r.NetworkURL == nil || *r.NetworkURL != "https://www.linkedin.com/company/nobody-here" {
			t.Fatalf("not_found network URL row must keep its canonical network_url: %s", r)
		}
		if *r.Input != "https://www.linkedin.com/company/Nobody-Here/" || *r.InputURL != *r.Input {
			t.Fatalf("input must be echoed exactly as submitted: %s", r)
		}
		coCheckEmptyData(t, r, true)
	})
	t.Run("not_found by domain has a null network URL", func(t *testing.T) {
		r := res[3]
		if r.Result != "not_found" || r.CreditsConsumed != 1 || r.Reason != nil || *r.Input != "nobody-here.example" || r.InputURL != nil {
			t.Fatalf("row: %s", r)
		}
		coCheckEmptyData(t, r, false)
	})
	t.Run("invalid_url is free, has a reason and no data", func(t *testing.T) {
		r := res[4]
		if r.Result != "invalid_url" || r.CreditsConsumed != 0 || r.Reason == nil || *r.Reason == "" || strings.Contains(*r.Reason, "\n") {
			t.Fatalf("row: %s", r)
		}
		if *r.Input != "https://www.linkedin.com/in/jane-doe" || *r.InputURL != *r.Input || r.IsRedirect || r.RedirectedTo != nil {
			t.Fatalf("row: %s", r)
		}
		coCheckEmptyData(t, r, false)
	})
	t.Run("found company without a website has null domain and email_domain", func(t *testing.T) {
		r := res[5]
		if r.Result != "found" || r.Name == nil || *r.Name != "Offline Co" || r.Domain != nil || r.raw["email_domain"] != nil || r.NetworkID == nil {
			t.Fatalf("row: %s", r)
		}
	})
	t.Run("found company without an email domain gets its website's domain", func(t *testing.T) {
		r := res[9]
		if r.Result != "found" || r.Domain == nil || *r.Domain != "quietmail.example" || r.raw["email_domain"] != "quietmail.example" {
			t.Fatalf("row: %s", r)
		}
	})
	t.Run("a row with both fields uses the network URL", func(t *testing.T) {
		r := res[6]
		if r.Result != "found" || r.CreditsConsumed != 0 || *r.Input != *rows[6].NetworkURL || *r.InputURL != *rows[6].NetworkURL {
			t.Fatalf("row (a repeat of row 0): %s", r)
		}
		if !coSameJSON(r.data(), res[0].data()) {
			t.Fatalf("repeat data differs from row 0: %s", r)
		}
	})
	t.Run("a blank network URL gives way to the domain", func(t *testing.T) {
		for i, want := range map[int]string{7: "northwind.example", 8: "www.northwind.example"} {
			r := res[i]
			if r.Result != "found" || r.CreditsConsumed != 0 || r.Input == nil || *r.Input != want || r.InputURL != nil {
				t.Fatalf("row %d (a repeat of row 1, by domain): %s", i, r)
			}
		}
	})
	for i, r := range res {
		if r.Result != "invalid_url" && r.Reason != nil {
			t.Errorf("row %d: reason on a %s row: %s", i, r.Result, r)
		}
	}
	if coCreditsSum(res) != sub.CreditsConsumed {
		t.Fatalf("rows carry %v credits, the job charged %v", coCreditsSum(res), sub.CreditsConsumed)
	}
}

func coMustJSON(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

// TestCompanyErrorRows makes answering fail for real: the company store
// the answerer reads is moved to a redis-server that is then stopped (the
// harness keeps all of bulkd on one Redis, so the test points the live
// answerer at a second one before the executor starts). Every attempt of
// the shard fails; after its retries the rows become error rows, charged 1
// on the first row of each input and 0 on repeats, with no data. Invalid
// rows stay invalid_url.
func TestCompanyErrorRows(t *testing.T) {
	a := companyStart(t, bulkdtest.NoWorkers(), bulkdtest.WithConfig(func(c *config.Config) { c.ShardSize = 2 }))
	a.PutCompanies(coNorthwind())
	acct, key := a.Account(credits.Whole(10))

	dead := testredis.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: dead.Addr, MaxRetries: -1, DialTimeout: time.Second, DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	ans := a.Parts.Processor.Families[enrich.Family].(*enrich.CompanyFamily).Answerer
	shared := false
	for _, m := range a.Parts.API.Singles {
		if co, ok := m.Family.(*enrich.CompanyFamily); ok && m.Path == "/company-enrichment" {
			shared = co.Answerer == ans
		}
	}
	if !shared {
		t.Fatal("the API's single company mount and the executor no longer share one answerer; rework this test")
	}
	ans.Store = company.NewStore(rdb, "bulkd:")
	dead.Stop()

	rows := []coIn{
		coURL("https://www.linkedin.com/company/northwind-traders"),
		coDomain("northwind.example"),
		coURL("https://www.linkedin.com/company/northwind-traders/about"),
		coDomain("nobody.example"),
		coDomain("not a domain"),
	}
	sub := a.submit(t, key, rows)
	if sub.CreditsConsumed != 3 || sub.TotalInvalid != 1 {
		t.Fatalf("submission %+v", sub)
	}
	a.StartWorkers()
	st := a.wait(t, key, sub.JobID)
	want := map[string]int64{"total_found": 0, "total_not_found": 0, "total_error": 4, "total_invalid_url": 1, "total_pending": 0}
	if !coSameJSON(st.Summary, want) {
		t.Fatalf("summary %v, want %v", st.Summary, want)
	}
	res := a.results(t, key, sub.JobID, 50)
	wantCredits := []float64{1, 1, 0, 1, 0}
	for i, r := range res[:4] {
		if r.Result != "error" || r.CreditsConsumed != wantCredits[i] || r.Reason != nil || r.IsRedirect || r.RedirectedTo != nil {
			t.Fatalf("row %d: %s", i, r)
		}
		coCheckEmptyData(t, r, false)
	}
	if res[4].Result != "invalid_url" || res[4].CreditsConsumed != 0 {
		t.Fatalf("row 4: %s", res[4])
	}
	// SPEC 2.5 rule 6: nothing is refunded after the job is accepted.
	coWantBalance(t, a, acct, credits.Whole(7))
	if coCreditsSum(res) != 3 {
		t.Fatalf("rows carry %v credits, want 3", coCreditsSum(res))
	}

	// The single lookup cannot answer either: 500, and its credit is refunded.
	r := a.get(t, coSinglePath+"?domain=northwind.example", key)
	e := coWantError(t, r, http.StatusInternalServerError)
	if e.Code != "" || !strings.Contains(e.Detail, "refunded") {
		t.Fatalf("500 body: %s", r.Body)
	}
	coWantBalance(t, a, acct, credits.Whole(7))
}

// TestCompanyPendingRowsWithoutWorkers: with the executor not running, every
// valid row is pending in its place (1 credit on the first row of an
// input, 0 on repeats), invalid rows are already invalid_url, and the job
// is running. Once the executor starts the same pages fill in without
// shifting.
func TestCompanyPendingRowsWithoutWorkers(t *testing.T) {
	a := companyStart(t, bulkdtest.NoWorkers())
	a.PutCompanies(coNorthwind())
	_, key := a.Account(credits.Whole(10))
	rows := []coIn{
		coDomain("northwind.example"),
		coURL("https://www.linkedin.com/in/someone"),
		coURL("https://www.linkedin.com/company/northwind-traders"),
		coDomain("https://www.northwind.example/"),
		coDomain("nobody.example"),
		coURL("linkedin.com/company/northwind-traders"),
	}
	sub := a.submit(t, key, rows)

	st := a.status(t, key, sub.JobID)
	want := map[string]int64{"total_found": 0, "total_not_found": 0, "total_error": 0, "total_invalid_url": 1, "total_pending": 5}
	if st.Status != "running" || st.CompletedAt != nil || st.TotalProcessed != 1 || !coSameJSON(st.Summary, want) {
		t.Fatalf("status before the executor runs: %+v", st)
	}
	before := a.results(t, key, sub.JobID, 4) // two pages
	wantResult := []string{"pending", "invalid_url", "pending", "pending", "pending", "pending"}
	wantCredits := []float64{1, 0, 1, 0, 1, 0}
	for i, r := range before {
		if r.Result != wantResult[i] || r.CreditsConsumed != wantCredits[i] {
			t.Fatalf("row %d before processing: %s", i, r)
		}
		if r.Result == "pending" {
			coCheckEmptyData(t, r, false)
			if r.Reason != nil || r.IsRedirect || r.RedirectedTo != nil {
				t.Fatalf("row %d: %s", i, r)
			}
		}
		if got := coEcho(r); got != coEchoOf(rows[i]) {
			t.Fatalf("row %d echoes %q, submitted %q", i, got, coEchoOf(rows[i]))
		}
	}
	if p := a.page(t, key, sub.JobID, ""); p.TotalProcessed != 1 || p.TotalRows != 6 {
		t.Fatalf("page totals while pending: %+v", p)
	}

	a.StartWorkers()
	st = a.wait(t, key, sub.JobID)
	if st.Summary["total_found"] != 4 || st.Summary["total_not_found"] != 1 {
		t.Fatalf("status after processing: %+v", st)
	}
	after := a.results(t, key, sub.JobID, 4)
	wantResult = []string{"found", "invalid_url", "found", "found", "not_found", "found"}
	for i, r := range after {
		if r.Result != wantResult[i] || r.CreditsConsumed != wantCredits[i] || coEcho(r) != coEcho(before[i]) {
			t.Fatalf("row %d after processing: %s (before: %s)", i, r, before[i])
		}
	}
}

// coEcho is what a row says was submitted.
func coEcho(r coRow) string {
	s := ""
	if r.Input != nil {
		s = *r.Input
	}
	if r.InputURL != nil {
		return "network_url=" + *r.InputURL
	}
	return "domain=" + s
}

func coEchoOf(x coIn) string {
	if x.NetworkURL != nil && strings.TrimSpace(*x.NetworkURL) != "" {
		return "network_url=" + *x.NetworkURL
	}
	if x.Domain != nil {
		return "domain=" + *x.Domain
	}
	return "domain="
}

// TestCompanyPendingWhileShardHeld holds one shard mid-way, in the redirect
// check of its domain against a website that does not answer until the
// test lets it, while the other shards complete: the held rows (the first
// and a repeat) are pending in place, every other row is answered, and the
// job is running; once released, the job completes.
func TestCompanyPendingWhileShardHeld(t *testing.T) {
	web := coStartWebsites(t)
	held := web.hold("slow.example")
	a := companyStart(t, coWithWebsites(web), bulkdtest.WithConfig(func(c *config.Config) { c.ShardSize = 1 }))
	a.PutCompanies(coNorthwind(), company.Record{Name: new("Slow Inc"), Website: new("https://slow.example"), Domain: new("slow.example")})
	_, key := a.Account(credits.Whole(20))
	rows := []coIn{
		coDomain("northwind.example"),
		coDomain("slow.example"),
		coURL("https://www.linkedin.com/company/northwind-traders"),
		coDomain("fast-one.example"),
		coDomain("fast-two.example"),
		coDomain("www.slow.example"),
		coURL("https://www.linkedin.com/company/unknown-co"),
		coURL("https://www.linkedin.com/in/a-person"),
	}
	sub := a.submit(t, key, rows)
	select {
	case <-held.arrived:
	case <-time.After(20 * time.Second):
		t.Fatal("the redirect check of slow.example never reached the website")
	}
	// Wait until everything but the held input is answered.
	var st coStatus
	deadline := time.Now().Add(20 * time.Second)
	for {
		st = a.status(t, key, sub.JobID)
		if st.Summary["total_pending"] == 2 {
			break
		}
		if st.Summary["total_pending"] < 2 || time.Now().After(deadline) {
			t.Fatalf("want exactly the 2 held rows pending: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st.Status != "running" || st.CompletedAt != nil || st.TotalProcessed != 6 {
		t.Fatalf("status while held: %+v", st)
	}
	res := a.results(t, key, sub.JobID, 3)
	wantResult := []string{"found", "pending", "found", "not_found", "not_found", "pending", "not_found", "invalid_url"}
	wantCredits := []float64{1, 1, 1, 1, 1, 0, 1, 0}
	for i, r := range res {
		if r.Result != wantResult[i] || r.CreditsConsumed != wantCredits[i] || coEcho(r) != coEchoOf(rows[i]) {
			t.Fatalf("row %d while held: %s", i, r)
		}
	}

	held.Release()
	st = a.wait(t, key, sub.JobID)
	if st.Summary["total_found"] != 4 || st.Summary["total_pending"] != 0 {
		t.Fatalf("status after release: %+v", st)
	}
	res = a.results(t, key, sub.JobID, 3)
	for _, i := range []int{1, 5} {
		if r := res[i]; r.Result != "found" || r.Name == nil || *r.Name != "Slow Inc" || r.IsRedirect || r.CreditsConsumed != wantCredits[i] {
			t.Fatalf("row %d after release: %s", i, r)
		}
	}
	if web.hitsOf("slow.example") != 1 {
		t.Fatalf("slow.example was checked %d times; one distinct input, one check", web.hitsOf("slow.example"))
	}
}
