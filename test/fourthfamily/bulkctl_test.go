package fourthfamily_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bulkd/bulkd/internal/bulkctl"
	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/family/form"
	"github.com/bulkd/bulkd/test/fourthfamily"
)

// The proof family through bulkctl, which knows it only by its Form: a
// CSV in (columns guessed by the form's aliases, repeats dropped by its
// dedupe), the subcommand and help from the form, results out in order.
func TestPhoneLookupThroughBulkctl(t *testing.T) {
	saved := bulkctl.Families
	bulkctl.Families = bulkctl.MountsOf(append(slices.Clone(form.Builtin), fourthfamily.Form))
	t.Cleanup(func() { bulkctl.Families = saved })

	e := start(t)
	_, key := bulkdtest.NewAccount(t, e.parts, "phone-ctl", credits.Whole(10))
	dir := t.TempDir()
	in := filepath.Join(dir, "numbers.csv")
	if err := os.WriteFile(in, []byte("Name,Mobile\nAda,+1 555 0100\nBob,15550101\nAda again,+1 555 0100\nNobody,999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		env := bulkctl.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Version: "test",
			Getenv: func(k string) string {
				return map[string]string{"BULKD_API_KEY": key, "BULKD_URL": e.url}[k]
			}}
		code := bulkctl.Main(context.Background(), args, env)
		return code, out.String(), errb.String()
	}
	if code, out, _ := run("help"); code != 0 || !strings.Contains(out, "bulkctl phone   submit FILE   Phone lookup (columns phone)") {
		t.Fatalf("help (%d) names no phone subcommand:\n%s", code, out)
	}
	code, handle, stderr := run("phone", "submit", in, "--wait", "--interval", "50ms")
	if code != 0 {
		t.Fatalf("submit: exit %d\n%s", code, stderr)
	}
	handle, _, _ = strings.Cut(handle, "\n") // then --wait's status
	if !strings.HasPrefix(handle, "phone:") || !strings.Contains(stderr, "columns Mobile") || !strings.Contains(stderr, "1 repeats") {
		t.Fatalf("handle %q\n%s", handle, stderr)
	}
	outFile := filepath.Join(dir, "out.csv")
	if code, _, stderr := run("results", handle, "--out", outFile); code != 0 {
		t.Fatalf("results: exit %d\n%s", code, stderr)
	}
	b, err := os.ReadFile(outFile)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"phone", "status", "carrier", "line_type"},
		{"'+1 555 0100", "found", "Acme Mobile", "mobile"}, // a leading + is quoted for spreadsheets
		{"15550101", "found", "Initech Telecom", "landline"},
		{"999", "not_found", "", ""}}
	if len(recs) != len(want) {
		t.Fatalf("results:\n%s", b)
	}
	for i := range want {
		if !slices.Equal(recs[i], want[i]) {
			t.Errorf("row %d: %q, want %q", i, recs[i], want[i])
		}
	}
}
