package jsonbody_test

import (
	"strings"
	"testing"

	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/family/form"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/jsonbody"
)

// A form that words none of its refusals: everything about its bodies is
// derived from the declaration, the row function sees valid rows only.
var toy = form.Form{
	Fields:      []form.Field{{Name: "a", MaxLen: 5}, {Name: "b", MinLen: 2}},
	AllRequired: true,
	ListField:   "rows",
	MaxRows:     5,
	Dedupe:      true,
}

func toyRows(vals []*string) jsonbody.Row {
	a, b := *vals[0], *vals[1]
	switch {
	case a == "bad":
		return jsonbody.Row{Problem: &jsonbody.Problem{Field: "a", Type: apierr.TypeValueError, Msg: "Not this one"}}
	case a == "skip":
		return jsonbody.Row{Echo: a, Invalid: "skipped"}
	}
	return jsonbody.Row{Echo: a + b, Key: strings.ToLower(a), Payload: a, Group: b}
}

func TestDecodeByForm(t *testing.T) {
	for _, c := range []struct {
		name, body string
		status     int
		want       string // the detail, or the errors' loc/type/msg
		rows, in   int
		webhook    string
	}{
		{"rows, deduplicated, names matched as encoding/json does", `{"rows":[{"a":"x","b":"yy"},{"A":"X","B":"zz"},{"a":"w","b":"yy"}],"webhook_url":"https://h.example/x"}`,
			200, "", 2, 2, "https://h.example/x"},
		{"null webhook_url is none", `{"webhook_url":null,"rows":[{"a":"x","b":"yy"}]}`, 200, "", 1, 1, ""},
		{"empty", `{"rows":[]}`, 400, "The list is empty: send 1 to 5 rows.", 0, 0, ""},
		{"too many", `{"rows":[{},{},{},{},{},{}]}`, 422, "body.rows too_long List should have at most 5 items", 0, 0, ""},
		{"no list", `{"row":[]}`, 422, "body.rows missing Field required", 0, 0, ""},
		{"the form's checks, then the family's", `{"rows":[{"a":"toolong","b":"y"},5,{"b":"yy"},{"a":"bad","b":"yy"},{"a":1}]}`, 422,
			"body.rows.0.a string_too_long String should have at most 5 characters; " +
				"body.rows.0.b string_too_short String should have at least 2 characters; " +
				"body.rows.1 dict_type Input should be a valid object; " +
				"body.rows.2.a missing Field required; " +
				"body.rows.3.a value_error Not this one; " +
				"body.rows.4.a string_type Input should be a valid string", 0, 0, ""},
		{"no valid row", `{"rows":[{"a":"skip","b":"yy"}]}`, 422, "body.rows value_error No valid row: all 1 rows are invalid", 0, 0, ""},
		{"webhook_url twice", `{"webhook_url":null,"webhook_url":"x","rows":[]}`, 400,
			`Malformed JSON body: the "webhook_url" field appears more than once.`, 0, 0, ""},
		{"webhook_url not a string", `{"webhook_url":5,"rows":[]}`, 422, "body.webhook_url string_type Input should be a valid string", 0, 0, ""},
		{"list twice", `{"rows":[],"rows":[]}`, 400, `Malformed JSON body: the "rows" field appears more than once.`, 0, 0, ""},
	} {
		b := jobs.NewBuilder("toy", 0)
		sub, e := jsonbody.Decode(toy, toyRows, strings.NewReader(c.body), b)
		if c.status == 200 {
			if e != nil || b.Rows() != c.rows || b.Distinct() != c.in {
				t.Errorf("%s: %v, %d rows, %d inputs", c.name, e, b.Rows(), b.Distinct())
			}
			if got := ""; sub.WebhookURL != nil {
				if got = *sub.WebhookURL; got != c.webhook {
					t.Errorf("%s: webhook %q", c.name, got)
				}
			} else if c.webhook != "" {
				t.Errorf("%s: no webhook", c.name)
			}
			continue
		}
		if e == nil || e.Status != c.status {
			t.Errorf("%s: %v, want %d", c.name, e, c.status)
			continue
		}
		got := e.Detail
		if c.status == 422 {
			var items []string
			for _, it := range e.Errors {
				items = append(items, it.Loc+" "+it.Type+" "+it.Msg)
			}
			got = strings.Join(items, "; ")
		}
		if got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}
