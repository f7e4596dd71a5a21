package bulkctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func items(t *testing.T, p *Prepared) []string {
	t.Helper()
	var out []string
	for _, it := range p.Items {
		out = append(out, string(it))
	}
	return out
}

func TestPrepareGuessesColumns(t *testing.T) {
	cases := []struct {
		name    string
		f       *Family
		in      string
		file    string
		columns []string
		want    []string
		used    string
	}{
		{"company: LinkedIn and website columns, the value decides", Company,
			"Name,LinkedIn,Website\nA,https://www.linkedin.com/company/a,a.example\nB,,https://b.example/x\nC,,\nD,,linkedin.com/company/d\n",
			"x.csv", nil,
			[]string{`{"network_url":"https://www.linkedin.com/company/a","domain":"a.example"}`, `{"domain":"https://b.example/x"}`, `{}`, `{"network_url":"linkedin.com/company/d"}`},
			"LinkedIn, Website"},
		{"company: JSON Lines with the API's own fields", Company,
			`{"network_url":"https://www.linkedin.com/company/a"}` + "\n" + `{"domain":"b.example"}` + "\n", "x", nil,
			[]string{`{"network_url":"https://www.linkedin.com/company/a"}`, `{"domain":"b.example"}`}, "network_url, domain"},
		{"company: --column", Company, "a,b\nx.example,y.example\n", "x.csv", []string{"b"},
			[]string{`{"domain":"y.example"}`}, "b"},
		{"lookup: variants, semicolons, repeats dropped, blanks left out", Lookup,
			"First Name;Surname;Company Website\nJane;Doe;acme.com\n jane;DOE ;ACME.com\nJohn;;acme.com\n", "p.csv", nil,
			[]string{`{"first_name":"Jane","last_name":"Doe","domain":"acme.com"}`}, "First Name, Surname, Company Website"},
		{"lookup: tabs, given name/family name/domain", Lookup,
			"given-name\tfamily name\tdomain\nA\tB\tc.com\n", "p.tsv", nil,
			[]string{`{"first_name":"A","last_name":"B","domain":"c.com"}`}, "given-name, family name, domain"},
		{"lookup: --column", Lookup, "x,y,z\nA,B,c.com\n", "p.csv", []string{"x", "y", "z"},
			[]string{`{"first_name":"A","last_name":"B","domain":"c.com"}`}, "x, y, z"},
		{"verify: e-mail column, case repeats dropped, quoted local part kept", Verify,
			"id,E-Mail\n1,A@X.test\n2,a@x.TEST\n3,\"\"\"Q\"\"@x.test\"\n4,\"\"\"q\"\"@x.test\"\n5,ab\n", "v.csv", nil,
			[]string{`"A@X.test"`, `"\"Q\"@x.test"`, `"\"q\"@x.test"`}, "E-Mail"},
		{"verify: one column whose header is an address", Verify, "a@x.test\nb@x.test\n", "v.csv", nil,
			[]string{`"a@x.test"`, `"b@x.test"`}, "a@x.test"},
		{"verify: JSON strings", Verify, `"a@x.test"` + "\n" + `"b@x.test"` + "\n", "v.jsonl", nil,
			[]string{`"a@x.test"`, `"b@x.test"`}, "value"},
		{"verify: a column of addresses with another name", Verify, "id,contact\n1,a@x.test\n", "v.csv", nil,
			[]string{`"a@x.test"`}, "contact"},
		{"verify: BOM", Verify, "\ufeffEmail\na@x.test\n", "v.csv", nil, []string{`"a@x.test"`}, "Email"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Prepare(c.f, strings.NewReader(c.in), c.file, "", c.columns)
			if err != nil {
				t.Fatal(err)
			}
			if got := items(t, p); strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Fatalf("items\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
			if got := strings.Join(p.Columns, ", "); got != c.used {
				t.Fatalf("columns %q, want %q", got, c.used)
			}
		})
	}
}

// The counts a submission reports: rows read (a header that is an
// address counted as a row), repeats and rows left out.
func TestPrepareCounts(t *testing.T) {
	for _, c := range []struct {
		f                        *Family
		in, file                 string
		read, dups, skipped, out int
	}{
		{Verify, "a@x.test\nb@x.test\nB@x.test\nab\n", "v.csv", 4, 1, 1, 2},
		{Verify, "email\na@x.test\n", "v.csv", 1, 0, 0, 1},
		{Verify, "", "v.csv", 0, 0, 0, 0},
		{Lookup, "first,last,domain\nA,B,c.com\na,b,C.com\nA,,c.com\n", "p.csv", 3, 1, 1, 1},
		{Company, `{"domain":"a.example"}` + "\n" + `{"domain":"a.example"}` + "\n{}\n", "c.jsonl", 3, 0, 0, 3},
	} {
		p, err := Prepare(c.f, strings.NewReader(c.in), c.file, "", nil)
		if c.in == "" {
			if err == nil {
				t.Errorf("%s %q: no error", c.f.Kind, c.in)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s %q: %v", c.f.Kind, c.in, err)
		}
		if p.Read != c.read || p.Duplicates != c.dups || p.Skipped != c.skipped || len(p.Items) != c.out {
			t.Errorf("%s %q: read %d, repeats %d, left out %d, items %d; want %d %d %d %d",
				c.f.Kind, c.in, p.Read, p.Duplicates, p.Skipped, len(p.Items), c.read, c.dups, c.skipped, c.out)
		}
	}
}

func TestPrepareErrors(t *testing.T) {
	for _, c := range []struct {
		f       *Family
		in      string
		columns []string
		want    string
	}{
		{Verify, "id,name\n1,Bob\n", nil, "no email column"},
		{Lookup, "first,domain\nA,b.com\n", nil, "no last name column"},
		{Lookup, "a,b,c\n", []string{"a", "b"}, "takes 3 column names"},
		{Company, "a\nx\n", []string{"nope"}, `no column "nope"`},
		{Company, "{\"a\": 1}\n[1]\n", nil, "want an object or a string"},
	} {
		_, err := Prepare(c.f, strings.NewReader(c.in), "in", "", c.columns)
		var ue *UsageError
		if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %q: %v, want a usage error with %q", c.f.Kind, c.in, err, c.want)
		}
	}
}

func TestChunks(t *testing.T) {
	its := make([]json.RawMessage, 25)
	for i := range its {
		its[i] = json.RawMessage(`"x"`)
	}
	got := Chunks(its, 10)
	if len(got) != 3 || got[0] != [2]int{0, 10} || got[2] != [2]int{20, 25} {
		t.Fatalf("%v", got)
	}
	// The body size bounds a part too.
	big := make([]json.RawMessage, 5)
	for i := range big {
		big[i] = json.RawMessage(strings.Repeat("a", maxBodyBytes/3))
	}
	if got := Chunks(big, 100); len(got) != 3 || got[0] != [2]int{0, 2} {
		t.Fatalf("by size: %v", got)
	}
	if b := body(Verify, its[:2]); string(b) != `{"emails":["x","x"]}` {
		t.Fatalf("body %s", b)
	}
}

func TestParseHandle(t *testing.T) {
	a, b := "0b6f3c2e-5d4a-4c8e-9f1a-2b3c4d5e6f70", "5E0C9A41-7B2D-4F3E-8A6C-1D2E3F4A5B6C"
	h, err := ParseHandle("verify:" + a + "," + b)
	if err != nil || h.Family != Verify || len(h.Jobs) != 2 || h.Jobs[1] != strings.ToLower(b) {
		t.Fatalf("%+v %v", h, err)
	}
	if h.String() != "verify:"+a+","+strings.ToLower(b) {
		t.Fatal(h.String())
	}
	if h, err := ParseHandle(a); err != nil || h.Family != nil {
		t.Fatalf("bare id: %+v %v", h, err)
	}
	for _, bad := range []string{"nope:" + a, "verify:", "verify:123", a + ",x"} {
		if _, err := ParseHandle(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// Whole records only: a file cut inside a quoted field that holds a line
// break, or after a record without its line end, ends at the record
// before.
func TestScanCSVDropsPartialRecord(t *testing.T) {
	whole := "a,b\n1,\"two\nlines\"\n2,\"say \"\"hi\"\"\"\n"
	for cut := 0; cut <= len(whole); cut++ {
		p := filepath.Join(t.TempDir(), "f.csv")
		if err := os.WriteFile(p, []byte(whole[:cut]), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		good, rows, _, err := scanCSV(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		var wantGood, wantRows int64
		switch {
		case cut == len(whole):
			wantGood, wantRows = int64(len(whole)), 2
		case cut >= strings.Index(whole, "2,"):
			wantGood, wantRows = int64(strings.Index(whole, "2,")), 1
		case cut >= 4:
			wantGood = 4
		}
		if good != wantGood || rows != wantRows {
			t.Errorf("cut at %d (%q): good %d rows %d, want %d %d", cut, whole[:cut], good, rows, wantGood, wantRows)
		}
	}
	rr := newRecordReader(strings.NewReader("x\n\"y"))
	if r, err := rr.next(); err != nil || string(r) != "x\n" {
		t.Fatal(string(r), err)
	}
	if _, err := rr.next(); err != io.ErrUnexpectedEOF {
		t.Fatal(err)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"": 0, "1": time.Second, "120": 2 * time.Minute, "-3": 0, "soon": 0,
		"Thu, 26 Nov 2026 10:00:30 GMT": 30 * time.Second, "Thu, 26 Nov 2026 09:00:00 GMT": 0,
	} {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("%q: %s, want %s", in, got, want)
		}
	}
}

func TestExitCodes(t *testing.T) {
	for err, want := range map[error]int{
		usagef("x"):                                      ExitUsage,
		&APIError{Status: 403}:                           ExitRefused,
		&APIError{Status: 429}:                           ExitRefused,
		&APIError{Status: 502}:                           ExitFailure,
		&NetError{Err: io.EOF}:                           ExitFailure,
		&NotFinishedError{"x"}:                           ExitNotFinished,
		&PartialSubmitError{Err: &APIError{Status: 403}}: ExitRefused,
		fmt.Errorf("polling: %w", context.Canceled):      ExitInterrupted,
	} {
		if got := ExitCode(err); got != want {
			t.Errorf("%T %v: %d, want %d", err, err, got, want)
		}
	}
}
