package apiserver

import (
	"testing"
	"time"
)

// TestRateWindow pins the window's arithmetic on the client's clock.
func TestRateWindow(t *testing.T) {
	const w = 5 * time.Second
	const rate = 100 // bytes a second: 500 a window
	var rw rateWindow
	if d := rw.deadline(w, rate, 0); d != w {
		t.Fatalf("empty body: deadline %v, want the first window", d)
	}
	// 10,000 bytes in the first 100 ms, then nothing: the window that
	// ends 5 s after them carries nothing.
	for i := 1; i <= 10; i++ {
		rw.add(w, time.Duration(i)*10*time.Millisecond, int64(i)*1000)
	}
	if d := rw.deadline(w, rate, 10_000); d != 100*time.Millisecond+w {
		t.Fatalf("after a fast start: deadline %v, want %v", d, 100*time.Millisecond+w)
	}
	// 1 byte a second from then on never satisfies 500 bytes a window,
	// however much came before.
	at, cum := 100*time.Millisecond, int64(10_000)
	for range 20 {
		at += time.Second
		cum++
		rw.add(w, at, cum)
		if d := rw.deadline(w, rate, cum); d-at > w {
			t.Fatalf("trickle at %v: deadline %v is more than a window away", at, d)
		}
	}
	if d := rw.deadline(w, rate, cum); d > at {
		t.Fatalf("a trickle of 1 byte/s: deadline %v not before now %v", d, at)
	}
	if len(rw.s) > rateBuckets+2 {
		t.Fatalf("%d samples kept", len(rw.s))
	}
	// A steady 200 bytes a second keeps its deadline ahead of it.
	var st rateWindow
	for i := 1; i <= 100; i++ {
		at := time.Duration(i) * 100 * time.Millisecond
		st.add(w, at, int64(i)*20)
		if d := st.deadline(w, rate, int64(i)*20); d <= at {
			t.Fatalf("steady body at %v: deadline %v", at, d)
		}
	}
}
