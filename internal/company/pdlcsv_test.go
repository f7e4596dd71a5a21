package company

import (
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// writePDLCSV writes records in the PDL dialect: fields that need it are
// quoted, with \" and \\ escapes inside quotes.
func writePDLCSV(w *strings.Builder, records [][]string) {
	for _, rec := range records {
		for i, f := range rec {
			if i > 0 {
				w.WriteByte(',')
			}
			if f != "" && !strings.ContainsAny(f, ",\"\\\r\n") {
				w.WriteString(f)
				continue
			}
			w.WriteByte('"')
			for j := 0; j < len(f); j++ {
				if f[j] == '"' || f[j] == '\\' {
					w.WriteByte('\\')
				}
				w.WriteByte(f[j])
			}
			w.WriteByte('"')
		}
		w.WriteByte('\n')
	}
}

// readAllPDLCSV returns the records and the number of malformed ones.
func readAllPDLCSV(t testing.TB, in string) ([][]string, int) {
	t.Helper()
	r := newPDLCSVReader(strings.NewReader(in))
	var recs [][]string
	bad := 0
	// Every call consumes at least one byte, so len(in)+2 calls suffice.
	for i := 0; i <= len(in)+2; i++ {
		f, err := r.Next()
		switch {
		case errors.Is(err, io.EOF):
			return recs, bad
		case errors.Is(err, errMalformedRecord):
			bad++
		case err != nil:
			t.Fatalf("unexpected error: %v", err)
		default:
			recs = append(recs, append([]string(nil), f...))
		}
	}
	t.Fatalf("reader did not reach EOF on %q", in)
	return nil, 0
}

func TestPDLCSVReader(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     [][]string
		bad      int
	}{
		{"plain", "a,b,c\n1,2,3\n", [][]string{{"a", "b", "c"}, {"1", "2", "3"}}, 0},
		{"no final newline", "a,b\n1,2", [][]string{{"a", "b"}, {"1", "2"}}, 0},
		{"crlf", "a,b\r\n1,2\r\n", [][]string{{"a", "b"}, {"1", "2"}}, 0},
		{"empty fields", ",,\n\"\",x,\n", [][]string{{"", "", ""}, {"", "x", ""}}, 0},
		{"blank lines skipped", "a\n\n\r\nb\n", [][]string{{"a"}, {"b"}}, 0},
		{"escaped quote", `"say \"hi\"",x` + "\n", [][]string{{`say "hi"`, "x"}}, 0},
		{"escaped backslash", `"C:\\dir\\",x` + "\n", [][]string{{`C:\dir\`, "x"}}, 0},
		{"other escape kept", `"a\nb"` + "\n", [][]string{{`a\nb`}}, 0},
		{"comma and newline inside", "\"a,b\nc\",d\n", [][]string{{"a,b\nc", "d"}}, 0},
		{"doubled quote accepted", `"a""b",c` + "\n", [][]string{{`a"b`, "c"}}, 0},
		{"quote inside unquoted is literal", `ab"c,d` + "\n", [][]string{{`ab"c`, "d"}}, 0},
		{"text after closing quote", "\"a\"b,c\nx,y\n", [][]string{{"x", "y"}}, 1},
		{"unterminated quote at EOF", "x,y\n\"abc", [][]string{{"x", "y"}}, 1},
		{"backslash at EOF", "\"abc\\", nil, 1},
		{"empty input", "", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, bad := readAllPDLCSV(t, tc.in)
			if !reflect.DeepEqual(got, tc.want) || bad != tc.bad {
				t.Fatalf("got %q (%d bad), want %q (%d bad)", got, bad, tc.want, tc.bad)
			}
		})
	}
}

func TestPDLCSVReaderLongRecord(t *testing.T) {
	in := "a,b\n" + strings.Repeat("x", maxRecordBytes+10) + ",y\nc,d\n"
	got, bad := readAllPDLCSV(t, in)
	if bad != 1 || !reflect.DeepEqual(got, [][]string{{"a", "b"}, {"c", "d"}}) {
		t.Fatalf("got %q, %d bad", got, bad)
	}
}

func TestPDLCSVReaderError(t *testing.T) {
	boom := errors.New("boom")
	r := newPDLCSVReader(io.MultiReader(strings.NewReader("a,b\n1,"), iotest.ErrReader(boom)))
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Next(); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
}

// FuzzPDLCSV: arbitrary input never panics or loops, and any three fields
// survive a round trip through writePDLCSV.
func FuzzPDLCSV(f *testing.F) {
	f.Add([]byte("a,\"b\\\"c\",d\n"), "plain", `with "quotes"`, "comma, and\nnewline")
	f.Add([]byte("\"unterminated"), "", `\`, `\\"`)
	f.Add([]byte("x\r\n\"a\"\"b\"\r\n"), "\r", "\r\n", "trailing\\")
	f.Fuzz(func(t *testing.T, raw []byte, a, b, c string) {
		readAllPDLCSV(t, string(raw)) // must not panic or fail to terminate

		var w strings.Builder
		want := [][]string{{"h1", "h2", "h3"}, {a, b, c}}
		writePDLCSV(&w, want)
		got, bad := readAllPDLCSV(t, w.String())
		if bad != 0 || !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip of %q:\n got %q (%d bad)\nwant %q", w.String(), got, bad, want)
		}
	})
}
