package company

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Format names an import file format.
type Format string

const (
	// FormatJSONL is bulkd's own format: one Record as JSON per line.
	FormatJSONL Format = "jsonl"
	// FormatPDLNDJSON is the People Data Labs free company dataset as
	// newline-delimited JSON.
	FormatPDLNDJSON Format = "pdl-ndjson"
	// FormatPDLCSV is the same dataset as CSV with a header row and
	// backslash-escaped quotes.
	FormatPDLCSV Format = "pdl-csv"
)

// ImportStats counts the progress of an import. Read is the number of
// non-blank input lines (CSV records after the header); each of them ends
// up Imported or Skipped, except the last unsaved batch when the import
// fails.
type ImportStats struct {
	Read, Imported, Skipped int64
	Elapsed                 time.Duration
}

// importBatch is the number of records per Put: big enough to amortize the
// round trip, small enough that one script blocks Redis only briefly.
const importBatch = MaxBatch

// progressEvery is the minimum interval between progress callbacks.
const progressEvery = time.Second

// source yields input records one by one. next returns ok=false for an
// input record that is malformed or unusable (it is counted as skipped),
// io.EOF at the end, and any other error when reading fails.
type source interface {
	next() (rec Record, ok bool, err error)
}

// Import streams records from r into st, normalizing network URLs and
// domains with norm. A record with neither a usable network URL nor a usable
// domain, and a line or CSV record that cannot be parsed, is skipped and
// counted; an error reading r, writing to Redis or a cancelled ctx stops the
// import. progress, when not nil, is called at most about once per second
// and once at the end. Importing the same input twice leaves the store in
// the same state.
//
// Records are saved in batches of up to MaxBatch while the next batch is
// being parsed, so parsing and the Redis round trip overlap. Each batch is
// atomic; a failed import may leave earlier batches saved, and re-running
// it completes the job.
func Import(ctx context.Context, r io.Reader, format Format, st *Store, norm Normalizer, progress func(ImportStats)) (ImportStats, error) {
	start := time.Now()
	var stats ImportStats
	if st == nil || norm == nil {
		return stats, errors.New("company: import: nil store or normalizer")
	}
	src, err := newSource(r, format, norm)
	if err != nil {
		return stats, fmt.Errorf("company: import %s: %w", format, err)
	}

	w := startBatchWriter(ctx, st)
	lastProgress := start
	finish := func(err error) (ImportStats, error) {
		if werr := w.close(); err == nil && werr != nil {
			err = fmt.Errorf("company: import %s: %w", format, werr)
		}
		stats.Imported = w.imported.Load()
		stats.Elapsed = time.Since(start)
		if progress != nil {
			progress(stats)
		}
		return stats, err
	}

	batch := make([]Record, 0, importBatch)
	for {
		if err := ctx.Err(); err != nil {
			return finish(fmt.Errorf("company: import %s: %w", format, err))
		}
		rec, ok, err := src.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil && !errors.Is(err, errMalformedRecord) {
			return finish(fmt.Errorf("company: import %s after %d records: %w", format, stats.Read, err))
		}
		stats.Read++
		if err != nil || !ok {
			stats.Skipped++
			continue
		}
		batch = append(batch, rec)
		if len(batch) < importBatch {
			continue
		}
		if err := w.send(batch); err != nil {
			return finish(fmt.Errorf("company: import %s: %w", format, err))
		}
		batch = make([]Record, 0, importBatch)
		if progress != nil && time.Since(lastProgress) >= progressEvery {
			lastProgress = time.Now()
			s := stats
			s.Imported = w.imported.Load()
			s.Elapsed = time.Since(start)
			progress(s)
		}
	}
	if len(batch) > 0 {
		if err := w.send(batch); err != nil {
			return finish(fmt.Errorf("company: import %s: %w", format, err))
		}
	}
	return finish(nil)
}

// batchWriter saves batches in order on its own goroutine so that parsing
// the next batch overlaps with saving the previous one. At most one batch
// waits in the channel, so memory stays bounded at about three batches.
type batchWriter struct {
	batches  chan []Record
	done     chan struct{} // closed when the goroutine has exited
	err      error         // first Put error; read only after done is closed
	imported atomic.Int64
}

func startBatchWriter(ctx context.Context, st *Store) *batchWriter {
	w := &batchWriter{batches: make(chan []Record, 1), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for b := range w.batches {
			if err := st.Put(ctx, b); err != nil {
				w.err = err
				return
			}
			w.imported.Add(int64(len(b)))
		}
	}()
	return w
}

// send queues b, or returns the writer's error if it has stopped.
func (w *batchWriter) send(b []Record) error {
	select {
	case w.batches <- b:
		return nil
	case <-w.done:
		return w.err
	}
}

// close waits for queued batches to be saved and returns the first error.
func (w *batchWriter) close() error {
	close(w.batches)
	<-w.done
	return w.err
}

func newSource(r io.Reader, format Format, norm Normalizer) (source, error) {
	switch format {
	case FormatJSONL:
		return &jsonlSource{lines: newLineReader(r), norm: norm}, nil
	case FormatPDLNDJSON:
		return &pdlNDJSONSource{lines: newLineReader(r), norm: norm}, nil
	case FormatPDLCSV:
		return newPDLCSVSource(r, norm)
	default:
		return nil, fmt.Errorf("unknown format %q (want %q, %q or %q)", format, FormatJSONL, FormatPDLNDJSON, FormatPDLCSV)
	}
}

// lineReader yields lines of at most maxRecordBytes without holding more
// than one line in memory.
type lineReader struct {
	br  *bufio.Reader
	buf []byte
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64<<10)}
}

// next returns the next non-blank line without its line end. The slice is
// valid until the following call. A line longer than maxRecordBytes is
// discarded and reported as errMalformedRecord.
func (l *lineReader) next() ([]byte, error) {
	for {
		line, err := l.readLine()
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(line)) > 0 {
			return line, nil
		}
	}
}

func (l *lineReader) readLine() ([]byte, error) {
	l.buf = l.buf[:0]
	tooLong := false
	for {
		chunk, err := l.br.ReadSlice('\n')
		if !tooLong {
			if len(l.buf)+len(chunk) > maxRecordBytes+2 { // +2 for CRLF
				tooLong = true
				l.buf = l.buf[:0]
			} else {
				l.buf = append(l.buf, chunk...)
			}
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err != nil && !errors.Is(err, io.EOF):
			return nil, fmt.Errorf("read line: %w", err)
		case errors.Is(err, io.EOF) && len(chunk) == 0 && len(l.buf) == 0 && !tooLong:
			return nil, io.EOF
		}
		if tooLong {
			return nil, fmt.Errorf("%w: line longer than %d bytes", errMalformedRecord, maxRecordBytes)
		}
		return bytes.TrimRight(l.buf, "\r\n"), nil
	}
}

// jsonlSource reads bulkd's own JSONL format.
type jsonlSource struct {
	lines *lineReader
	norm  Normalizer
}

func (s *jsonlSource) next() (Record, bool, error) {
	line, err := s.lines.next()
	if err != nil {
		return Record{}, false, err
	}
	rec, err := decodeRecordJSON(line)
	if err != nil {
		return Record{}, false, nil
	}
	return prepareOwn(rec, s.norm)
}

// prepareOwn canonicalizes a record from our own format. network_url and
// domain (or, without a domain, the website) go through norm; a value norm
// rejects becomes null, and the record is skipped only when neither key is
// left. A missing network_id is derived; one outside 1..2^53-1 makes the
// record unusable. Other fields are taken as they are.
func prepareOwn(rec Record, norm Normalizer) (Record, bool, error) {
	rec.NetworkURL = canonical(rec.NetworkURL, norm.NetworkURL)
	// The domain field wins; the website is the fallback for records that
	// only list a website.
	dom := canonical(rec.Domain, norm.Domain)
	if dom == nil {
		dom = canonical(rec.Website, norm.Domain)
	}
	rec.Domain = dom
	if rec.NetworkURL == nil && rec.Domain == nil {
		return Record{}, false, nil
	}
	if rec.EmailDomain != nil {
		// Not through norm.Domain: that may reduce a host such as
		// mail.example.com to its registrable domain, and the email host is
		// data, not a lookup key.
		rec.EmailDomain = nonEmpty(strings.ToLower(*rec.EmailDomain))
	}
	if rec.NetworkID == nil {
		rec.NetworkID = new(int64(deriveID(rec.NetworkURL, rec.Domain)))
	} else if id := *rec.NetworkID; id < 1 || id > MaxNetworkID {
		return Record{}, false, nil
	}
	rec.Normalize()
	return rec, true, nil
}

// canonical returns the canonical form of *raw, or nil when raw is nil or
// the normalizer refuses it (blank values included).
func canonical(raw *string, f func(string) (string, error)) *string {
	if raw == nil {
		return nil
	}
	c, err := f(*raw)
	if err != nil {
		return nil
	}
	return &c
}

func deriveID(url, domain *string) int64 {
	if url != nil {
		return DeriveNetworkID(*url)
	}
	return deriveDomainNetworkID(*domain)
}

// pdlRow holds the fields of the People Data Labs company dataset that
// bulkd uses. PDL's own id is not numeric and not part of a result row, so
// it is not kept.
// The fields are indexed by the pdl* column constants.
type pdlRow [pdlColumnCount]flexString

// The PDL columns bulkd reads, in pdlColumns' order.
const (
	pdlWebsite = iota
	pdlName
	pdlFounded
	pdlSize
	pdlLocality
	pdlRegion
	pdlCountry
	pdlIndustry
	pdlLinkedinURL
	pdlColumnCount
)

// pdlColumns are the column (CSV) and key (NDJSON) names of a pdlRow's fields.
var pdlColumns = [pdlColumnCount]string{"website", "name", "founded", "size", "locality", "region", "country", "industry", "linkedin_url"}

// pdlColumn returns the pdlRow index of a column or key name, or -1.
func pdlColumn(name string) int {
	for i, c := range pdlColumns {
		if c == name {
			return i
		}
	}
	return -1
}

// flexString is a PDL value as text: dumps of the dataset disagree on
// whether founded is a number or a string, so numbers are kept as written.
type flexString string

type pdlNDJSONSource struct {
	lines *lineReader
	norm  Normalizer
}

func (s *pdlNDJSONSource) next() (Record, bool, error) {
	line, err := s.lines.next()
	if err != nil {
		return Record{}, false, err
	}
	row, err := decodePDLJSON(line)
	if err != nil {
		return Record{}, false, nil
	}
	rec, ok := mapPDL(&row, s.norm)
	return rec, ok, nil
}

type pdlCSVSource struct {
	csv  *pdlCSVReader
	norm Normalizer
	cols [pdlColumnCount]int // index of each pdlRow field in a record, -1 when absent
	n    int                 // number of header columns
}

func newPDLCSVSource(r io.Reader, norm Normalizer) (source, error) {
	s := &pdlCSVSource{csv: newPDLCSVReader(r), norm: norm}
	header, err := s.csv.Next()
	if errors.Is(err, io.EOF) {
		return emptySource{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read header: %w", err)
	}
	if len(header) > 0 {
		header[0] = strings.TrimPrefix(header[0], "\uFEFF") // byte order mark
	}
	for i := range s.cols {
		s.cols[i] = -1
	}
	for i, h := range header {
		if j := pdlColumn(strings.ToLower(strings.TrimSpace(h))); j >= 0 {
			s.cols[j] = i
		}
	}
	if s.cols[pdlWebsite] < 0 && s.cols[pdlLinkedinURL] < 0 {
		return nil, fmt.Errorf("header %q has neither a website nor a linkedin_url column", header)
	}
	s.n = len(header)
	return s, nil
}

func (s *pdlCSVSource) next() (Record, bool, error) {
	fields, err := s.csv.Next()
	if err != nil {
		return Record{}, false, err
	}
	if len(fields) != s.n {
		return Record{}, false, nil
	}
	var row pdlRow
	for j, i := range s.cols {
		if i >= 0 {
			row[j] = flexString(fields[i])
		}
	}
	rec, ok := mapPDL(&row, s.norm)
	return rec, ok, nil
}

type emptySource struct{}

func (emptySource) next() (Record, bool, error) { return Record{}, false, io.EOF }

// mapPDL maps one PDL row to a Record: linkedin_url → network_url
// (canonical), website → website (as written) and domain (canonical), domain
// → email_domain too (PDL has no separate email host), name, industry,
// founded → founded_year, size → company_size, locality/region/country →
// headquarters. PDL has no numeric id, so network_id is derived from the
// canonical URL (or the domain). Values are kept as PDL writes them (its
// dump is lowercase). ok is false when the row has neither a usable network
// URL nor a usable domain.
func mapPDL(row *pdlRow, norm Normalizer) (Record, bool) {
	var rec Record
	rec.NetworkURL = canonical(nonEmpty(string(row[pdlLinkedinURL])), norm.NetworkURL)
	rec.Website = nonEmpty(string(row[pdlWebsite]))
	rec.Domain = canonical(rec.Website, norm.Domain)
	if rec.NetworkURL == nil && rec.Domain == nil {
		return Record{}, false
	}
	rec.NetworkID = new(int64(deriveID(rec.NetworkURL, rec.Domain)))
	rec.EmailDomain = rec.Domain
	rec.Name = nonEmpty(string(row[pdlName]))
	rec.Industry = nonEmpty(string(row[pdlIndustry]))
	rec.FoundedYear = parseYear(string(row[pdlFounded]))
	rec.CompanySize = parseCompanySize(string(row[pdlSize]))
	rec.Headquarters = makeHeadquarters(string(row[pdlLocality]), string(row[pdlRegion]), string(row[pdlCountry]))
	rec.Normalize()
	return rec, true
}

// parseYear accepts "1998", "1998.0" and the like; anything else, or a year
// outside 1..9999, is unknown.
func parseYear(s string) *int {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != math.Trunc(f) || f < 1 || f > 9999 {
		return nil
	}
	return new(int(f))
}

// parseCompanySize turns a headcount label such as "51-200", "10001+" or
// "1,001-5,000 employees" into a CompanySize with inclusive bounds. The
// label is kept as given; a label whose bounds cannot be read keeps null
// bounds.
func parseCompanySize(label string) *CompanySize {
	label = strings.TrimSpace(label)
	if label == "" {
		return nil
	}
	cs := &CompanySize{Label: new(label)}
	s := strings.ToLower(label)
	s = strings.TrimSpace(strings.TrimSuffix(strings.TrimSuffix(s, "employees"), "employee"))
	s = strings.NewReplacer(",", "", " ", "", "–", "-").Replace(s)
	num := func(t string) (int, bool) {
		n, err := strconv.Atoi(t)
		return n, err == nil && n >= 0 && t != "" && t[0] != '+' && t[0] != '-'
	}
	if lo, ok := strings.CutSuffix(s, "+"); ok {
		if n, ok := num(lo); ok {
			cs.Min = new(n)
		}
		return cs
	}
	if lo, hi, ok := strings.Cut(s, "-"); ok {
		a, okA := num(lo)
		b, okB := num(hi)
		if okA && okB && a <= b {
			cs.Min, cs.Max = new(a), new(b)
		}
		return cs
	}
	if n, ok := num(s); ok {
		cs.Min, cs.Max = new(n), new(n)
	}
	return cs
}

// makeHeadquarters builds headquarters from its parts; Text joins the
// non-empty ones with ", ". All empty means unknown.
func makeHeadquarters(city, region, country string) *Headquarters {
	hq := &Headquarters{City: nonEmpty(city), Region: nonEmpty(region), Country: nonEmpty(country)}
	var parts []string
	for _, p := range []*string{hq.City, hq.Region, hq.Country} {
		if p != nil {
			parts = append(parts, *p)
		}
	}
	if len(parts) == 0 {
		return nil
	}
	hq.Text = new(strings.Join(parts, ", "))
	return hq
}
