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

// Prepare reads an input file for family f, by its form alone: the
// columns that mean its fields (--column names, comma separated in the
// flag, else guessed by their names as the dashboard guesses them), its
// lengths, its dedupe and its body's shape.
func Prepare(f *Family, r io.Reader, name, format string, columns []string) (*Prepared, error) {
	t, err := readTable(r, name, format)
	if err != nil {
		return nil, &UsageError{err}
	}
	if f.Form.ByLook() {
		return prepareByLook(t, f, columns)
	}
	return prepareFields(t, f, columns)
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

// words is a field's name as a sentence says it ("first name").
func words(f form.Field) string { return strings.ReplaceAll(f.Name, "_", " ") }

// fieldNames are fm's field names, joined by sep.
func fieldNames(fm form.Form, sep string, name func(form.Field) string) string {
	var out []string
	for _, f := range fm.Fields {
		out = append(out, name(f))
	}
	return strings.Join(out, sep)
}

// prepareByLook reads a ByLook form's rows (company): every column that
// means one of its fields, each value placed by what it looks like,
// whatever its column's name. A row with nothing usable is still sent
// (as {}): the server answers it invalid at no cost, and the results stay
// one row per input row.
func prepareByLook(t *table, f *Family, columns []string) (*Prepared, error) {
	fm := f.Form
	idx, err := t.pick(columns, 0, f.Kind)
	if err != nil {
		return nil, err
	}
	if len(idx) == 0 {
		if idx = fm.Columns(t.cols); len(idx) == 0 && len(t.cols) == 1 {
			idx = []int{0}
		}
		if len(idx) == 0 {
			return nil, usagef("no %s column found (columns: %s); name it with --column (e.g. --column %s)",
				f.Kind, strings.Join(t.cols, ", "), fieldNames(fm, ",", func(f form.Field) string { return f.Name }))
		}
	}
	p := &Prepared{Columns: t.names(idx)}
	longest := 0
	for _, fl := range fm.Fields {
		longest = max(longest, fl.MaxLen)
	}
	long := 0
	seen := map[string]struct{}{}
	p.Read, err = t.each(func(rec []string) {
		cells := make([]string, len(fm.Fields))
		for _, i := range idx {
			v := strings.TrimSpace(t.cell(rec, i))
			if v == "" {
				continue
			}
			if longest > 0 && utf8.RuneCountInString(v) > longest {
				long++
				continue
			}
			if k := fm.Place(v); cells[k] == "" {
				cells[k] = v
			}
		}
		p.add(fm, seen, cells)
	})
	if err != nil {
		return nil, err
	}
	if long > 0 {
		p.Warnings = append(p.Warnings, fmt.Sprintf("%d values over %s characters were left out (their rows are answered as invalid)", long, thousands(longest)))
	}
	return p, nil
}

// prepareFields reads a form's rows field by field (lookup, verify): one
// column per field; a row with a blank required field (every field of an
// AllRequired form, the one of a one-field form) or a value outside the
// API's lengths is left out.
func prepareFields(t *table, f *Family, columns []string) (*Prepared, error) {
	fm := f.Form
	m, idx, err := t.mapFields(f, columns)
	if err != nil {
		return nil, err
	}
	p := &Prepared{Columns: t.names(idx)}
	seen := map[string]struct{}{}
	required := fm.AllRequired || len(fm.Fields) == 1
	add := func(rec []string) {
		cells := fm.Cells(rec, m)
		if cells == nil {
			p.Skipped++
			return
		}
		for k, fl := range fm.Fields {
			n := utf8.RuneCountInString(cells[k])
			if (n == 0 && required) || (n > 0 && (n < fl.MinLen || (fl.MaxLen > 0 && n > fl.MaxLen))) {
				p.Skipped++
				return
			}
		}
		p.add(fm, seen, cells)
	}
	// A one-column CSV whose "header" looks like a value has no header.
	headless := len(fm.Fields) == 1 && len(t.cols) == 1 && fm.Fields[0].Looks != nil && fm.Fields[0].Looks(t.cols[0])
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
		p.Warnings = append(p.Warnings, fmt.Sprintf("%d rows left out: a blank field, or a value outside the API's lengths (%s)", p.Skipped, lengths(fm)))
	}
	return p, nil
}

// mapFields maps each field of f's form to a column: --column names in
// the fields' order, else the header's names (form.GuessHeader, the
// dashboard's guess); a one-field form also takes a table's only column,
// or the first whose first value looks like the field's. Every field must
// be mapped unless the form's fields are optional (then at least one).
func (t *table) mapFields(f *Family, columns []string) (map[string]int, []int, error) {
	fm := f.Form
	what := f.Kind
	if len(fm.Fields) > 1 {
		what += " (" + fieldNames(fm, ", ", words) + ")"
	}
	idx, err := t.pick(columns, len(fm.Fields), what)
	if err != nil {
		return nil, nil, err
	}
	m := map[string]int{}
	if len(idx) > 0 {
		for k, fl := range fm.Fields {
			m[fl.Name] = idx[k]
		}
		return m, idx, nil
	}
	m = fm.GuessHeader(t.cols)
	if one := fm.Fields[0]; len(fm.Fields) == 1 && len(m) == 0 {
		for i := range t.cols {
			if len(t.cols) == 1 || (one.Looks != nil && one.Looks(t.cell(t.first, i))) {
				m[one.Name] = i
				break
			}
		}
	}
	hint := "name it with --column"
	if len(fm.Fields) > 1 {
		hint = fmt.Sprintf("name the %d with --column %s", len(fm.Fields), fieldNames(fm, ",", func(f form.Field) string { return f.Name }))
	}
	for _, fl := range fm.Fields {
		i, ok := m[fl.Name]
		switch {
		case ok:
			idx = append(idx, i)
		case fm.AllRequired || len(fm.Fields) == 1:
			return nil, nil, usagef("no %s column found (columns: %s); %s", words(fl), strings.Join(t.cols, ", "), hint)
		}
	}
	if len(idx) == 0 {
		return nil, nil, usagef("no %s column found (columns: %s); %s", f.Kind, strings.Join(t.cols, ", "), hint)
	}
	return m, idx, nil
}

// lengths says the API's lengths of fm's fields.
func lengths(fm form.Form) string {
	var out []string
	for _, f := range fm.Fields {
		switch {
		case f.MinLen > 0 && f.MaxLen > 0:
			out = append(out, fmt.Sprintf("%s: %d to %d characters", f.Name, f.MinLen, f.MaxLen))
		case f.MaxLen > 0:
			out = append(out, fmt.Sprintf("%s: at most %d characters", f.Name, f.MaxLen))
		}
	}
	return strings.Join(out, "; ")
}

// thousands is n with a comma between thousands (2,048).
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// add adds a row's cells as the next item, unless the form dedupes and an
// item of the same key was added before (then it counts a duplicate).
func (p *Prepared) add(fm form.Form, seen map[string]struct{}, cells []string) {
	if fm.Dedupe {
		k := fm.Key(cells)
		if _, dup := seen[k]; dup {
			p.Duplicates++
			return
		}
		seen[k] = struct{}{}
	}
	p.Items = append(p.Items, fm.Item(cells, nil))
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
