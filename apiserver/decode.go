package apiserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/jsonbody"
)

// decodeJSON reads a small JSON request body into v. Syntax problems are 400
// (malformed body, SPEC section 7); a value of the wrong type is 422 with its
// location. Unknown fields are ignored, so clients may send more than we
// read. Bulk submissions are streamed instead, by jsonbody.Decode with
// their families' Forms, which never holds a second copy of a large body.
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
		return jsonbody.FromJSON(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return apierr.New(http.StatusBadRequest, "Malformed JSON body: unexpected data after the JSON value.")
	}
	return nil
}

func readError(err error) *apierr.Error {
	if e := apierr.Carried(err); e != nil {
		return e // admission control's answer (admission.go)
	}
	if e := jsonbody.TooLarge(err); e != nil {
		return e
	}
	return apierr.New(http.StatusBadRequest, "Request body could not be read: "+err.Error())
}
