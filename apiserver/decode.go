package apiserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/bulkd/bulkd/internal/apierr"
)

// decodeJSON reads a small JSON request body into v. Syntax problems are 400
// (malformed body, SPEC section 7); a value of the wrong type is 422 with its
// location. Unknown fields are ignored, so clients may send more than we
// read. Bulk submissions use the streaming decoders of their families
// instead, which never hold a second copy of a large body.
func decodeJSON(w http.ResponseWriter, r *http.Request, maxBytes int64, v any) *apierr.Error {
	body := http.MaxBytesReader(w, r.Body, maxBytes)
	b, err := io.ReadAll(body)
	if err != nil {
		return readError(err)
	}
	return DecodeJSONBytes(b, v)
}

// DecodeJSONBytes is decodeJSON's parsing half, exported for fuzzing.
func DecodeJSONBytes(b []byte, v any) *apierr.Error {
	if len(bytes.TrimSpace(b)) == 0 {
		return apierr.New(http.StatusBadRequest, "Request body is empty; a JSON object is required.")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return apierr.New(http.StatusBadRequest, "Malformed JSON body: unexpected data after the JSON value.")
	}
	return nil
}

func readError(err error) *apierr.Error {
	if e := tooLarge(err); e != nil {
		return e
	}
	return apierr.New(http.StatusBadRequest, "Request body could not be read: "+err.Error())
}

// tooLarge is the 400 of a body cut off at its limit (docs/api.md: the
// spec's table has no 413), nil for any other error.
func tooLarge(err error) *apierr.Error {
	var mbe *http.MaxBytesError
	if !errors.As(err, &mbe) {
		return nil
	}
	return apierr.New(http.StatusBadRequest, fmt.Sprintf("Request body is larger than the limit of %d bytes.", mbe.Limit))
}

// jsonError maps encoding/json's errors to API errors.
func jsonError(err error) *apierr.Error {
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
