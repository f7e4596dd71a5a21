package company

import (
	"context"
	"reflect"
	"strings"
	"testing"
)

func TestStoreRoundTrip(t *testing.T) {
	ctx := context.Background()
	st, _ := newTestStore(t)
	recs := generated(t, 300, 11)
	if err := st.Put(ctx, recs); err != nil {
		t.Fatal(err)
	}
	n, err := st.Count(ctx)
	if err != nil || n != int64(len(recs)) {
		t.Fatalf("Count = %d, %v; want %d", n, err, len(recs))
	}

	urls := []string{"", "https://www.network.example/company/no-such-company"}
	var domains []string
	for _, r := range recs {
		urls = append(urls, *r.NetworkURL)
		if r.Domain != nil {
			domains = append(domains, *r.Domain)
		}
	}
	got, err := st.ByNetworkURL(ctx, urls)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(urls) || got[0] != nil || got[1] != nil {
		t.Fatalf("empty or unknown input matched: %v %v", got[0], got[1])
	}
	for i, r := range recs {
		if !reflect.DeepEqual(got[i+2], &r) {
			t.Fatalf("ByNetworkURL(%s):\n got %s\nwant %s", *r.NetworkURL, mustJSON(t, got[i+2]), mustJSON(t, r))
		}
	}
	byDom, err := st.ByDomain(ctx, domains)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range domains {
		if byDom[i] == nil || *byDom[i].Domain != d {
			t.Fatalf("ByDomain(%s) = %v", d, byDom[i])
		}
	}

	// Empty batches are fine and cost nothing.
	if got, err := st.ByDomain(ctx, nil); err != nil || len(got) != 0 {
		t.Fatalf("ByDomain(nil) = %v, %v", got, err)
	}
	if err := st.Put(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

// TestStoreJSONShape pins the wire form: every data field present, nulls
// as null, arrays as [].
func TestStoreJSONShape(t *testing.T) {
	ctx := context.Background()
	st, _ := newTestStore(t)
	rec := Record{NetworkID: new(int64(42)), NetworkURL: new("https://www.network.example/company/bare")}
	if err := st.Put(ctx, []Record{rec}); err != nil {
		t.Fatal(err)
	}
	got, err := st.ByNetworkURL(ctx, []string{*rec.NetworkURL})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"network_url":"https://www.network.example/company/bare","network_id":42,"name":null,"description":null,` +
		`"website":null,"domain":null,"email_domain":null,"industry":null,"company_size":null,"employee_count":null,` +
		`"company_type":null,"headquarters":null,"founded_year":null,"specialties":[],"follower_count":null,"similar_companies":[]}`
	if s := mustJSON(t, got[0]); s != want {
		t.Fatalf("JSON:\n got %s\nwant %s", s, want)
	}
}

func TestByDomainMatchesOwnWebsiteOnly(t *testing.T) {
	ctx := context.Background()
	st, _ := newTestStore(t)
	recs := generated(t, 4, 1) // the fixed entries
	// A second company that hosts its email on northwind.example must not
	// be found by that domain.
	recs = append(recs, Record{
		NetworkID: new(int64(77)), NetworkURL: new("https://www.network.example/company/northwind-mail-reseller"),
		Domain: new("reseller.example"), EmailDomain: new("northwind.example"),
	})
	if err := st.Put(ctx, recs); err != nil {
		t.Fatal(err)
	}
	got, err := st.ByDomain(ctx, []string{"fabrikam.example", "mail.fabrikam.example", "northwind.example", "reseller.example"})
	if err != nil {
		t.Fatal(err)
	}
	if got[0] == nil || *got[0].Name != "Fabrikam Robotics" {
		t.Errorf("fabrikam.example: got %v", got[0])
	}
	if got[1] != nil {
		t.Errorf("email domain mail.fabrikam.example matched %s", *got[1].Name)
	}
	if got[2] == nil || *got[2].Name != "Northwind Traders" {
		t.Errorf("northwind.example: got %v, want Northwind Traders", got[2])
	}
	if got[3] == nil || *got[3].NetworkID != 77 {
		t.Errorf("reseller.example: got %v", got[3])
	}
	// Tailspin Toys has no website: reachable by URL only.
	tail, err := st.ByNetworkURL(ctx, []string{"https://www.network.example/company/tailspin-toys"})
	if err != nil || tail[0] == nil || tail[0].Domain != nil {
		t.Fatalf("tailspin: %v, %v", tail[0], err)
	}
}

func TestPutIdempotent(t *testing.T) {
	ctx := context.Background()
	st, rdb := newTestStore(t)
	recs := generated(t, 2500, 5) // more than one script batch
	if err := st.Put(ctx, recs); err != nil {
		t.Fatal(err)
	}
	before := dumpKeys(t, rdb, testPrefix)
	if err := st.Put(ctx, recs); err != nil {
		t.Fatal(err)
	}
	after := dumpKeys(t, rdb, testPrefix)
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("state changed on re-put: %d keys before, %d after", len(before), len(after))
	}
	if n, _ := st.Count(ctx); n != int64(len(recs)) {
		t.Fatalf("Count = %d after re-put, want %d", n, len(recs))
	}
}

func TestPutRemovesStaleIndexEntries(t *testing.T) {
	ctx := context.Background()
	st, rdb := newTestStore(t)
	const (
		oldURL = "https://www.network.example/company/old-name"
		newURL = "https://www.network.example/company/new-name"
		oldDom = "old.example"
		newDom = "new.example"
	)
	put := func(recs ...Record) {
		t.Helper()
		if err := st.Put(ctx, recs); err != nil {
			t.Fatal(err)
		}
	}
	found := func(byURL bool, key string) *Record {
		t.Helper()
		var got []*Record
		var err error
		if byURL {
			got, err = st.ByNetworkURL(ctx, []string{key})
		} else {
			got, err = st.ByDomain(ctx, []string{key})
		}
		if err != nil {
			t.Fatal(err)
		}
		return got[0]
	}
	indexSizes := func() (int64, int64) {
		return hashFieldCount(t, rdb, testPrefix+keyURLIdx+"*"), hashFieldCount(t, rdb, testPrefix+keyDomIdx+"*")
	}

	put(Record{NetworkID: new(int64(1)), NetworkURL: new(oldURL), Domain: new(oldDom), Name: new("Old")})
	put(Record{NetworkID: new(int64(1)), NetworkURL: new(newURL), Domain: new(newDom), Name: new("New")})
	if found(true, oldURL) != nil || found(false, oldDom) != nil {
		t.Fatal("old URL or domain still matches")
	}
	if r := found(true, newURL); r == nil || *r.Name != "New" {
		t.Fatalf("new URL: %v", r)
	}
	if r := found(false, newDom); r == nil || *r.Name != "New" {
		t.Fatalf("new domain: %v", r)
	}
	if u, d := indexSizes(); u != 1 || d != 1 {
		t.Fatalf("index entries = %d URL, %d domain; want 1, 1", u, d)
	}

	// Dropping the domain removes its entry too.
	put(Record{NetworkID: new(int64(1)), NetworkURL: new(newURL)})
	if found(false, newDom) != nil {
		t.Fatal("dropped domain still matches")
	}
	if u, d := indexSizes(); u != 1 || d != 0 {
		t.Fatalf("index entries = %d URL, %d domain; want 1, 0", u, d)
	}

	// Another company (id 2) takes over newDom; when id 1 later moves away
	// from a domain it no longer owns in the index, id 2's entry stays.
	put(Record{NetworkID: new(int64(1)), NetworkURL: new(newURL), Domain: new(newDom)})
	put(Record{NetworkID: new(int64(2)), NetworkURL: new(oldURL), Domain: new(newDom), Name: new("Two")})
	put(Record{NetworkID: new(int64(1)), NetworkURL: new(newURL), Domain: new(oldDom)})
	if r := found(false, newDom); r == nil || *r.NetworkID != 2 {
		t.Fatalf("newDom should belong to id 2, got %v", r)
	}
	if r := found(false, oldDom); r == nil || *r.NetworkID != 1 {
		t.Fatalf("oldDom should belong to id 1, got %v", r)
	}
	if n, _ := st.Count(ctx); n != 2 {
		t.Fatalf("Count = %d, want 2", n)
	}

	// Changes within one batch are applied in order.
	put(
		Record{NetworkID: new(int64(3)), NetworkURL: new("https://www.network.example/company/a")},
		Record{NetworkID: new(int64(3)), NetworkURL: new("https://www.network.example/company/b")},
	)
	if found(true, "https://www.network.example/company/a") != nil || found(true, "https://www.network.example/company/b") == nil {
		t.Fatal("in-batch rename not applied")
	}
}

func TestPutValidation(t *testing.T) {
	st, _ := newTestStore(t)
	url := new("https://www.network.example/company/x")
	for name, r := range map[string]Record{
		"no id":       {NetworkURL: url},
		"zero id":     {NetworkID: new(int64(0)), NetworkURL: url},
		"id too big":  {NetworkID: new(int64(MaxNetworkID + 1)), NetworkURL: url},
		"no keys":     {NetworkID: new(int64(1))},
		"empty url":   {NetworkID: new(int64(1)), NetworkURL: new("")},
		"long domain": {NetworkID: new(int64(1)), Domain: new(strings.Repeat("a", maxKeyLen+1))},
	} {
		if err := st.Put(context.Background(), []Record{r}); err == nil {
			t.Errorf("%s: Put succeeded", name)
		}
	}
}

func TestLookupLargeBatch(t *testing.T) {
	ctx := context.Background()
	st, _ := newTestStore(t)
	recs := generated(t, 2*MaxBatch+10, 3)
	if err := st.Put(ctx, recs); err != nil {
		t.Fatal(err)
	}
	urls := make([]string, len(recs))
	for i := range recs {
		urls[len(recs)-1-i] = *recs[i].NetworkURL
	}
	got, err := st.ByNetworkURL(ctx, urls)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range got {
		if r == nil || *r.NetworkURL != urls[i] {
			t.Fatalf("result %d: %v, want %s", i, r, urls[i])
		}
	}
}

func TestCountEmpty(t *testing.T) {
	st, _ := newTestStore(t)
	if n, err := st.Count(context.Background()); n != 0 || err != nil {
		t.Fatalf("Count = %d, %v", n, err)
	}
}
