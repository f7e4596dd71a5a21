package company

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// errMalformedRecord marks an input record that cannot be parsed. It is
// not fatal: the reader has already moved past the record.
var errMalformedRecord = errors.New("malformed record")

// maxRecordBytes bounds the memory one input line or CSV record may take.
// A longer one is skipped as malformed.
const maxRecordBytes = 1 << 20

// pdlCSVReader streams the CSV dialect of the People Data Labs dataset.
// encoding/csv cannot read it: inside quoted fields a quote is escaped as
// \" and a backslash as \\, not by doubling. The reader also accepts the
// RFC 4180 doubled quote (""), LF and CRLF line ends, commas and newlines
// inside quoted fields, and leaves a backslash before any other byte as it
// is. Outside quotes every byte other than comma and line end is literal.
//
// A record with text after a closing quote, an unterminated quote at end of
// input, or more than maxRecordBytes bytes is reported as errMalformedRecord
// after skipping to the next line end; for an unterminated quote that
// resynchronization is best effort.
type pdlCSVReader struct {
	br     *bufio.Reader
	buf    []byte // the current record's field bytes, concatenated
	ends   []int  // end offset in buf of each field
	fields []string
	// lastBlank records whether the record just read had no content at
	// all, i.e. was an empty line.
	lastBlank bool
}

func newPDLCSVReader(r io.Reader) *pdlCSVReader {
	return &pdlCSVReader{br: bufio.NewReaderSize(r, 64<<10)}
}

// Next returns the fields of the next non-blank record. The slice is
// reused by the following call. It returns errMalformedRecord for a record
// that was skipped, io.EOF at the end of input, and any other error from the
// underlying reader as is (wrapped).
func (c *pdlCSVReader) Next() ([]string, error) {
	for {
		fields, err := c.next()
		if err != nil {
			return nil, err
		}
		// A blank line is a single empty unquoted field; skip it rather than
		// report a one-field record.
		if len(fields) == 1 && fields[0] == "" && c.lastBlank {
			continue
		}
		return fields, nil
	}
}

// state of the record parser
const (
	stFieldStart = iota
	stUnquoted
	stQuoted
	stQuotedEscape
	stAfterQuote
)

func (c *pdlCSVReader) next() ([]string, error) {
	c.buf = c.buf[:0]
	c.ends = c.ends[:0]
	c.lastBlank = true
	state := stFieldStart
	n := 0 // bytes read for this record, bounded by maxRecordBytes
	for {
		b, err := c.br.ReadByte()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("read CSV: %w", err)
			}
			if n == 0 {
				return nil, io.EOF
			}
			switch state {
			case stQuoted, stQuotedEscape:
				return nil, fmt.Errorf("%w: unterminated quoted field", errMalformedRecord)
			}
			return c.finish(), nil
		}
		n++
		if n > maxRecordBytes {
			tooLong := fmt.Errorf("%w: record longer than %d bytes", errMalformedRecord, maxRecordBytes)
			if b == '\n' {
				return nil, tooLong
			}
			return nil, c.skipLine(tooLong)
		}
		switch state {
		case stFieldStart, stUnquoted:
			switch b {
			case ',':
				c.lastBlank = false
				c.ends = append(c.ends, len(c.buf))
				state = stFieldStart
			case '\n':
				return c.finish(), nil
			case '\r':
				if next, _ := c.br.Peek(1); len(next) == 1 && next[0] == '\n' {
					continue // the '\n' ends the record
				}
				c.lastBlank = false
				c.buf = append(c.buf, b)
				state = stUnquoted
			case '"':
				c.lastBlank = false
				if state == stFieldStart {
					state = stQuoted
				} else {
					c.buf = append(c.buf, b)
				}
			default:
				c.lastBlank = false
				c.buf = append(c.buf, b)
				state = stUnquoted
			}
		case stQuoted:
			switch b {
			case '\\':
				state = stQuotedEscape
			case '"':
				state = stAfterQuote
			default:
				c.buf = append(c.buf, b)
			}
		case stQuotedEscape:
			if b != '"' && b != '\\' {
				c.buf = append(c.buf, '\\')
			}
			c.buf = append(c.buf, b)
			state = stQuoted
		case stAfterQuote:
			switch b {
			case ',':
				c.ends = append(c.ends, len(c.buf))
				state = stFieldStart
			case '\n':
				return c.finish(), nil
			case '\r':
				if next, _ := c.br.Peek(1); len(next) == 1 && next[0] == '\n' {
					continue
				}
				return nil, c.skipLine(fmt.Errorf("%w: text after closing quote", errMalformedRecord))
			case '"': // RFC 4180 doubled quote
				c.buf = append(c.buf, '"')
				state = stQuoted
			default:
				return nil, c.skipLine(fmt.Errorf("%w: text after closing quote", errMalformedRecord))
			}
		}
	}
}

// finish closes the last field and splits the record into strings that
// share one allocation.
func (c *pdlCSVReader) finish() []string {
	c.ends = append(c.ends, len(c.buf))
	all := string(c.buf)
	c.fields = c.fields[:0]
	start := 0
	for _, end := range c.ends {
		c.fields = append(c.fields, all[start:end])
		start = end
	}
	return c.fields
}

// skipLine discards input up to and including the next '\n' and returns
// cause, or a wrapped read error if reading fails.
func (c *pdlCSVReader) skipLine(cause error) error {
	for {
		_, err := c.br.ReadSlice('\n')
		if err == nil || errors.Is(err, io.EOF) {
			return cause
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return fmt.Errorf("read CSV: %w", err)
		}
	}
}
