package apiserver

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestPanicBecomesGeneric500(t *testing.T) {
	s := &Server{Deps: Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	h := s.recoverer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("secret internals") }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != 500 || strings.Contains(rec.Body.String(), "secret") || !strings.Contains(rec.Body.String(), `"detail"`) {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
}

// FuzzDecodeJSON: any body decodes to a value or to a 400/422 in the SPEC
// 2.10 shape; nothing panics.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{`{"content":"x"}`, `{"content":5}`, `[]`, `{"content":"x"} 1`, ``, `{"subject":null}`, `"\ud800"`, `{"content":"é"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req SpamCheckRequest
		e := DecodeJSONBytes(b, &req)
		if e == nil {
			e = validateSpamCheck(&req)
		}
		if e == nil {
			return
		}
		if e.Status != 400 && e.Status != 422 {
			t.Fatalf("status %d for %q", e.Status, b)
		}
		if e.Detail == "" || (e.Status == 422) != (len(e.Errors) > 0) {
			t.Fatalf("bad error %+v", e)
		}
		if len(e.Errors) == 1 && e.Detail != e.Errors[0].Msg {
			t.Fatalf("single-item detail %q != %q", e.Detail, e.Errors[0].Msg)
		}
	})
}
