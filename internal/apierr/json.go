package apierr

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// TooLarge is the 400 of a body cut off at its limit (docs/api.md: the
// spec's table has no 413), nil for any other error.
func TooLarge(err error) *Error {
	var mbe *http.MaxBytesError
	if !errors.As(err, &mbe) {
		return nil
	}
	return New(http.StatusBadRequest, fmt.Sprintf("Request body is larger than the limit of %d bytes.", mbe.Limit))
}

// FromJSON maps an error of encoding/json (or of reading the body under it)
// to an API error: a body over its limit or malformed JSON is 400, a value
// of the wrong type 422 with its location.
func FromJSON(err error) *Error {
	if e := Carried(err); e != nil {
		return e
	}
	if e := TooLarge(err); e != nil {
		return e
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return New(http.StatusBadRequest, fmt.Sprintf("Malformed JSON body: %s (at byte %d).", se.Error(), se.Offset))
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return New(http.StatusBadRequest, "Malformed JSON body: unexpected end of input.")
	case errors.As(err, &te):
		loc := "body"
		if te.Field != "" {
			loc += "." + te.Field
		}
		typ, want := typeName(te.Type.Kind().String())
		if te.Field == "" {
			return Unprocessable(Item{Loc: loc, Type: TypeObjectType, Msg: "Input should be a JSON object"})
		}
		return Unprocessable(Item{Loc: loc, Type: typ, Msg: "Input should be " + want})
	default:
		return New(http.StatusBadRequest, "Malformed JSON body: "+strings.TrimPrefix(err.Error(), "json: ")+".")
	}
}

func typeName(kind string) (typ, want string) {
	switch kind {
	case "string":
		return TypeStringType, "a valid string"
	case "slice", "array":
		return TypeListType, "a valid list"
	case "struct", "map":
		return TypeObjectType, "a valid object"
	case "int", "int64", "int32", "uint", "uint64":
		return TypeIntParsing, "a valid integer"
	case "bool":
		return "bool_type", "a valid boolean"
	}
	return TypeValueError, "a valid " + kind
}

// ListBody streams a JSON object body whose one interesting field is a
// list, as bulk submissions are: {"<field>": [item, item, ...], ...}. Each
// item is handed to item as it arrives (the decoder positioned at it), so a
// 100,000-item body is never held as a second copy. Other fields are
// skipped; the field given twice is a 400 (reading both would let one body
// carry more than the limit, and picking one could run rows the client did
// not mean). missing is reported when the field is absent; more than max
// items is the error tooMany returns.
func ListBody(r io.Reader, field string, max int, tooMany func() *Error, item func(dec *json.Decoder, i int) *Error) *Error {
	dec := json.NewDecoder(r)
	tok, err := dec.Token()
	if err != nil {
		return FromJSON(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return Unprocessable(Item{Loc: "body", Type: TypeObjectType, Msg: "Input should be a JSON object"})
	}
	loc := "body." + field
	seen := false
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return FromJSON(err)
		}
		if key, _ := kt.(string); key != field {
			if of, ok := r.(OtherFields); ok {
				handled, e := of.Field(key, dec)
				if e != nil {
					return e
				}
				if handled {
					continue
				}
			}
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return FromJSON(err)
			}
			continue
		}
		if seen {
			return New(http.StatusBadRequest, fmt.Sprintf("Malformed JSON body: the %q field appears more than once.", field))
		}
		seen = true
		tok, err := dec.Token()
		if err != nil {
			return FromJSON(err)
		}
		if d, ok := tok.(json.Delim); !ok || d != '[' {
			return Unprocessable(Item{Loc: loc, Type: TypeListType, Msg: "Input should be a valid list"})
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
	}
	if _, err := dec.Token(); err != nil { // closing brace
		return FromJSON(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return New(http.StatusBadRequest, "Malformed JSON body: unexpected data after the JSON value.")
	}
	if !seen {
		return Unprocessable(Item{Loc: loc, Type: TypeMissing, Msg: "Field required"})
	}
	return nil
}

// OtherFields is a body that reads some of the object's other top-level
// fields itself (the API reads a submission's webhook_url this way, for
// every family): ListBody offers each field that is not the list to
// Field, the decoder positioned at its value. Field reports whether it
// decoded the value (else ListBody skips it); an error is the answer.
type OtherFields interface {
	io.Reader
	Field(name string, dec *json.Decoder) (handled bool, e *Error)
}

// DecodeItem decodes one list item of a ListBody into dst. A value of the
// wrong type is a 422 problem recorded in val (while it holds fewer than
// max) at loc (the item is not an object) or loc.<field> (a field is not a
// string), and gives ok false; malformed JSON is the error returned. The
// decoder has moved past the item either way.
func DecodeItem(dec *json.Decoder, dst any, val *Validation, max int, loc ...any) (ok bool, e *Error) {
	err := dec.Decode(dst)
	if err == nil {
		return true, nil
	}
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return false, FromJSON(err)
	}
	if len(val.Items) < max {
		if te.Field == "" || strings.Contains(te.Field, ".") {
			val.Add(Loc(loc...), TypeObjectType, "Input should be a valid object")
		} else {
			val.Add(Loc(append(loc, te.Field)...), TypeStringType, "Input should be a valid string")
		}
	}
	return false, nil
}
