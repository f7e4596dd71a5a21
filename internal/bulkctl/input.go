package bulkctl

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/bulkd/bulkd/internal/csvsniff"
	"github.com/bulkd/bulkd/internal/family/form"
)

// table is an input file: its columns and its rows. A CSV file's header
// is read at once and its records one by one as they are used (a large
// file is never held whole); JSON Lines objects are all read first, since
// their keys (in first-seen order) are the columns.
type table struct {
	cols  []string
	first []string                 // the first data row; nil when there is none
	rest  func() ([]string, error) // the row after the previous one; io.EOF at the end
}

// each calls fn with every data row, first included, and returns how many
// there were.
func (t *table) each(fn func(rec []string)) (int, error) {
	if t.first == nil {
		return 0, nil
	}
	fn(t.first)
	for n := 1; ; n++ {
		rec, err := t.rest()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, &UsageError{err}
		}
		fn(rec)
	}
}

// readTable reads CSV (with a header row) or JSON Lines. format is "csv",
// "jsonl" or "" (from the file name's extension, else from the first byte:
// '{' or '"' is JSON Lines).
func readTable(r io.Reader, name, format string) (*table, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	if format == "" {
		switch strings.ToLower(filepath.Ext(name)) {
		case ".jsonl", ".ndjson", ".json":
			format = "jsonl"
		case ".csv", ".tsv", ".txt":
			format = "csv"
		default:
			format = "csv"
			if b, err := peekNonSpace(br); err == nil && (b == '{' || b == '"') {
				format = "jsonl"
			}
		}
	}
	switch format {
	case "csv":
		return readCSV(br)
	case "jsonl":
		return readJSONL(br)
	}
	return nil, fmt.Errorf("unknown input format %q (want csv or jsonl)", format)
}

func peekNonSpace(br *bufio.Reader) (byte, error) {
	for n := 1; n <= 4096; n++ {
		b, err := br.Peek(n)
		if len(b) < n {
			return 0, err
		}
		c := b[n-1]
		if c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == 0xEF || c == 0xBB || c == 0xBF {
			continue
		}
		return c, nil
	}
	return 0, io.EOF
}

func readCSV(br *bufio.Reader) (*table, error) {
	// The delimiter: the dashboard's rule for uploads (csvsniff).
	first, _ := br.Peek(4096)
	if i := bytes.IndexByte(first, '\n'); i >= 0 {
		first = first[:i]
	}
	cr := csv.NewReader(br)
	cr.Comma = csvsniff.Comma(string(first))
	cr.FieldsPerRecord = -1
	cr.LazyQuotes = true
	t := &table{}
	head, err := cr.Read()
	if err == io.EOF {
		return t, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the CSV header: %w", err)
	}
	if len(head) > 0 {
		head[0] = strings.TrimPrefix(head[0], "\ufeff")
	}
	t.cols = head
	t.rest = func() ([]string, error) {
		rec, err := cr.Read()
		if err != nil && err != io.EOF {
			err = fmt.Errorf("reading the CSV: %w", err)
		}
		return rec, err
	}
	if t.first, err = t.rest(); err != nil && err != io.EOF {
		return nil, err
	}
	return t, nil
}

func readJSONL(br *bufio.Reader) (*table, error) {
	t := &table{}
	var rows [][]string
	index := map[string]int{}
	dec := json.NewDecoder(br)
	dec.UseNumber()
	line := 0
	for {
		var v any
		err := dec.Decode(&v)
		if err == io.EOF {
			if len(rows) > 0 {
				t.first, rows = rows[0], rows[1:]
			}
			t.rest = func() ([]string, error) {
				if len(rows) == 0 {
					return nil, io.EOF
				}
				rec := rows[0]
				rows[0], rows = nil, rows[1:]
				return rec, nil
			}
			return t, nil
		}
		line++
		if err != nil {
			return nil, fmt.Errorf("reading JSON Lines, record %d: %w", line, err)
		}
		switch o := v.(type) {
		case map[string]any:
			row := make([]string, len(t.cols))
			for k, val := range o {
				i, ok := index[k]
				if !ok {
					i = len(t.cols)
					index[k] = i
					t.cols = append(t.cols, k)
				}
				for len(row) <= i {
					row = append(row, "")
				}
				row[i] = jsonText(val)
			}
			rows = append(rows, row)
		case string:
			// A bare string is a value of the column "value" (a list of
			// addresses as JSON strings).
			i, ok := index["value"]
			if !ok {
				i = len(t.cols)
				index["value"] = i
				t.cols = append(t.cols, "value")
			}
			row := make([]string, i+1)
			row[i] = o
			rows = append(rows, row)
		default:
			return nil, fmt.Errorf("reading JSON Lines, record %d: want an object or a string", line)
		}
	}
}

func jsonText(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case json.Number:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}

func (t *table) cell(row []string, col int) string {
	if col < 0 || col >= len(row) {
		return ""
	}
	return row[col]
}

// findColumn is the index of the column named name: exactly, then by its
// normalized name; -1 when there is none.
func (t *table) findColumn(name string) int {
	for i, c := range t.cols {
		if strings.TrimSpace(c) == strings.TrimSpace(name) {
			return i
		}
	}
	n := form.Norm(name)
	for i, c := range t.cols {
		if form.Norm(c) == n {
			return i
		}
	}
	return -1
}

// guess is the first column that means field f (its name, then its
// aliases, best first: the form the dashboard reads too); -1 when none.
func (t *table) guess(f form.Field) int {
	for _, n := range aliases(f) {
		for i, c := range t.cols {
			if form.Norm(c) == n {
				return i
			}
		}
	}
	return -1
}

// aliases are the normalized column names that mean f, best first.
func aliases(f form.Field) []string { return append([]string{form.Norm(f.Name)}, f.Aliases...) }

// Prepared is an input made into a family's submission rows.
type Prepared struct {
	Items      []json.RawMessage // one JSON value per row to submit, in input order
	Read       int               // data rows read
	Skipped    int               // rows left out (blank or over the API's length limits)
	Duplicates int               // repeats left out (families that answer unique inputs)
	Columns    []string          // the columns used
	Warnings   []string
}

// UsageError is a problem with the command line or the input file.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usagef(format string, args ...any) error { return &UsageError{fmt.Errorf(format, args...)} }

// Prepare reads an input file for family f. columns are the --column
// names (comma separated in the flag), empty to guess.
func Prepare(f *Family, r io.Reader, name, format string, columns []string) (*Prepared, error) {
	t, err := readTable(r, name, format)
	if err != nil {
		return nil, &UsageError{err}
	}
	switch f.Kind {
	case Company.Kind:
		return prepareCompany(t, columns)
	case Verify.Kind:
		return prepareVerify(t, columns)
	default:
		return prepareLookup(t, columns)
	}
}

func (t *table) pick(columns []string, want int, what string) ([]int, error) {
	if len(columns) > 0 && (want > 0 && len(columns) != want) {
		return nil, usagef("--column: %s takes %d column names, got %d", what, want, len(columns))
	}
	var idx []int
	for _, c := range columns {
		i := t.findColumn(c)
		if i < 0 {
			return nil, usagef("--column: no column %q in the input (columns: %s)", c, strings.Join(t.cols, ", "))
		}
		idx = append(idx, i)
	}
	return idx, nil
}

func (t *table) names(idx []int) []string {
	var out []string
	for _, i := range idx {
		out = append(out, t.cols[i])
	}
	return out
}

func prepareCompany(t *table, columns []string) (*Prepared, error) {
	idx, err := t.pick(columns, 0, "company")
	if err != nil {
		return nil, err
	}
	if len(idx) == 0 {
		// Every column that means either field: each value is placed by
		// what it looks like, whatever its column's name.
		seen := map[int]bool{}
		for _, f := range form.Company.Fields {
			for _, n := range aliases(f) {
				for i, c := range t.cols {
					if form.Norm(c) == n && !seen[i] {
						seen[i] = true
						idx = append(idx, i)
					}
				}
			}
		}
		if len(idx) == 0 && len(t.cols) == 1 {
			idx = []int{0}
		}
		if len(idx) == 0 {
			return nil, usagef("no company column found (columns: %s); name it with --column (e.g. --column linkedin,website)", strings.Join(t.cols, ", "))
		}
	}
	p := &Prepared{Columns: t.names(idx)}
	type row struct {
		NetworkURL string `json:"network_url,omitempty"`
		Domain     string `json:"domain,omitempty"`
	}
	long := 0
	nu, dm := form.Company.Fields[0], form.Company.Fields[1]
	p.Read, err = t.each(func(rec []string) {
		var r row
		for _, i := range idx {
			v := strings.TrimSpace(t.cell(rec, i))
			if v == "" {
				continue
			}
			if utf8.RuneCountInString(v) > max(nu.MaxLen, dm.MaxLen) {
				long++
				continue
			}
			if nu.Looks(v) {
				if r.NetworkURL == "" {
					r.NetworkURL = v
				}
			} else if r.Domain == "" {
				r.Domain = v
			}
		}
		// A row with nothing usable is still sent (as {}): the server
		// answers it invalid_url at no cost and the results stay one row
		// per input row.
		b, _ := json.Marshal(r)
		p.Items = append(p.Items, b)
	})
	if err != nil {
		return nil, err
	}
	if long > 0 {
		p.Warnings = append(p.Warnings, fmt.Sprintf("%d values over 2,048 characters were left out (their rows are answered invalid_url)", long))
	}
	return p, nil
}

// verifyKey is the dedupe key of an address: trimmed, the domain in lower
// case and the local part too unless it is quoted. The server merges
// everything this merges (and more: IDN forms), so dropping these repeats
// before a split changes neither the charge nor the results.
func verifyKey(v string) string {
	v = strings.TrimSpace(v)
	at := strings.LastIndexByte(v, '@')
	if at < 0 {
		return strings.ToLower(v)
	}
	local, domain := v[:at], strings.ToLower(v[at+1:])
	if !strings.HasPrefix(local, `"`) {
		local = strings.ToLower(local)
	}
	return local + "@" + domain
}

func prepareVerify(t *table, columns []string) (*Prepared, error) {
	idx, err := t.pick(columns, 1, "verify")
	if err != nil {
		return nil, err
	}
	if len(idx) == 0 {
		if i := t.guess(form.Verification.Fields[0]); i >= 0 {
			idx = []int{i}
		} else if len(t.cols) == 1 {
			idx = []int{0}
		} else {
			// The first column whose first value looks like an address.
			for i := range t.cols {
				if strings.Contains(t.cell(t.first, i), "@") {
					idx = []int{i}
					break
				}
			}
		}
		if len(idx) == 0 {
			return nil, usagef("no email column found (columns: %s); name it with --column", strings.Join(t.cols, ", "))
		}
	}
	col := idx[0]
	p := &Prepared{Columns: t.names(idx)}
	seen := map[string]struct{}{}
	add := func(rec []string) {
		v := strings.TrimSpace(t.cell(rec, col))
		if n := utf8.RuneCountInString(v); n < 3 || n > form.Verification.Fields[0].MaxLen {
			p.Skipped++
			return
		}
		p.addUnique(seen, verifyKey(v), v)
	}
	// A one-column CSV whose "header" is an address has no header.
	headless := len(t.cols) == 1 && strings.Contains(t.cols[0], "@")
	if headless {
		add(t.cols)
	}
	if p.Read, err = t.each(add); err != nil {
		return nil, err
	}
	if headless {
		p.Read++
	}
	if p.Skipped > 0 {
		p.Warnings = append(p.Warnings, fmt.Sprintf("%d rows left out: blank, or shorter than 3 or longer than 320 characters", p.Skipped))
	}
	return p, nil
}

// addUnique adds v as the next item unless an item of the same key was
// added before (then it counts a duplicate).
func (p *Prepared) addUnique(seen map[string]struct{}, k string, v any) {
	if _, dup := seen[k]; dup {
		p.Duplicates++
		return
	}
	seen[k] = struct{}{}
	b, _ := json.Marshal(v)
	p.Items = append(p.Items, b)
}

func prepareLookup(t *table, columns []string) (*Prepared, error) {
	idx, err := t.pick(columns, 3, "lookup (first name, last name, domain)")
	if err != nil {
		return nil, err
	}
	if len(idx) == 0 {
		fs := form.Lookup.Fields
		idx = []int{t.guess(fs[0]), t.guess(fs[1]), t.guess(fs[2])}
		for k, what := range []string{"first name", "last name", "domain"} {
			if idx[k] < 0 {
				return nil, usagef("no %s column found (columns: %s); name the three with --column first,last,domain", what, strings.Join(t.cols, ", "))
			}
		}
	}
	p := &Prepared{Columns: t.names(idx)}
	type row struct {
		FirstName string `json:"first_name"`
		LastName  string `json:"last_name"`
		Domain    string `json:"domain"`
	}
	seen := map[string]struct{}{}
	p.Read, err = t.each(func(rec []string) {
		r := row{t.cell(rec, idx[0]), t.cell(rec, idx[1]), t.cell(rec, idx[2])}
		for _, v := range []string{r.FirstName, r.LastName, r.Domain} {
			if strings.TrimSpace(v) == "" || utf8.RuneCountInString(v) > form.Lookup.Fields[0].MaxLen {
				p.Skipped++
				return
			}
		}
		// The server's rule exactly (docs/api.md): the three fields,
		// trimmed and lower-cased.
		k := strings.ToLower(strings.TrimSpace(r.FirstName)) + "\x00" + strings.ToLower(strings.TrimSpace(r.LastName)) +
			"\x00" + strings.ToLower(strings.TrimSpace(r.Domain))
		p.addUnique(seen, k, r)
	})
	if err != nil {
		return nil, err
	}
	if p.Skipped > 0 {
		p.Warnings = append(p.Warnings, fmt.Sprintf("%d rows left out: a blank field, or one over 255 characters", p.Skipped))
	}
	return p, nil
}

// Chunks splits items into submissions of at most maxRows rows and
// maxBodyBytes of body each. It returns the bounds [start, end) of each.
func Chunks(items []json.RawMessage, maxRows int) [][2]int {
	var out [][2]int
	start, size := 0, 0
	for i, it := range items {
		if i > start && (i-start >= maxRows || size+len(it)+1 > maxBodyBytes-64) {
			out = append(out, [2]int{start, i})
			start, size = i, 0
		}
		size += len(it) + 1
	}
	if start < len(items) {
		out = append(out, [2]int{start, len(items)})
	}
	return out
}

// body is the submission body of items (the family's form's shape).
func body(f *Family, items []json.RawMessage) []byte { return f.Form.Body(items) }

var errEmpty = errors.New("nothing to submit: the input has no usable rows")
