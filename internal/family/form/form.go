// Package form is a family's one declaration of its input: how its rows
// are gathered from a table a person has (a CSV upload, a pasted list, a
// JSON Lines file), what a submission body of them looks like and what the
// API accepts in it, and where that body goes: its label, its input fields
// with the column names that mean them and their lengths, its body's
// shape, its row limit and dedupe, the spec's words for a list refused as
// a whole, its bulk endpoints and the job status fields a client follows.
// The API decodes bodies by it (internal/jsonbody, with the family's one
// function per row) and mounts the bulk endpoints it lists
// (internal/serve); the dashboard's new-job pages and bulkctl map a
// table's columns to its fields the same way (GuessHeader, Cells,
// mapping.go) and build the same bodies (Item, Body). Nothing else states
// a family's input.
//
// The package is a leaf (the standard library only): bulkctl, a client
// binary, links it without linking the server. The forms of the families
// bulkd ships are declared here for that reason (Company, Verification,
// Lookup, listed in Builtin, which bulkctl offers), and a shipped family
// added later declares its Form here too and appends it to Builtin; each
// family returns its own from family.Family.Form. A family outside bulkd
// (a test's: test/fourthfamily) declares its Form in its own package; the
// dashboard serves and shows it all the same, and it reaches bulkctl only
// when the program linking it says so (bulkctl.MountsOf).
package form

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode"
)

// Field is one input field of a family's rows.
type Field struct {
	// Name is the field's property in the body's row objects.
	Name  string
	Label string
	// Aliases are the column names that mean this field, normalized (Norm),
	// best first. The field's own name always matches too.
	Aliases []string
	// MaxLen is the most characters a value may have (the API's limit:
	// a longer one is a 422 at the value); 0: no limit of its own.
	// MinLen is the fewest (0: none).
	MaxLen, MinLen int
	// Fold, when set, is how values are compared for Dedupe on the client
	// side (bulkctl drops the repeats it folds alike; the server merges at
	// least those); nil: trimmed and lower-cased.
	Fold func(v string) string
	// Looks, when set, says whether a value looks like this field's: how a
	// table without a header is mapped, and how a value of a column that
	// may hold either of two fields is placed (company: a network URL or a
	// website).
	Looks func(v string) bool
}

// Form is a family's form.
type Form struct {
	Label string // e.g. "Email verification"
	Hint  string // one sentence: what it takes and what it costs
	// Fields in the order of the body's row objects.
	Fields []Field
	// AllRequired: every field must be mapped, and every row of a body
	// holds every field (else a 422 "Field required" at it); otherwise at
	// least one is mapped, and a row may leave any out.
	AllRequired bool
	// ListField is the body's list property ({"input": [...]}).
	ListField string
	// Scalar: the list's items are the only field's values, not objects
	// ({"emails": ["a@b.example"]}).
	Scalar bool
	// Default is the field a table without a header maps its first column
	// to when no value looks like any field ("": fields by position).
	Default string

	// Bulk are the family's bulk endpoints, at least one: the API mounts
	// each (internal/serve), and bulkctl submits to and follows jobs
	// through them.
	Bulk []Mount
	// MaxRows is the most rows one submission takes: the family's
	// MaxRows (family.NewRegistry refuses a Form that says otherwise).
	MaxRows int
	// Dedupe: the family answers one result row per distinct input
	// (bulkctl drops repeats before splitting a file, the same way),
	// rather than one per submitted row.
	Dedupe bool
	// TotalField is the job status's field with the job's number of
	// result rows ("total_rows"); Final is the status of a finished job
	// ("completed"). Clients poll with them.
	TotalField string
	Final      string

	// The answers to a list refused as a whole, in the spec's words for
	// the family (zero: the generic words of internal/jsonbody). TooMany:
	// more than MaxRows rows; Empty: no rows; NoValid: rows, none of them
	// valid (a family that answers invalid rows at no cost).
	TooMany, Empty, NoValid Refusal
}

// Refusal is the answer to a submission's list refused as a whole.
type Refusal struct {
	// Type, when set, makes it a 422 whose one errors[] item, of this
	// type, is at the list (body.<ListField>); else it is a 400.
	Type string
	// Msg is the 400's detail or the item's msg: "{max}" in it is
	// replaced by MaxRows, "{rows}" by the number of rows submitted.
	Msg string
}

// Mount is one bulk endpoint of a family: POST Path submits, GET
// Path/{job_id} is the job's status and GET Path/{job_id}/results its
// results.
type Mount struct {
	// Name names the endpoint in bulkctl's job handles and manifests
	// ("lookup", "unlimited-lookup"): unique across the families.
	Name string
	// Path is the endpoint's path, under /v1 ("/v1/bulk-lookup").
	Path string
	// Unlimited: the endpoint takes unlimited-plan keys and is paid for
	// with the plan's daily bulk search quota; the others take
	// pay-as-you-go keys and are paid for in credits (SPEC 5).
	Unlimited bool
}

// Norm is a column name as aliases are compared: lower case, letters and
// digits only ("First Name", "first_name" and "first-name" are one name).
func Norm(s string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(s) {
		if unicode.IsLetter(c) || unicode.IsDigit(c) {
			b.WriteRune(c)
		}
	}
	return b.String()
}

// GuessHeader maps fields to the columns of a header row by name: field ->
// column index, each field its first matching column, best alias first.
// Empty when no column name is recognised (the row is likely data).
func (fm Form) GuessHeader(head []string) map[string]int {
	m := map[string]int{}
	for _, f := range fm.Fields {
		names := append([]string{Norm(f.Name)}, f.Aliases...)
	alias:
		for _, a := range names {
			for i, h := range head {
				if Norm(h) == a {
					m[f.Name] = i
					break alias
				}
			}
		}
	}
	return m
}

// GuessValues maps fields to the columns of a table without a header from
// its first row's values: each cell goes to the first field not mapped yet
// whose Looks it satisfies; with no field that Looks, fields go by
// position; when nothing matched, Default takes the first column.
func (fm Form) GuessValues(row []string) map[string]int {
	m := map[string]int{}
	looks := false
	for _, f := range fm.Fields {
		looks = looks || f.Looks != nil
	}
	if !looks {
		for i, f := range fm.Fields {
			if i < len(row) {
				m[f.Name] = i
			}
		}
		return m
	}
	for i, c := range row {
		for _, f := range fm.Fields {
			if _, taken := m[f.Name]; !taken && f.Looks != nil && f.Looks(c) {
				m[f.Name] = i
				break
			}
		}
	}
	if len(m) == 0 && fm.Default != "" {
		m[fm.Default] = 0
	}
	return m
}

// Item is one row of the body from cells, one per field in the form's
// order: the value itself for a Scalar form, else an object of the fields;
// an empty cell is left out of the object unless keep says otherwise (the
// API then says what is wrong with it).
func (fm Form) Item(cells []string, keep func(field string) bool) json.RawMessage {
	if fm.Scalar {
		b, _ := json.Marshal(cells[0])
		return b
	}
	var buf bytes.Buffer
	buf.WriteByte('{')
	n := 0
	for k, f := range fm.Fields {
		if cells[k] == "" && (keep == nil || !keep(f.Name)) {
			continue
		}
		if n > 0 {
			buf.WriteByte(',')
		}
		n++
		name, _ := json.Marshal(f.Name)
		val, _ := json.Marshal(cells[k])
		buf.Write(name)
		buf.WriteByte(':')
		buf.Write(val)
	}
	buf.WriteByte('}')
	return buf.Bytes()
}

// Body is the submission body of items: {"<ListField>": [items...]}.
func (fm Form) Body(items []json.RawMessage) []byte {
	var b bytes.Buffer
	b.Write(fm.BodyStart())
	for i, it := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(it)
	}
	b.WriteString(BodyEnd)
	return b.Bytes()
}

// BodyStart is what a submission body starts with, before its first item
// ({"<ListField>":[), for a writer that streams the items (the
// dashboard's); the items are separated by commas and BodyEnd ends it.
func (fm Form) BodyStart() []byte {
	name, _ := json.Marshal(fm.ListField)
	return append(append([]byte(`{`), name...), `:[`...)
}

// BodyEnd ends a submission body after its last item.
const BodyEnd = "]}"
