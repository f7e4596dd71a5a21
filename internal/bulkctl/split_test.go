package bulkctl_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/bulkctl"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
)

// A 250,000-row CSV for verification, whose limit is 100,000 a
// submission: three jobs (100,000 + 100,000 + 50,000), one handle, and
// results joined in input order. The addresses are the cheapest a verifier
// answers: a null-MX domain and an NXDOMAIN one (one DNS answer each per
// batch) and strings that are not addresses (no network at all).
func TestVerifySplit250k(t *testing.T) {
	env := startWithWorld(t, func(c *config.Config) { c.ShardSize = 10_000; c.BatchSize = 5_000 })
	acct, key := env.Account(credits.Whole(60_000))
	c := ctl{t: t, url: env.URL, key: key}
	const n = 250_000
	want := make([]string, n)
	var b strings.Builder
	b.WriteString("id,Email Address\n")
	for i := range n {
		switch {
		case i%10 == 0:
			want[i] = fmt.Sprintf("no-address-%06d", i)
		case i%3 == 0:
			want[i] = fmt.Sprintf("u%06d@nxdomain.test", i)
		default:
			want[i] = fmt.Sprintf("u%06d@nullmx.test", i)
		}
		fmt.Fprintf(&b, "%d,%s\n", i, want[i])
	}
	in := writeFile(t, "big.csv", b.String())
	manifest := filepath.Join(t.TempDir(), "big.json")

	start := time.Now()
	h := c.must("verify", "submit", in, "--manifest", manifest)
	t.Logf("submitted in %s", time.Since(start))
	if hh, err := bulkctl.ParseHandle(h); err != nil || len(hh.Jobs) != 3 {
		t.Fatalf("handle %q: %v", h, err)
	}
	m, err := bulkctl.ReadManifest(manifest)
	if err != nil || !m.Complete || len(m.Jobs) != 3 || m.Jobs[0].Rows != 100_000 || m.Jobs[1].Rows != 100_000 ||
		m.Jobs[2].Rows != 50_000 || m.Jobs[2].FirstRow != 200_000 {
		t.Fatalf("manifest %+v %v", m, err)
	}
	if got := env.Balance(acct); got != credits.Whole(60_000)-credits.Whole(50_000) {
		t.Fatalf("balance %v, want 10000 (0.2 x 250,000 charged)", got)
	}

	c.must("wait", manifest, "--interval", "200ms", "--timeout", "60s")
	t.Logf("finished in %s", time.Since(start))
	out := filepath.Join(t.TempDir(), "big-results.csv")
	c.must("results", manifest, "--out", out)
	t.Logf("downloaded in %s", time.Since(start))
	head, rows := readCSV(t, out)
	if len(rows) != n {
		t.Fatalf("%d result rows, want %d", len(rows), n)
	}
	inputs, statuses := column(t, head, rows, "input"), column(t, head, rows, "status")
	for i := range n {
		if inputs[i] != want[i] || statuses[i] != "undeliverable" {
			t.Fatalf("row %d: %s %s, want %s undeliverable", i, inputs[i], statuses[i], want[i])
		}
	}
	st, _ := os.Stat(out)
	t.Logf("results file %d bytes", st.Size())
}
