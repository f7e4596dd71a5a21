package bulkctl

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"time"
)

// output is a results file (or stdout) being written: CSV with one header
// row, or JSON Lines (one result row object a line).
type output struct {
	file   *os.File
	bw     *bufio.Writer
	cw     *csv.Writer
	format string
	rows   int64    // data rows in the output
	header []string // CSV header already written
	closed bool
	// log receives a line per retried download (nil: silent).
	log func(string, ...any)
}

func newOutput(w io.Writer, f *os.File, format string, rows int64, header []string) *output {
	o := &output{file: f, bw: bufio.NewWriterSize(w, 256<<10), format: format, rows: rows, header: header}
	o.cw = csv.NewWriter(o.bw)
	return o
}

// openOutput opens path to continue it: the rows already there are
// counted and a last row cut short (no line end, or a CSV record that does
// not parse) is removed, so the download resumes at the next whole row.
func openOutput(path, format string, overwrite bool) (*output, error) {
	flags := os.O_RDWR | os.O_CREATE
	if overwrite {
		flags |= os.O_TRUNC
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		return nil, &UsageError{err}
	}
	var (
		good   int64
		rows   int64
		header []string
	)
	if format == "csv" {
		good, rows, header, err = scanCSV(f)
	} else {
		good, rows, err = scanLines(f)
	}
	if err == nil {
		err = f.Truncate(good)
	}
	if err == nil {
		_, err = f.Seek(good, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return newOutput(f, f, format, rows, header), nil
}

// scanCSV reads a CSV file: the byte offset after its last whole record,
// its data rows (the header not counted) and its header.
func scanCSV(f *os.File) (good, rows int64, header []string, err error) {
	rr := newRecordReader(f)
	for {
		rec, err := rr.next()
		if err != nil {
			// io.EOF, or a last record cut short: dropped.
			return good, rows, header, nil
		}
		good += int64(len(rec))
		if header == nil {
			if header, err = parseRecord(rec); err != nil {
				return 0, 0, nil, fmt.Errorf("the file's first line is not a CSV header: %w", err)
			}
		} else {
			rows++
		}
	}
}

// recordReader splits CSV into whole records, byte for byte: a record ends
// at a line end outside quotes (an even number of '"' so far: RFC 4180
// doubles quotes inside quoted fields). What follows the last such line
// end is a record cut short.
type recordReader struct {
	br  *bufio.Reader
	buf []byte
}

func newRecordReader(r io.Reader) *recordReader {
	return &recordReader{br: bufio.NewReaderSize(r, 256<<10)}
}

// next is the next whole record with its line end; io.EOF at the end, or
// io.ErrUnexpectedEOF when bytes of an unfinished record remain.
func (r *recordReader) next() ([]byte, error) {
	r.buf = r.buf[:0]
	quotes := 0
	for {
		line, err := r.br.ReadSlice('\n')
		r.buf = append(r.buf, line...)
		quotes += bytes.Count(line, []byte{'"'})
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err != nil:
			if len(r.buf) > 0 && err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		case quotes%2 == 0:
			return r.buf, nil
		}
	}
}

// parseRecord parses one CSV record.
func parseRecord(rec []byte) ([]string, error) {
	cr := csv.NewReader(bytes.NewReader(rec))
	cr.FieldsPerRecord = -1
	return cr.Read()
}

// scanLines counts the whole lines of a JSON Lines file.
func scanLines(f *os.File) (good, rows int64, err error) {
	br := bufio.NewReaderSize(f, 256<<10)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line: read on to its end.
			n := int64(len(line))
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				n += int64(len(line))
			}
			if err != nil {
				return good, rows, nil
			}
			good += n
			rows++
			continue
		}
		if err != nil {
			return good, rows, nil
		}
		good += int64(len(line))
		rows++
	}
}

func (o *output) close() error {
	if o.closed {
		return nil
	}
	o.closed = true
	o.cw.Flush()
	err := o.cw.Error()
	if e := o.bw.Flush(); err == nil {
		err = e
	}
	if o.file != nil {
		if e := o.file.Sync(); err == nil {
			err = e
		}
		if e := o.file.Close(); err == nil {
			err = e
		}
	}
	return err
}

func (o *output) flush() error {
	o.cw.Flush()
	if err := o.cw.Error(); err != nil {
		return err
	}
	return o.bw.Flush()
}

// fetch writes the rows of job id from offset to total.
func (o *output) fetch(ctx context.Context, c *Client, f *Family, id string, offset, total int64, pageSize int) (int64, error) {
	if o.format == "csv" {
		return o.fetchCSV(ctx, c, f, id, offset, total)
	}
	if pageSize <= 0 || pageSize > 500 {
		pageSize = 500
	}
	var n int64
	for offset < total {
		var page struct {
			Results []json.RawMessage `json:"results"`
		}
		path := f.Path + "/" + id + "/results?limit=" + strconv.Itoa(pageSize) + "&offset=" + strconv.FormatInt(offset, 10)
		if err := c.GetJSON(ctx, path, &page); err != nil {
			return n, errors.Join(err, o.flush())
		}
		if len(page.Results) == 0 {
			return n, errors.Join(fmt.Errorf("job %s: empty results page at offset %d of %d rows", id, offset, total), o.flush())
		}
		for _, r := range page.Results {
			if _, err := o.bw.Write(r); err != nil {
				return n, err
			}
			if err := o.bw.WriteByte('\n'); err != nil {
				return n, err
			}
			n++
			o.rows++
			offset++
		}
	}
	return n, o.flush()
}

// fetchCSV streams the job's rows as CSV (one request from offset to the
// end) and copies them byte for byte; a download cut short is resumed at
// the next row, within the client's retry budget.
func (o *output) fetchCSV(ctx context.Context, c *Client, f *Family, id string, offset, total int64) (int64, error) {
	var n int64
	r := &retrier{c: c, start: time.Now()}
	for offset < total {
		r.attempts++
		path := f.Path + "/" + id + "/results?format=csv&offset=" + strconv.FormatInt(offset, 10)
		res, err := c.Stream(ctx, path)
		if err != nil {
			return n, errors.Join(err, o.flush())
		}
		rr := newRecordReader(res.Body)
		var rec []byte
		if rec, err = rr.next(); err == nil {
			var head []string
			if head, err = parseRecord(rec); err == nil {
				switch {
				case o.header == nil:
					o.header = head
					_, err = o.bw.Write(rec)
				case !slices.Equal(o.header, head):
					res.Body.Close()
					return n, errors.Join(usagef("the output's CSV header (%d columns) is not this job's (%d columns): not its results file? (--overwrite starts it over)",
						len(o.header), len(head)), o.flush())
				}
			}
		}
		for err == nil && offset < total {
			if rec, err = rr.next(); err == nil {
				if _, err = o.bw.Write(rec); err != nil {
					res.Body.Close()
					return n, err
				}
				n++
				o.rows++
				offset++
			}
		}
		res.Body.Close()
		if offset >= total {
			break
		}
		if ctx.Err() != nil {
			return n, errors.Join(ctx.Err(), o.flush())
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			err = fmt.Errorf("the download ended after row %d of %d", offset, total)
		}
		d, ok := r.next(0, true)
		if !ok {
			return n, errors.Join(&NetError{Method: "GET", Path: path, Err: err, Attempts: r.attempts}, o.flush())
		}
		if o.log != nil {
			o.log("job %s: %v; resuming at row %d in %s", id, err, offset, d.Round(time.Millisecond))
		}
		if err := c.wait(ctx, d); err != nil {
			return n, errors.Join(err, o.flush())
		}
	}
	return n, o.flush()
}
