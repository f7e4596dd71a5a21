package apiserver

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// BenchmarkMeteredBody is what weighing bytes as they arrive costs a read
// of a request body: a 64 MiB body read in 4 KiB and 32 KiB pieces
// through meteredBody (a reservation, and the rate rule's timer, per
// read) against the bare reader.
//
//	go test -run '^$' -bench MeteredBody -benchtime 20x ./apiserver/
func BenchmarkMeteredBody(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 64<<20)
	for _, piece := range []int{4 << 10, 32 << 10} {
		for _, metered := range []bool{false, true} {
			name := map[bool]string{false: "bare", true: "metered"}[metered]
			b.Run(name+"/"+map[int]string{4 << 10: "4KiB", 32 << 10: "32KiB"}[piece], func(b *testing.B) {
				s := &Server{Deps: Deps{Metrics: NewMetrics(), Logger: slog.New(slog.DiscardHandler)}}
				a := newAdmission(256<<20, 64<<20, time.Second, 64<<10, 5*time.Second)
				buf := make([]byte, piece)
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					var rc io.ReadCloser = io.NopCloser(bytes.NewReader(body))
					var mb *meteredBody
					if metered {
						r := httptest.NewRequest(http.MethodPost, "/", nil)
						mb = &meteredBody{ReadCloser: rc, s: s, a: a, w: httptest.NewRecorder(), r: r, account: "a", max: int64(len(body))}
						a.enter(mb)
						rc = mb
					}
					for {
						if _, err := rc.Read(buf); err != nil {
							break
						}
					}
					if mb != nil {
						mb.release()
					}
				}
			})
		}
	}
}
