package kube_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
)

// web is a forward proxy on loopback standing for every website: the
// redirect checks of domain rows reach it through BULKD_HTTP_PROXY. Sites
// answer 200, a few redirect, and a site can be told to hang its first
// request until the request is abandoned (its process killed).
type web struct {
	srv *httptest.Server

	mu        sync.Mutex
	redirects map[string]string
	hang      map[string]bool // host -> already hung once
	hits      chan string     // hosts whose first request is hanging
}

func startWeb() *web {
	w := &web{redirects: map[string]string{
		"moved.example": "http://www.newhome.example/",
	}, hang: map[string]bool{}, hits: make(chan string, 16)}
	w.srv = httptest.NewServer(http.HandlerFunc(w.serve))
	return w
}

// hangOnce makes host's first request hang; it shows up on w.hits.
func (w *web) hangOnce(host string) {
	w.mu.Lock()
	w.hang[host] = false
	w.mu.Unlock()
}

func (w *web) serve(rw http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect || !r.URL.IsAbs() {
		http.Error(rw, "no TLS sites here", http.StatusBadGateway)
		return
	}
	host := r.URL.Hostname()
	w.mu.Lock()
	hung, isHang := w.hang[host]
	if isHang && !hung {
		w.hang[host] = true
	}
	loc := w.redirects[host]
	w.mu.Unlock()
	if isHang && !hung {
		w.hits <- host
		<-r.Context().Done() // until the client goes away
		return
	}
	if loc != "" {
		rw.Header().Set("Location", loc)
		rw.WriteHeader(http.StatusMovedPermanently)
		return
	}
	rw.Header().Set("Content-Type", "text/html")
	fmt.Fprint(rw, "<p>hello</p>")
}
