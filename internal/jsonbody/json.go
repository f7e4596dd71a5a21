// Package jsonbody reads JSON request bodies into what the API answers
// (apierr keeps the error shapes): a body's JSON errors as 400s and 422s
// (FromJSON, TooLarge), and a bulk submission streamed by its family's Form
// (Decode, submission.go).
package jsonbody

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/bulkd/bulkd/internal/apierr"
)

// TooLarge is the 400 of a body cut off at its limit (docs/api.md: the
// spec's table has no 413), nil for any other error.
func TooLarge(err error) *apierr.Error {
	var mbe *http.MaxBytesError
	if !errors.As(err, &mbe) {
		return nil
	}
	return apierr.New(http.StatusBadRequest, fmt.Sprintf("Request body is larger than the limit of %d bytes.", mbe.Limit))
}

// FromJSON maps an error of encoding/json (or of reading the body under it)
// to an API error: a body over its limit or malformed JSON is 400, a value
// of the wrong type 422 with its location.
func FromJSON(err error) *apierr.Error {
	if e := apierr.Carried(err); e != nil {
		return e
	}
	if e := TooLarge(err); e != nil {
		return e
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return apierr.New(http.StatusBadRequest, fmt.Sprintf("Malformed JSON body: %s (at byte %d).", se.Error(), se.Offset))
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return apierr.New(http.StatusBadRequest, "Malformed JSON body: unexpected end of input.")
	case errors.As(err, &te):
		loc := "body"
		if te.Field != "" {
			loc += "." + te.Field
		}
		typ, want := typeName(te.Type.Kind().String())
		if te.Field == "" {
			return apierr.Unprocessable(apierr.Item{Loc: loc, Type: apierr.TypeObjectType, Msg: "Input should be a JSON object"})
		}
		return apierr.Unprocessable(apierr.Item{Loc: loc, Type: typ, Msg: "Input should be " + want})
	default:
		return apierr.New(http.StatusBadRequest, "Malformed JSON body: "+strings.TrimPrefix(err.Error(), "json: ")+".")
	}
}

func typeName(kind string) (typ, want string) {
	switch kind {
	case "string":
		return apierr.TypeStringType, "a valid string"
	case "slice", "array":
		return apierr.TypeListType, "a valid list"
	case "struct", "map":
		return apierr.TypeObjectType, "a valid object"
	case "int", "int64", "int32", "uint", "uint64":
		return apierr.TypeIntParsing, "a valid integer"
	case "bool":
		return "bool_type", "a valid boolean"
	}
	return apierr.TypeValueError, "a valid " + kind
}

// List streams a JSON object body whose one interesting field is a list,
// as bulk submissions are: {"<field>": [item, item, ...], ...}. Each item
// is handed to item as it arrives (the decoder positioned at it), so a
// 100,000-item body is never held as a second copy. Every other field is
// offered to other (the decoder positioned at its value), which reports
// whether it decoded the value (else List skips it); an error is the
// answer. The list field given twice is a 400 (reading both would let one
// body carry more than the limit, and picking one could run rows the
// client did not mean). A missing field is a 422; more than max items is
// the error tooMany returns.
func List(r io.Reader, field string, max int, tooMany func() *apierr.Error, item func(dec *json.Decoder, i int) *apierr.Error,
	other func(key string, dec *json.Decoder) (bool, *apierr.Error)) *apierr.Error {
	dec := json.NewDecoder(r)
	tok, err := dec.Token()
	if err != nil {
		return FromJSON(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return apierr.Unprocessable(apierr.Item{Loc: "body", Type: apierr.TypeObjectType, Msg: "Input should be a JSON object"})
	}
	seen := false
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return FromJSON(err)
		}
		if key, _ := kt.(string); key != field {
			if e := skipOther(dec, key, other); e != nil {
				return e
			}
			continue
		}
		if seen {
			return apierr.New(http.StatusBadRequest, fmt.Sprintf("Malformed JSON body: the %q field appears more than once.", field))
		}
		seen = true
		if e := items(dec, "body."+field, max, tooMany, item); e != nil {
			return e
		}
	}
	if _, err := dec.Token(); err != nil { // closing brace
		return FromJSON(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return apierr.New(http.StatusBadRequest, "Malformed JSON body: unexpected data after the JSON value.")
	}
	if !seen {
		return apierr.Unprocessable(apierr.Item{Loc: "body." + field, Type: apierr.TypeMissing, Msg: "Field required"})
	}
	return nil
}

// skipOther offers a field that is not the list to other, and skips its
// value when other did not decode it.
func skipOther(dec *json.Decoder, key string, other func(string, *json.Decoder) (bool, *apierr.Error)) *apierr.Error {
	if other != nil {
		handled, e := other(key, dec)
		if e != nil || handled {
			return e
		}
	}
	var skip json.RawMessage
	if err := dec.Decode(&skip); err != nil {
		return FromJSON(err)
	}
	return nil
}

// items reads the list at loc, item by item.
func items(dec *json.Decoder, loc string, max int, tooMany func() *apierr.Error, item func(*json.Decoder, int) *apierr.Error) *apierr.Error {
	tok, err := dec.Token()
	if err != nil {
		return FromJSON(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return apierr.Unprocessable(apierr.Item{Loc: loc, Type: apierr.TypeListType, Msg: "Input should be a valid list"})
	}
	for i := 0; dec.More(); i++ {
		if i == max {
			return tooMany()
		}
		if e := item(dec, i); e != nil {
			return e
		}
	}
	if _, err := dec.Token(); err != nil { // closing bracket
		return FromJSON(err)
	}
	return nil
}
