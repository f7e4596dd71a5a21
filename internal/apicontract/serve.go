package apicontract

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
)

// Serve wraps next so that every exchange it serves is checked against the
// document (Default); mismatches fail tb, reported when tb's cleanups run.
// Call it before registering the test server's Close with tb.Cleanup, so
// that the report comes after the server has finished every request.
func Serve(tb testing.TB, next http.Handler) http.Handler {
	tb.Helper()
	c, err := Default()
	if err != nil {
		tb.Fatal(err)
	}
	var (
		mu       sync.Mutex
		problems []string
	)
	tb.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for i, p := range problems {
			if i == 20 {
				tb.Errorf("apicontract: and %d more mismatches", len(problems)-i)
				break
			}
			tb.Errorf("apicontract: %s", p)
		}
	})
	return c.Handler(next, func(p []string) {
		mu.Lock()
		problems = append(problems, p...)
		mu.Unlock()
	})
}

// Handler wraps next: each exchange is checked once its handler returns,
// and report gets the mismatches of an exchange that has any.
func (c *Checker) Handler(next http.Handler, report func([]string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ex := &Exchange{Method: r.Method, RequestURI: requestURI(r), Header: r.Header.Clone()}
		var body *teeBody
		if r.Body != nil && r.Body != http.NoBody {
			// On a copy of the request: the server looks at its own
			// request's Body after the handler (to drain or not what is
			// left of it), and must find its own type there.
			body = &teeBody{rc: r.Body}
			r = r.WithContext(r.Context())
			r.Body = body
		} else {
			ex.BodyComplete = true
		}
		rw := &recorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rw, r)
		// The answer goes out before it is checked: checking must not slow
		// the client down (tests time answers and bursts).
		if !rw.hijacked {
			_ = http.NewResponseController(w).Flush()
		}
		// A hijacked connection (none of the API's answers) is not an
		// answer to check; a panic never gets here, as it never answers.
		if rw.hijacked {
			return
		}
		if body != nil {
			ex.Body, ex.BodyComplete = body.buf.Bytes(), body.eof && !body.over
		}
		ex.Status = rw.status
		ex.ResponseHeader = rw.header
		if ex.ResponseHeader == nil {
			ex.ResponseHeader = w.Header().Clone()
		}
		ex.ResponseBody, ex.ResponseComplete = rw.buf.Bytes(), !rw.over
		if p := c.Check(ex); len(p) > 0 {
			report(p)
		}
	})
}

// teeBody keeps what the handler reads of a request body, up to
// MaxRequestBody.
type teeBody struct {
	rc   io.ReadCloser
	buf  bytes.Buffer
	eof  bool
	over bool
}

func (b *teeBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 && !b.over {
		if b.buf.Len()+n > MaxRequestBody {
			b.over = true
			b.buf = bytes.Buffer{}
		} else {
			b.buf.Write(p[:n])
		}
	}
	if errors.Is(err, io.EOF) {
		b.eof = true
	}
	return n, err
}

func (b *teeBody) Close() error { return b.rc.Close() }

// recorder passes an answer on and keeps its status, headers and (up to
// MaxBody) body. It unwraps for http.ResponseController and passes
// Flush and Hijack on.
type recorder struct {
	http.ResponseWriter
	status   int
	header   http.Header
	wrote    bool
	buf      bytes.Buffer
	over     bool
	hijacked bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote && code >= 200 {
		r.status, r.wrote = code, true
		r.header = r.ResponseWriter.Header().Clone()
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if !r.wrote {
		r.WriteHeader(http.StatusOK)
	}
	if !r.over {
		if r.buf.Len()+len(p) > MaxBody {
			r.over = true
			r.buf = bytes.Buffer{}
		} else {
			r.buf.Write(p)
		}
	}
	return r.ResponseWriter.Write(p)
}

func (r *recorder) Flush() {
	if !r.wrote {
		r.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(r.ResponseWriter).Flush()
}

func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	r.hijacked = true
	return http.NewResponseController(r.ResponseWriter).Hijack()
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
