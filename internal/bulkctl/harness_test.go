package bulkctl_test

// bulkctl against a real standalone bulkd (internal/bulkdtest: a private
// redis-server and the whole server on loopback) and, for verification and
// lookup, the project's mail world (authoritative DNS and SMTP on
// loopback).

import (
	"bytes"
	"context"
	"encoding/csv"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/bulkctl"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/mailworld"
)

// ctl runs bulkctl in-process against url with key.
type ctl struct {
	t        testing.TB
	url, key string
	stdin    string
	terminal bool
}

type result struct {
	code           int
	stdout, stderr string
}

func (c ctl) run(args ...string) result {
	c.t.Helper()
	var out, errb bytes.Buffer
	envv := map[string]string{"BULKD_API_KEY": c.key, "BULKD_URL": c.url}
	start := time.Now()
	code := bulkctl.Main(context.Background(), args, bulkctl.Env{
		Stdin: strings.NewReader(c.stdin), Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string { return envv[k] }, Version: "test", Terminal: c.terminal,
	})
	c.t.Logf("bulkctl %s: exit %d in %s\n%s", strings.Join(args, " "), code, time.Since(start).Round(time.Millisecond), tail(errb.String(), 1500))
	return result{code, strings.TrimSpace(out.String()), errb.String()}
}

// must runs bulkctl and fails the test unless it exits 0.
func (c ctl) must(args ...string) string {
	c.t.Helper()
	r := c.run(args...)
	if r.code != 0 {
		c.t.Fatalf("bulkctl %s: exit %d\n%s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// world is a small mail world: acme.test (alice, bob), initech.test
// ({first}.{last}), catchall.test, a null-MX and an NXDOMAIN domain.
func world(t testing.TB) *mailworld.World {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := mailworld.Start(ctx, mailworld.Spec{
		Hosts: []mailworld.Host{{Name: "mx.acme.test"}, {Name: "mx.initech.test"}, {Name: "mx.catchall.test"}},
		Domains: []mailworld.Domain{
			{Name: "acme.test", MX: []string{"mx.acme.test"}, Users: []string{"alice", "bob"}},
			{Name: "initech.test", MX: []string{"mx.initech.test"}, Users: []string{"jane.doe", "john.smith"}},
			{Name: "catchall.test", MX: []string{"mx.catchall.test"}, CatchAll: true},
			{Name: "nullmx.test", DNS: mailworld.DNSNullMX},
			{Name: "nxdomain.test", DNS: mailworld.DNSNXDomain},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// startWithWorld runs a bulkd pointed at a mail world.
func startWithWorld(t testing.TB, opts ...bulkdtest.Option) *bulkdtest.Env {
	t.Helper()
	return bulkdtest.Start(t, append([]bulkdtest.Option{bulkdtest.WithMailWorld(world(t))}, opts...)...)
}

func writeFile(t testing.TB, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// readCSV reads a results CSV: header and rows.
func readCSV(t testing.TB, path string) ([]string, [][]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(recs) == 0 {
		t.Fatalf("%s is empty", path)
	}
	return recs[0], recs[1:]
}

// column is the values of one column.
func column(t testing.TB, head []string, rows [][]string, name string) []string {
	t.Helper()
	i := -1
	for k, h := range head {
		if h == name {
			i = k
		}
	}
	if i < 0 {
		t.Fatalf("no column %q in %v", name, head)
	}
	var out []string
	for _, r := range rows {
		out = append(out, r[i])
	}
	return out
}

func readAll(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
