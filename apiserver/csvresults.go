package apiserver

// Results as CSV (GET .../results?format=csv, docs/api.md "Results as
// CSV"): every row of a job from offset to the end, in submission order,
// streamed page by page so memory does not grow with the job.

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/jobs"
)

// csvPage is how many rows one read of a CSV download takes (the results
// page's largest size).
const csvPage = 500

// resultsFormat reads the format query parameter: "json" (the default) or
// "csv"; anything else is the 422.
func resultsFormat(r *http.Request) (string, *apierr.Error) {
	q := r.URL.Query()
	f := q.Get("format")
	switch {
	case !q.Has("format") || f == "json":
		return "json", nil
	case f == "csv":
		if q.Has("limit") {
			var v apierr.Validation
			v.Add("query.limit", apierr.TypeValueError, "limit does not apply to format=csv: every row from offset to the end is returned")
			return "", v.Err()
		}
		return "csv", nil
	}
	var v apierr.Validation
	v.Add("query.format", apierr.TypeLiteralError, "Input should be 'json' or 'csv'")
	return "", v.Err()
}

// writeResultsCSV streams a job's rows from offset as CSV: a header of the
// family's columns, then one record per row. first is the first page,
// already read (and checked: the job exists, is the caller's, its results
// are ready); the caller releases it. Once the header is out an error can only cut the stream
// short; it is logged, and the client sees a truncated body (no final
// newline), never a wrong row.
func (s *Server) writeResultsCSV(w http.ResponseWriter, r *http.Request, f family.Family, first *jobs.Results, offset int) {
	cols := f.CSVColumns()
	h := w.Header()
	h.Set("Content-Type", "text/csv; charset=utf-8")
	h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s-%s.csv"`, f.Name(), first.Job.ID))
	cw := csv.NewWriter(w)
	if err := cw.Write(cols); err != nil {
		return
	}
	rec := make([]string, len(cols))
	var buf bytes.Buffer
	res := first
	for off := offset; ; off += csvPage {
		if res == nil {
			var err error
			res, err = s.Jobs.Results(r.Context(), first.Job.KeyID, first.Job.ID, off, csvPage, f)
			if err != nil {
				s.Logger.Error("csv results: read page; the download is cut short", "request_id", RequestIDFrom(r.Context()), "job", first.Job.ID, "offset", off, "err", err)
				return
			}
		}
		rows, err := decodeRows(&buf, res)
		if res != first { // the caller releases the first page
			res.Release()
		}
		res = nil
		if err != nil {
			s.Logger.Error("csv results: rendered rows are not JSON; the download is cut short", "request_id", RequestIDFrom(r.Context()), "job", first.Job.ID, "err", err)
			return
		}
		for _, row := range rows {
			if err := cw.Write(csvRecord(rec, cols, row)); err != nil {
				return
			}
		}
		cw.Flush()
		if cw.Error() != nil || len(rows) < csvPage || int64(off+csvPage) >= first.Job.TotalRows {
			return
		}
	}
}

// decodeRows parses a window of rendered rows (buf is scratch space).
func decodeRows(buf *bytes.Buffer, res *jobs.Results) ([]map[string]json.RawMessage, error) {
	buf.Reset()
	buf.WriteByte('[')
	_, _ = res.WriteTo(buf)
	buf.WriteByte(']')
	var rows []map[string]json.RawMessage
	dec := json.NewDecoder(buf)
	dec.UseNumber()
	err := dec.Decode(&rows)
	return rows, err
}

// csvRecord fills rec (len(cols)) with a rendered row's cells of cols.
func csvRecord(rec, cols []string, row map[string]json.RawMessage) []string {
	for i, c := range cols {
		rec[i] = csvCell(row[c])
	}
	return rec
}

// csvCell writes one JSON value as a CSV field: null as empty, a string as
// itself, numbers and booleans as JSON writes them, arrays and objects as
// compact JSON. A string that a spreadsheet would run as a formula (it
// starts with =, +, -, @, a tab or a carriage return: company names and
// websites come from third parties) gets a leading apostrophe, as OWASP
// recommends; numbers are never changed.
func csvCell(v json.RawMessage) string {
	if len(v) == 0 || string(v) == "null" {
		return ""
	}
	switch v[0] {
	case '"':
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return string(v)
		}
		if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
			return "'" + s
		}
		return s
	case '[', '{':
		var b bytes.Buffer
		if err := json.Compact(&b, v); err != nil {
			return string(v)
		}
		return b.String()
	}
	return string(v)
}
