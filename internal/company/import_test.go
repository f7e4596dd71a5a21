package company

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func importFile(t *testing.T, st *Store, path string, format Format) ImportStats {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var calls []ImportStats
	stats, err := Import(context.Background(), f, format, st, stubNorm, func(s ImportStats) { calls = append(calls, s) })
	if err != nil {
		t.Fatalf("Import(%s): %v", path, err)
	}
	if len(calls) == 0 || calls[len(calls)-1] != stats {
		t.Fatalf("last progress call %v != final stats %v", calls, stats)
	}
	if stats.Read != stats.Imported+stats.Skipped {
		t.Fatalf("Read %d != Imported %d + Skipped %d", stats.Read, stats.Imported, stats.Skipped)
	}
	return stats
}

func lookupOne(t *testing.T, st *Store, byURL bool, key string) *Record {
	t.Helper()
	f := st.ByDomain
	if byURL {
		f = st.ByNetworkURL
	}
	got, err := f(context.Background(), []string{key})
	if err != nil {
		t.Fatal(err)
	}
	return got[0]
}

func wantStats(t *testing.T, got ImportStats, read, imported, skipped int64) {
	t.Helper()
	if got.Read != read || got.Imported != imported || got.Skipped != skipped {
		t.Fatalf("stats = read %d imported %d skipped %d; want %d %d %d",
			got.Read, got.Imported, got.Skipped, read, imported, skipped)
	}
}

func TestImportJSONL(t *testing.T) {
	st, _ := newTestStore(t)
	stats := importFile(t, st, "testdata/companies.jsonl", FormatJSONL)
	wantStats(t, stats, 9, 4, 5)

	acme := lookupOne(t, st, true, "https://www.network.example/company/acme-widgets")
	if acme == nil || *acme.NetworkID != 555001 || *acme.CompanySize.Max != 50 || len(acme.SimilarCompanies) != 1 {
		t.Fatalf("acme = %s", mustJSON(t, acme))
	}
	beta := lookupOne(t, st, false, "beta.example")
	if beta == nil || *beta.NetworkURL != "https://www.network.example/company/beta-corp" ||
		*beta.NetworkID != DeriveNetworkID("https://www.network.example/company/beta-corp") ||
		*beta.EmailDomain != "mail.beta.example" || *beta.Website != "https://www.beta.example/about" ||
		beta.Specialties == nil {
		t.Fatalf("beta = %s", mustJSON(t, beta))
	}
	gamma := lookupOne(t, st, false, "gamma.example")
	if gamma == nil || gamma.NetworkURL != nil || *gamma.NetworkID != deriveDomainNetworkID("gamma.example") {
		t.Fatalf("gamma = %s", mustJSON(t, gamma))
	}
	if delta := lookupOne(t, st, false, "delta.example"); delta == nil || *delta.NetworkID != 555004 {
		t.Fatalf("delta (domain from website) = %s", mustJSON(t, delta))
	}
	for _, u := range []string{"too-big-id", "string-id", "broken"} {
		if r := lookupOne(t, st, true, "https://www.network.example/company/"+u); r != nil {
			t.Errorf("%s was imported", u)
		}
	}
}

func TestImportPDLNDJSON(t *testing.T) {
	st, _ := newTestStore(t)
	stats := importFile(t, st, "testdata/pdl.ndjson", FormatPDLNDJSON)
	wantStats(t, stats, 8, 5, 3)

	acmeURL := "https://www.linkedin.com/company/acme-corp"
	want := Record{
		NetworkURL: new(acmeURL), NetworkID: new(int64(DeriveNetworkID(acmeURL))),
		Name: new("acme corp"), Website: new("acme-corp.example"),
		Domain: new("acme-corp.example"), EmailDomain: new("acme-corp.example"),
		Industry:    new("computer software"),
		CompanySize: &CompanySize{Label: new("51-200"), Min: new(51), Max: new(200)},
		Headquarters: &Headquarters{
			Text: new("san francisco, california, united states"), City: new("san francisco"),
			Region: new("california"), Country: new("united states"),
		},
		FoundedYear: new(1998), Specialties: []string{}, SimilarCompanies: []SimilarCompany{},
	}
	if got := lookupOne(t, st, true, acmeURL); !reflect.DeepEqual(got, &want) {
		t.Fatalf("acme:\n got %s\nwant %s", mustJSON(t, got), mustJSON(t, want))
	}

	big := lookupOne(t, st, false, "big-holdings.example")
	if big == nil || *big.FoundedYear != 2005 || *big.CompanySize.Min != 10001 || big.CompanySize.Max != nil ||
		*big.Headquarters.Text != "germany" || big.Headquarters.City != nil {
		t.Fatalf("big = %s", mustJSON(t, big))
	}
	tiny := lookupOne(t, st, true, "https://www.linkedin.com/company/tiny-shop")
	if tiny == nil || tiny.Domain != nil || tiny.EmailDomain != nil || tiny.Headquarters != nil ||
		tiny.Industry != nil || tiny.FoundedYear != nil {
		t.Fatalf("tiny = %s", mustJSON(t, tiny))
	}
	only := lookupOne(t, st, false, "domain-only.example")
	if only == nil || only.NetworkURL != nil || only.FoundedYear != nil || only.CompanySize != nil {
		t.Fatalf("domain only = %s", mustJSON(t, only))
	}
	words := lookupOne(t, st, true, "https://www.linkedin.com/company/size-words")
	if words == nil || *words.FoundedYear != 1999 || *words.CompanySize.Min != 1001 || *words.CompanySize.Max != 5000 {
		t.Fatalf("size words = %s", mustJSON(t, words))
	}
}

func TestImportPDLCSV(t *testing.T) {
	st, _ := newTestStore(t)
	stats := importFile(t, st, "testdata/pdl.csv", FormatPDLCSV)
	wantStats(t, stats, 8, 5, 3)

	best := lookupOne(t, st, false, "best.example")
	if best == nil || *best.Name != `the "best" company, inc` || *best.CompanySize.Label != "10001+" {
		t.Fatalf("best = %s", mustJSON(t, best))
	}
	multi := lookupOne(t, st, true, "https://www.linkedin.com/company/multi-line")
	if multi == nil || *multi.Name != "multi\nline name" || multi.FoundedYear != nil || multi.Domain != nil {
		t.Fatalf("multi = %s", mustJSON(t, multi))
	}
	bs := lookupOne(t, st, false, "back-slash.example")
	if bs == nil || *bs.Name != `back\slash \ co` || *bs.Headquarters.City != "new york, ny" || bs.NetworkURL != nil {
		t.Fatalf("backslash = %s", mustJSON(t, bs))
	}
	crlf := lookupOne(t, st, false, "crlf.example")
	if crlf == nil || *crlf.Headquarters.Text != "porto, portugal" || *crlf.NetworkURL != "https://www.linkedin.com/company/crlf-co" {
		t.Fatalf("crlf = %s", mustJSON(t, crlf))
	}
	if r := lookupOne(t, st, true, "https://www.linkedin.com/company/bad-one"); r != nil {
		t.Fatal("malformed row was imported")
	}
}

// TestPDLFormatsAgree imports the same rows as NDJSON and as CSV into two
// prefixes of one server and expects identical data.
func TestPDLFormatsAgree(t *testing.T) {
	ctx := context.Background()
	_, rdb := newTestStore(t)
	rows := [][]string{
		{"id", "website", "name", "founded", "size", "locality", "region", "country", "industry", "linkedin_url"},
		{"x1", "one.example", `quote " and \ backslash`, "1970", "201-500", "oslo", "", "norway", "it", "linkedin.com/company/one"},
		{"x2", "", "two,\nlines", "", "5001-10000", "", "", "", "", "linkedin.com/company/two"},
		{"x3", "three.example", "", "2020", "", "", "bavaria", "germany", "", ""},
	}
	var csv strings.Builder
	writePDLCSV(&csv, rows)
	var nd bytes.Buffer
	for _, r := range rows[1:] {
		m := map[string]string{}
		for i, h := range rows[0] {
			m[h] = r[i]
		}
		b, _ := json.Marshal(m)
		nd.Write(append(b, '\n'))
	}
	a, b := NewStore(rdb, "a:"), NewStore(rdb, "b:")
	sa, err := Import(ctx, &nd, FormatPDLNDJSON, a, stubNorm, nil)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := Import(ctx, strings.NewReader(csv.String()), FormatPDLCSV, b, stubNorm, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantStats(t, sa, 3, 3, 0)
	wantStats(t, sb, 3, 3, 0)
	da, db := dumpKeys(t, rdb, "a:"), dumpKeys(t, rdb, "b:")
	if len(da) != len(db) {
		t.Fatalf("%d keys from NDJSON, %d from CSV", len(da), len(db))
	}
	for k, v := range da {
		if db["b:"+strings.TrimPrefix(k, "a:")] != v {
			t.Fatalf("key %s differs between NDJSON and CSV imports", k)
		}
	}
}

func TestImportIdempotent(t *testing.T) {
	ctx := context.Background()
	st, rdb := newTestStore(t)
	var buf bytes.Buffer
	if err := Generate(&buf, 3000, 9, "network.example"); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	imp := func() {
		if _, err := Import(ctx, bytes.NewReader(data), FormatJSONL, st, stubNorm, nil); err != nil {
			t.Fatal(err)
		}
		pdl, err := os.Open("testdata/pdl.csv")
		if err != nil {
			t.Fatal(err)
		}
		defer pdl.Close()
		if _, err := Import(ctx, pdl, FormatPDLCSV, st, stubNorm, nil); err != nil {
			t.Fatal(err)
		}
	}
	imp()
	before := dumpKeys(t, rdb, testPrefix)
	imp()
	if after := dumpKeys(t, rdb, testPrefix); !reflect.DeepEqual(before, after) {
		t.Fatalf("re-import changed state: %d keys before, %d after", len(before), len(after))
	}
	if n, _ := st.Count(ctx); n != 3000+5 {
		t.Fatalf("Count = %d, want %d", n, 3005)
	}
}

func TestImportChangedKeysOnReimport(t *testing.T) {
	ctx := context.Background()
	st, rdb := newTestStore(t)
	v1 := `{"network_id":9,"network_url":"https://www.network.example/company/before","domain":"before.example"}` + "\n"
	v2 := `{"network_id":9,"network_url":"https://www.network.example/company/after","website":"https://after.example"}` + "\n"
	for _, in := range []string{v1, v2} {
		if _, err := Import(ctx, strings.NewReader(in), FormatJSONL, st, stubNorm, nil); err != nil {
			t.Fatal(err)
		}
	}
	if lookupOne(t, st, true, "https://www.network.example/company/before") != nil || lookupOne(t, st, false, "before.example") != nil {
		t.Fatal("stale keys still match")
	}
	if lookupOne(t, st, false, "after.example") == nil {
		t.Fatal("new domain does not match")
	}
	if u, d := hashFieldCount(t, rdb, testPrefix+keyURLIdx+"*"), hashFieldCount(t, rdb, testPrefix+keyDomIdx+"*"); u != 1 || d != 1 {
		t.Fatalf("index entries %d, %d; want 1, 1", u, d)
	}
}

func TestImportErrors(t *testing.T) {
	ctx := context.Background()
	st, _ := newTestStore(t)
	if _, err := Import(ctx, strings.NewReader(""), "xml", st, stubNorm, nil); err == nil {
		t.Error("unknown format accepted")
	}
	if _, err := Import(ctx, strings.NewReader("foo,bar\n1,2\n"), FormatPDLCSV, st, stubNorm, nil); err == nil {
		t.Error("CSV without website or linkedin_url column accepted")
	}
	boom := errors.New("disk on fire")
	for _, format := range []Format{FormatJSONL, FormatPDLNDJSON, FormatPDLCSV} {
		in := io.MultiReader(strings.NewReader("website\nok.example\n"), iotest.ErrReader(boom))
		if format != FormatPDLCSV {
			in = io.MultiReader(strings.NewReader(`{"website":"ok.example"}`+"\n"), iotest.ErrReader(boom))
		}
		if _, err := Import(ctx, in, format, st, stubNorm, nil); !errors.Is(err, boom) {
			t.Errorf("%s: err = %v, want the reader's error", format, err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Import(cctx, strings.NewReader(`{"website":"ok.example"}`), FormatJSONL, st, stubNorm, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err = %v", err)
	}
	// An empty CSV (not even a header) is an empty import, not an error.
	if s, err := Import(ctx, strings.NewReader(""), FormatPDLCSV, st, stubNorm, nil); err != nil || s.Read != 0 {
		t.Errorf("empty CSV: %v, %v", s, err)
	}
}

func TestImportLongLineSkipped(t *testing.T) {
	st, _ := newTestStore(t)
	in := `{"website":"a.example"}` + "\n" + `{"name":"` + strings.Repeat("x", maxRecordBytes) + `"}` + "\n" + `{"website":"b.example"}`
	s, err := Import(context.Background(), strings.NewReader(in), FormatJSONL, st, stubNorm, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantStats(t, s, 3, 2, 1)
}

func TestImportProgressThrottled(t *testing.T) {
	st, _ := newTestStore(t)
	var buf bytes.Buffer
	if err := Generate(&buf, 5000, 2, "network.example"); err != nil {
		t.Fatal(err)
	}
	var calls []ImportStats
	start := time.Now()
	s, err := Import(context.Background(), &buf, FormatJSONL, st, stubNorm, func(p ImportStats) { calls = append(calls, p) })
	if err != nil {
		t.Fatal(err)
	}
	wantStats(t, s, 5000, 5000, 0)
	// At most one call per elapsed second, plus the final one.
	if limit := int(time.Since(start)/time.Second) + 1; len(calls) > limit {
		t.Fatalf("%d progress calls in %v", len(calls), time.Since(start))
	}
}

func TestParseCompanySize(t *testing.T) {
	for _, tc := range []struct {
		in       string
		min, max *int
		nilSize  bool
	}{
		{in: "", nilSize: true},
		{in: "   ", nilSize: true},
		{in: "1-10", min: new(1), max: new(10)},
		{in: "11-50", min: new(11), max: new(50)},
		{in: "51-200", min: new(51), max: new(200)},
		{in: "201-500", min: new(201), max: new(500)},
		{in: "501-1000", min: new(501), max: new(1000)},
		{in: "1001-5000", min: new(1001), max: new(5000)},
		{in: "5001-10000", min: new(5001), max: new(10000)},
		{in: "10001+", min: new(10001)},
		{in: "1,001-5,000 employees", min: new(1001), max: new(5000)},
		{in: "10,001+ employees", min: new(10001)},
		{in: "0-1", min: new(0), max: new(1)},
		{in: "Myself only"},
		{in: "50-10"},
		{in: "-5-10"},
		{in: "+"},
	} {
		got := parseCompanySize(tc.in)
		if tc.nilSize {
			if got != nil {
				t.Errorf("%q: got %s, want null", tc.in, mustJSON(t, got))
			}
			continue
		}
		want := &CompanySize{Label: new(strings.TrimSpace(tc.in)), Min: tc.min, Max: tc.max}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q: got %s, want %s", tc.in, mustJSON(t, got), mustJSON(t, want))
		}
	}
}
