package company

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// A small JSON reader for the two import line formats. encoding/json spends
// most of an import's CPU (reflection, a separate validation pass, many
// small allocations); this reader decodes a line straight into a Record in
// about a fifth of the time, which is what lets an import reach its target
// rate on two cores.
//
// It accepts exactly the JSON that encoding/json accepts and decodes it to
// the same values, with two deliberate differences, both checked by
// FuzzDecodeRecordJSON: object keys must match field names exactly (not
// case-insensitively), and when a key repeats the last value replaces the
// earlier one wholesale instead of being merged into it.

var errJSONSyntax = errors.New("invalid JSON")

// maxJSONDepth matches encoding/json's nesting limit.
const maxJSONDepth = 10000

// jsonReader works on a string so that unescaped string values can be
// substrings of the line, sharing its one allocation.
type jsonReader struct {
	data    string
	pos     int
	err     error
	depth   int
	scratch []byte
	slab    strSlab // backing store for *string values, to allocate in bulk
}

// ptr returns a pointer to a copy of s, carved from the slab.
func (d *jsonReader) ptr(s string) *string { return d.slab.ptr(s) }

func (d *jsonReader) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w at offset %d: %s", errJSONSyntax, d.pos, fmt.Sprintf(format, args...))
	}
	d.pos = len(d.data)
}

func (d *jsonReader) ws() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte without consuming it, 0 at the end.
func (d *jsonReader) peek() byte {
	d.ws()
	if d.err != nil || d.pos >= len(d.data) {
		return 0
	}
	return d.data[d.pos]
}

func (d *jsonReader) literal(word string) {
	if len(d.data)-d.pos < len(word) || d.data[d.pos:d.pos+len(word)] != word {
		d.fail("bad literal")
		return
	}
	d.pos += len(word)
}

// null consumes a null literal if one comes next.
func (d *jsonReader) null() bool {
	if d.peek() == 'n' {
		d.literal("null")
		return true
	}
	return false
}

// end checks that only whitespace is left.
func (d *jsonReader) end() error {
	d.ws()
	if d.err == nil && d.pos != len(d.data) {
		d.fail("data after the value")
	}
	return d.err
}

// object reads an object, calling field for each key; field must consume
// the value. The key slice is only valid during the call.
func (d *jsonReader) object(field func(key string)) {
	if d.peek() != '{' {
		d.fail("want an object")
		return
	}
	d.pos++
	if d.depth++; d.depth > maxJSONDepth {
		d.fail("nested too deeply")
		return
	}
	defer func() { d.depth-- }()
	if d.peek() == '}' {
		d.pos++
		return
	}
	for d.err == nil {
		if d.peek() != '"' {
			d.fail("want a key")
			return
		}
		key := d.rawString()
		if d.peek() != ':' {
			d.fail("want ':'")
			return
		}
		d.pos++
		field(key)
		switch d.peek() {
		case ',':
			d.pos++
		case '}':
			d.pos++
			return
		default:
			d.fail("want ',' or '}'")
		}
	}
}

// array reads an array, calling elem once per element; elem must consume
// the element.
func (d *jsonReader) array(elem func()) {
	if d.peek() != '[' {
		d.fail("want an array")
		return
	}
	d.pos++
	if d.depth++; d.depth > maxJSONDepth {
		d.fail("nested too deeply")
		return
	}
	defer func() { d.depth-- }()
	if d.peek() == ']' {
		d.pos++
		return
	}
	for d.err == nil {
		elem()
		switch d.peek() {
		case ',':
			d.pos++
		case ']':
			d.pos++
			return
		default:
			d.fail("want ',' or ']'")
		}
	}
}

// skip consumes any value, validating it.
func (d *jsonReader) skip() {
	switch c := d.peek(); {
	case c == '{':
		d.object(func(string) { d.skip() })
	case c == '[':
		d.array(d.skip)
	case c == '"':
		d.rawString()
	case c == 't':
		d.literal("true")
	case c == 'f':
		d.literal("false")
	case c == 'n':
		d.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		d.number()
	default:
		d.fail("unexpected byte %q", c)
	}
}

// number consumes a number and returns its text. It enforces the JSON
// grammar, which strconv alone does not (it accepts "01" and "+1").
func (d *jsonReader) number() string {
	start := d.pos
	b := d.data
	i := d.pos
	digits := func() bool {
		s := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i > s
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		d.fail("bad number")
		return ""
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			d.fail("bad number")
			return ""
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			d.fail("bad number")
			return ""
		}
	}
	d.pos = i
	return b[start:i]
}

// str reads a string value.
func (d *jsonReader) str() string {
	if d.peek() != '"' {
		d.fail("want a string")
		return ""
	}
	return d.rawString()
}

// optStr reads a string or null.
func (d *jsonReader) optStr() *string {
	if d.null() {
		return nil
	}
	return d.ptr(d.str())
}

// optInt reads an integer that fits bits, or null. Like encoding/json it
// rejects fractions and exponents for integer fields.
func (d *jsonReader) optInt(bits int) *int64 {
	if d.null() {
		return nil
	}
	c := d.peek()
	if c != '-' && (c < '0' || c > '9') {
		d.fail("want a number")
		return nil
	}
	num := d.number()
	if d.err != nil {
		return nil
	}
	n, err := strconv.ParseInt(num, 10, bits)
	if err != nil {
		d.fail("number %s is not a %d-bit integer", num, bits)
		return nil
	}
	return &n
}

func (d *jsonReader) optIntField() *int {
	n := d.optInt(strconv.IntSize)
	if n == nil {
		return nil
	}
	v := int(*n)
	return &v
}

// rawString consumes a string token (d.pos at the opening quote) and
// returns it unescaped. Invalid UTF-8 and lone surrogates become U+FFFD, as
// encoding/json does.
func (d *jsonReader) rawString() string {
	b := d.data
	i := d.pos + 1
	// Fast path: no escapes, plain ASCII.
	for i < len(b) {
		c := b[i]
		if c == '"' {
			s := b[d.pos+1 : i]
			d.pos = i + 1
			return s
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			break
		}
		i++
	}
	out := append(d.scratch[:0], b[d.pos+1:i]...)
	for {
		if i >= len(b) {
			d.fail("unterminated string")
			return ""
		}
		c := b[i]
		switch {
		case c == '"':
			d.pos = i + 1
			d.scratch = out
			return string(out)
		case c < 0x20:
			d.pos = i
			d.fail("control character in string")
			return ""
		case c == '\\':
			if i+1 >= len(b) {
				d.fail("unterminated escape")
				return ""
			}
			i++
			switch b[i] {
			case '"', '\\', '/':
				out = append(out, b[i])
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := hex4(b, i+1)
				if !ok {
					d.pos = i
					d.fail("bad \\u escape")
					return ""
				}
				i += 4
				if utf16.IsSurrogate(r) {
					r2, ok2 := rune(-1), false
					if i+2 < len(b) && b[i+1] == '\\' && b[i+2] == 'u' {
						r2, ok2 = hex4(b, i+3)
					}
					if dec := utf16.DecodeRune(r, r2); ok2 && dec != utf8.RuneError {
						r = dec
						i += 6
					} else {
						r = utf8.RuneError
					}
				}
				out = utf8.AppendRune(out, r)
			default:
				d.pos = i
				d.fail("bad escape")
				return ""
			}
			i++
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			r, size := utf8.DecodeRuneInString(b[i:])
			if r == utf8.RuneError && size == 1 {
				out = utf8.AppendRune(out, utf8.RuneError)
			} else {
				out = append(out, b[i:i+size]...)
			}
			i += size
		}
	}
}

func hex4(b string, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for j := i; j < i+4; j++ {
		c := b[j]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// decodeRecordJSON parses one line of our JSONL format.
func decodeRecordJSON(line []byte) (Record, error) {
	d := jsonReader{data: string(line)}
	var r Record
	if d.null() { // encoding/json treats a top-level null as "no change"
		return r, d.end()
	}
	d.object(func(key string) {
		switch key {
		case "network_url":
			r.NetworkURL = d.optStr()
		case "network_id":
			r.NetworkID = d.optInt(64)
		case "name":
			r.Name = d.optStr()
		case "description":
			r.Description = d.optStr()
		case "website":
			r.Website = d.optStr()
		case "domain":
			r.Domain = d.optStr()
		case "email_domain":
			r.EmailDomain = d.optStr()
		case "industry":
			r.Industry = d.optStr()
		case "company_size":
			r.CompanySize = d.companySize()
		case "employee_count":
			r.EmployeeCount = d.optIntField()
		case "company_type":
			r.CompanyType = d.optStr()
		case "headquarters":
			r.Headquarters = d.headquarters()
		case "founded_year":
			r.FoundedYear = d.optIntField()
		case "specialties":
			r.Specialties = d.specialties()
		case "follower_count":
			r.FollowerCount = d.optIntField()
		case "similar_companies":
			r.SimilarCompanies = d.similarCompanies()
		default:
			d.skip()
		}
	})
	if err := d.end(); err != nil {
		return Record{}, err
	}
	return r, nil
}

// companySize reads a company_size value (nil for null).
func (d *jsonReader) companySize() *CompanySize {
	if d.null() {
		return nil
	}
	cs := &CompanySize{}
	d.object(func(key string) {
		switch key {
		case "label":
			cs.Label = d.optStr()
		case "min":
			cs.Min = d.optIntField()
		case "max":
			cs.Max = d.optIntField()
		default:
			d.skip()
		}
	})
	return cs
}

// headquarters reads a headquarters value (nil for null).
func (d *jsonReader) headquarters() *Headquarters {
	if d.null() {
		return nil
	}
	hq := &Headquarters{}
	d.object(func(key string) {
		switch key {
		case "text":
			hq.Text = d.optStr()
		case "city":
			hq.City = d.optStr()
		case "region":
			hq.Region = d.optStr()
		case "country":
			hq.Country = d.optStr()
		default:
			d.skip()
		}
	})
	return hq
}

// specialties reads a specialties value (nil for null).
func (d *jsonReader) specialties() []string {
	if d.null() {
		return nil
	}
	out := []string{}
	d.array(func() {
		s := ""
		if !d.null() { // null elements decode as "", as in encoding/json
			s = d.str()
		}
		out = append(out, s)
	})
	return out
}

// similarCompanies reads a similar_companies value (nil for null).
func (d *jsonReader) similarCompanies() []SimilarCompany {
	if d.null() {
		return nil
	}
	out := []SimilarCompany{}
	d.array(func() {
		var sc SimilarCompany
		if !d.null() {
			d.object(func(key string) {
				switch key {
				case "name":
					sc.Name = d.optStr()
				case "network_url":
					sc.NetworkURL = d.optStr()
				case "industry":
					sc.Industry = d.optStr()
				case "location":
					sc.Location = d.optStr()
				default:
					d.skip()
				}
			})
		}
		out = append(out, sc)
	})
	return out
}

// decodePDLJSON parses one line of the PDL NDJSON format. Every field may
// be a string, a number (kept as its text) or null.
func decodePDLJSON(line []byte) (pdlRow, error) {
	d := jsonReader{data: string(line)}
	var row pdlRow
	flex := func() flexString {
		switch c := d.peek(); {
		case c == 'n':
			d.literal("null")
			return ""
		case c == '"':
			return flexString(d.str())
		case c == '-' || (c >= '0' && c <= '9'):
			return flexString(d.number())
		default:
			d.fail("want a string, number or null")
			return ""
		}
	}
	if d.null() {
		return row, d.end()
	}
	d.object(func(key string) {
		if j := pdlColumn(key); j >= 0 {
			row[j] = flex()
		} else {
			d.skip()
		}
	})
	if err := d.end(); err != nil {
		return pdlRow{}, err
	}
	return row, nil
}
