//go:build e2ecluster

package cluster_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/bulkctl"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/test/companyapi"
)

// (j) bulkctl against the cluster's API Service: a CSV of companies is
// submitted, waited for (the job runs as processor pods) and downloaded as
// JSON Lines; every row is what the API's own results pages give.
func TestBulkctlThroughTheService(t *testing.T) {
	rows := companyapi.ScenarioRows()
	_, key := account(t, credits.Whole(1_000))
	dir := t.TempDir()
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	_ = w.Write([]string{"linkedin", "website"})
	for _, r := range rows {
		var n, d string
		if r.NetworkURL != nil {
			n = *r.NetworkURL
		}
		if r.Domain != nil {
			d = *r.Domain
		}
		_ = w.Write([]string{n, d})
	}
	w.Flush()
	in := filepath.Join(dir, "companies.csv")
	if err := os.WriteFile(in, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ctl := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		env := map[string]string{"BULKD_API_KEY": key, "BULKD_URL": h.apiURL}
		code := bulkctl.Main(context.Background(), args, bulkctl.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
			Getenv: func(k string) string { return env[k] }, Version: "e2e"})
		if code != 0 {
			t.Fatalf("bulkctl %s: exit %d\n%s", strings.Join(args, " "), code, errb.String())
		}
		return strings.TrimSpace(out.String())
	}
	start := time.Now()
	handle := ctl("company", "submit", in)
	ctl("wait", handle, "--timeout", "5m")
	timing(t, "(j) bulkctl submit -> wait done", time.Since(start))
	out := filepath.Join(dir, "results.jsonl")
	ctl("results", handle, "--out", out)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	id := strings.TrimPrefix(handle, "company:")
	want := clusterAPI(t).Results(key, id)
	if len(lines) != len(want) {
		t.Fatalf("bulkctl wrote %d rows, the API has %d", len(lines), len(want))
	}
	for i, l := range lines {
		var got map[string]any
		if err := json.Unmarshal([]byte(l), &got); err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want[i])
		if !bytes.Equal(g, w) {
			t.Fatalf("row %d: bulkctl %s, API %s", i, g, w)
		}
	}
	if s := ctl("credits"); !strings.Contains(s, "credits") {
		t.Errorf("bulkctl credits: %s", s)
	}
}
