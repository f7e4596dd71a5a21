package apiserver

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/spamcheck"
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
	for _, s := range []string{`{"text":"x"}`, `{"text":5}`, `[]`, `{"text":"x"} 1`, ``, `{"subject":null}`, `"\ud800"`, `{"html":"é"}`,
		`{"raw":"Subject: x\r\n\r\nhi"}`, `{"raw":"x","text":"y"}`, `{"from":"a\nb@c","text":"x"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req spamcheck.Request
		e := DecodeJSONBytes(b, &req)
		if e == nil {
			e = req.Validate()
		}
		if e == nil {
			_, e = req.Message(time.Now())
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
