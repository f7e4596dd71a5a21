package jsonbody

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/family/form"
	"github.com/bulkd/bulkd/internal/jobs"
)

// WebhookField is the optional webhook_url of every bulk submission body
// (docs/webhooks.md).
const WebhookField = "webhook_url"

// MaxReported is the most errors[] items a refused body's 422 lists.
const MaxReported = 50

// Row is a family's reading of one row of its submission body (the
// family's one function per row, family.Family.ReadRow).
type Row struct {
	// Echo is what the row's results echo back.
	Echo string
	// Key is the row's distinct input (rows of one key are one input,
	// charged once); Payload is what the family's answerer is given.
	Key, Payload string
	// Group, when set, keeps the inputs of one group next to each other
	// in shards (jobs.Builder.GroupBy): email verification's mail domain.
	Group string
	// Invalid, when set, answers the row as invalid at no cost, with this
	// reason (company enrichment's invalid_url); Key and Payload unused.
	Invalid string
	// EchoTag is how many bytes at the start of Echo are the family's own
	// tag (jobs.Builder.EchoTag).
	EchoTag int
	// Problem, when set, refuses the body: a 422 item at the row's field.
	Problem *Problem
}

// Problem is what is wrong with a field of a row, in a family's words.
type Problem struct{ Field, Type, Msg string }

// RowFunc reads one row whose values passed the checks its Form declares
// (types, AllRequired, MinLen, MaxLen): vals are its fields' values in the
// Form's order, nil when absent (a Scalar form's one value is never nil).
// vals is reused by the next row.
type RowFunc func(vals []*string) Row

// Submission is what a body holds besides its rows.
type Submission struct {
	// WebhookURL is the body's webhook_url, not checked yet (the API
	// checks it against its SSRF policy); nil when absent or null.
	WebhookURL *string
}

// Decode reads a bulk submission body into b by the family's Form: the
// object {"<ListField>": [...], "webhook_url": ...} streamed row by row
// (never held as a second copy), at most MaxRows rows (else TooMany), each
// an object of the Form's fields (a string for a Scalar form) whose values
// are strings within the Form's lengths, each read by row. Rows are
// deduplicated by key when the Form says Dedupe. The body is refused with
// a 4xx, nothing added, when a row is wrong (a 422 listing at most
// MaxReported problems at body.<ListField>.<i>[.<field>]), when it has no
// rows (Empty) or no valid row (NoValid).
func Decode(fm form.Form, row RowFunc, r io.Reader, b *jobs.Builder) (Submission, *apierr.Error) {
	d := &decoder{fm: fm, row: row, b: b, vals: make([]*string, len(fm.Fields)), loc: "body." + fm.ListField}
	if !fm.Scalar {
		d.typ = rowType(fm)
	}
	b.DropDuplicates = fm.Dedupe
	var sub Submission
	tooMany := func() *apierr.Error { return d.refuse(fm.TooMany, defTooMany) }
	if e := List(r, fm.ListField, fm.MaxRows, tooMany, d.item, sub.other()); e != nil {
		return Submission{}, e
	}
	if e := d.v.Err(); e != nil {
		return Submission{}, e
	}
	switch {
	case b.Rows() == 0:
		return Submission{}, d.refuse(fm.Empty, defEmpty)
	case b.Distinct() == 0:
		return Submission{}, d.refuse(fm.NoValid, defNoValid)
	}
	if len(d.gid) > 1 {
		b.GroupBy(d.groups, len(d.gid))
	}
	return sub, nil
}

// The generic refusals, for a Form that words none of its own.
var (
	defTooMany = form.Refusal{Type: apierr.TypeTooLong, Msg: "List should have at most {max} items"}
	defEmpty   = form.Refusal{Msg: "The list is empty: send 1 to {max} rows."}
	defNoValid = form.Refusal{Type: apierr.TypeValueError, Msg: "No valid row: all {rows} rows are invalid"}
)

type decoder struct {
	fm     form.Form
	row    RowFunc
	b      *jobs.Builder
	typ    reflect.Type // a row object's (nil: Scalar)
	vals   []*string
	loc    string
	v      apierr.Validation
	groups []int32          // each distinct input's group, numbered in order of first appearance
	gid    map[string]int32 // the groups' numbers
}

// refuse is the Form's refusal r (else def) of the whole list.
func (d *decoder) refuse(r, def form.Refusal) *apierr.Error {
	if r.Msg == "" {
		r = def
	}
	msg := strings.NewReplacer("{max}", strconv.Itoa(d.fm.MaxRows), "{rows}", strconv.Itoa(d.b.Rows())).Replace(r.Msg)
	if r.Type == "" {
		return apierr.New(http.StatusBadRequest, msg)
	}
	return apierr.Unprocessable(apierr.Item{Loc: d.loc, Type: r.Type, Msg: msg})
}

// rowType is a struct of one *string per field of fm, tagged with its
// name: a row object decodes into it the way encoding/json decodes any
// struct (names matched case-insensitively, the last of a repeated name
// kept, a value of the wrong type named by its field).
func rowType(fm form.Form) reflect.Type {
	fields := make([]reflect.StructField, len(fm.Fields))
	for k, f := range fm.Fields {
		fields[k] = reflect.StructField{Name: "F" + strconv.Itoa(k), Type: reflect.TypeFor[*string](),
			Tag: reflect.StructTag(`json:"` + f.Name + `"`)}
	}
	return reflect.StructOf(fields)
}

// item reads the list's i-th row.
func (d *decoder) item(dec *json.Decoder, i int) *apierr.Error {
	ok, e := d.values(dec, i)
	if !ok {
		return e
	}
	for k, f := range d.fm.Fields {
		ok = d.check(f, d.vals[k], i) && ok
	}
	if !ok || len(d.v.Items) >= MaxReported {
		return nil // nothing more can be added or reported
	}
	r := d.row(d.vals)
	if r.Problem != nil {
		d.add(r.Problem.Type, r.Problem.Msg, i, r.Problem.Field)
		return nil
	}
	if !d.v.Empty() {
		return nil
	}
	d.b.EchoTag = r.EchoTag
	if r.Invalid != "" {
		d.b.AddInvalid(r.Echo, r.Invalid)
		return nil
	}
	n := d.b.Distinct()
	d.b.AddValid(r.Echo, r.Key, r.Payload)
	if d.b.Distinct() > n {
		d.group(r.Group)
	}
	return nil
}

// group numbers the next distinct input's group g.
func (d *decoder) group(g string) {
	if d.gid == nil {
		d.gid = map[string]int32{}
	}
	id, ok := d.gid[g]
	if !ok {
		id = int32(len(d.gid))
		d.gid[g] = id
	}
	d.groups = append(d.groups, id)
}

// values decodes the i-th row into d.vals: ok false when it is not of
// the Form's shape (the problem recorded) or not JSON (the error).
func (d *decoder) values(dec *json.Decoder, i int) (ok bool, e *apierr.Error) {
	if d.typ == nil {
		var s *string
		if err := dec.Decode(&s); err != nil {
			var te *json.UnmarshalTypeError
			if !errors.As(err, &te) {
				return false, FromJSON(err)
			}
			s = nil
		}
		if s == nil {
			d.add(apierr.TypeStringType, "Input should be a valid string", i, "")
			return false, nil
		}
		d.vals[0] = s
		return true, nil
	}
	p := reflect.New(d.typ)
	if err := dec.Decode(p.Interface()); err != nil {
		var te *json.UnmarshalTypeError
		if !errors.As(err, &te) {
			return false, FromJSON(err)
		}
		if te.Field == "" || strings.Contains(te.Field, ".") {
			d.add(apierr.TypeObjectType, "Input should be a valid object", i, "")
		} else {
			d.add(apierr.TypeStringType, "Input should be a valid string", i, te.Field)
		}
		return false, nil
	}
	st := p.Elem()
	for k := range d.vals {
		d.vals[k] = st.Field(k).Interface().(*string)
	}
	return true, nil
}

// check records what is wrong with the value of field f of row i, by the
// Form's rules; false when something is.
func (d *decoder) check(f form.Field, val *string, i int) bool {
	switch {
	case val == nil:
		if !d.fm.AllRequired {
			return true
		}
		d.add(apierr.TypeMissing, "Field required", i, d.field(f))
	case f.MinLen > 0 && utf8.RuneCountInString(*val) < f.MinLen:
		d.add(apierr.TypeStringTooShort, fmt.Sprintf("String should have at least %d characters", f.MinLen), i, d.field(f))
	case f.MaxLen > 0 && OverChars(*val, f.MaxLen):
		d.add(apierr.TypeStringTooLong, fmt.Sprintf("String should have at most %d characters", f.MaxLen), i, d.field(f))
	default:
		return true
	}
	return false
}

// field is f's location in a row: none in a Scalar form's.
func (d *decoder) field(f form.Field) string {
	if d.fm.Scalar {
		return ""
	}
	return f.Name
}

// add records a problem of row i (at its field, when one is named) while
// fewer than MaxReported are.
func (d *decoder) add(typ, msg string, i int, field string) {
	if len(d.v.Items) >= MaxReported {
		return
	}
	if field == "" {
		d.v.Add(apierr.Loc("body", d.fm.ListField, i), typ, msg)
		return
	}
	d.v.Add(apierr.Loc("body", d.fm.ListField, i, field), typ, msg)
}

// other reads the body's webhook_url into s.
func (s *Submission) other() func(key string, dec *json.Decoder) (bool, *apierr.Error) {
	seen := false
	return func(key string, dec *json.Decoder) (bool, *apierr.Error) {
		if key != WebhookField {
			return false, nil
		}
		if seen {
			return true, apierr.New(http.StatusBadRequest, `Malformed JSON body: the "webhook_url" field appears more than once.`)
		}
		seen = true
		if err := dec.Decode(&s.WebhookURL); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				return true, apierr.Unprocessable(apierr.Item{Loc: "body." + WebhookField, Type: apierr.TypeStringType, Msg: "Input should be a valid string"})
			}
			return true, FromJSON(err)
		}
		return true, nil
	}
}

// OverChars reports whether s has more than max characters (not bytes);
// the byte length answers most calls without counting. The spec's length
// limits count characters, in bodies and in query parameters alike.
func OverChars(s string, max int) bool {
	return len(s) > max && utf8.RuneCountInString(s) > max
}
