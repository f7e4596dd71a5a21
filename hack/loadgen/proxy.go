package main

import (
	"net"
	"net/http"
	"strings"
	"sync/atomic"
)

type proxyServer struct {
	Addr string
	ln   net.Listener
}

func (p *proxyServer) Close() { _ = p.ln.Close() }

// websiteProxy stands in for the internet: a forward proxy on loopback that
// answers every website request itself. One domain in ten redirects to
// another site, the rest answer 200.
func websiteProxy() (*proxyServer, func() int64) {
	var n atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		host := strings.TrimPrefix(r.Host, "www.")
		if strings.HasSuffix(host, "0.example") {
			w.Header().Set("Location", "http://www.elsewhere.example/")
			w.WriteHeader(http.StatusMovedPermanently)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	go func() { _ = http.Serve(ln, h) }()
	return &proxyServer{Addr: ln.Addr().String(), ln: ln}, n.Load
}
