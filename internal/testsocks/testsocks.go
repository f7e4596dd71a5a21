// Package testsocks starts a small real SOCKS5 proxy (RFC 1928) on a
// loopback port for a test: the no-authentication method or user/password
// (RFC 1929), the CONNECT command to IPv4, IPv6 and domain-name targets,
// the RFC's reply codes (a refused target is reply 5), and relaying both
// ways until either side closes. Its outbound connections may leave from a
// chosen source address, so a test's mail server sees the proxy's address
// as the client. It records every CONNECT target as asked, and its address
// type, so a test can assert that a client never hands it a name.
package testsocks

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is one running proxy.
type Server struct {
	// Addr is the proxy's host:port.
	Addr string

	user, pass string
	source     netip.Addr
	ln         net.Listener
	wg         sync.WaitGroup

	mu       sync.Mutex
	connects []Connect
	authFail int
	conns    map[net.Conn]struct{}
	closed   bool
}

// Connect is one CONNECT request as the proxy received it.
type Connect struct {
	Target string // host:port as asked (an address literal or a name)
	Name   bool   // the target was a domain name (ATYP 3)
}

// Options configure a Server.
type Options struct {
	// User and Password, when User is set, make user/password
	// authentication (RFC 1929) required.
	User, Password string
	// Source is the local address the proxy's outbound connections leave
	// from; invalid: the system chooses.
	Source netip.Addr
}

// Start starts a proxy on 127.0.0.1 and stops it when the test ends.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testsocks: listen: %v", err)
	}
	s := &Server{Addr: ln.Addr().String(), user: o.User, pass: o.Password, source: o.Source, ln: ln,
		conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(s.Close)
	return s
}

// Close stops accepting, closes every connection and waits for them.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.ln.Close()
	s.wg.Wait()
}

// Connects returns the CONNECT requests received so far.
func (s *Server) Connects() []Connect {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Connect(nil), s.connects...)
}

// AuthFailures is how many clients gave a wrong user name or password.
func (s *Server) AuthFailures() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.authFail
}

func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		if !s.track(c) {
			c.Close()
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.untrack(c)
			s.serve(c)
		}()
	}
}

// handshakeTimeout bounds a client's greeting, authentication and request.
const handshakeTimeout = 10 * time.Second

func (s *Server) serve(c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(handshakeTimeout))
	var hdr [2]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil || hdr[0] != 5 || hdr[1] == 0 {
		return
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(c, methods); err != nil {
		return
	}
	want := byte(0x00)
	if s.user != "" {
		want = 0x02
	}
	offered := false
	for _, m := range methods {
		offered = offered || m == want
	}
	if !offered {
		_, _ = c.Write([]byte{5, 0xff})
		return
	}
	if _, err := c.Write([]byte{5, want}); err != nil {
		return
	}
	if want == 0x02 && !s.auth(c) {
		return
	}
	var req [4]byte
	if _, err := io.ReadFull(c, req[:]); err != nil || req[0] != 5 {
		return
	}
	host, name, ok := s.readHost(c, req[3])
	if !ok {
		return
	}
	var pb [2]byte
	if _, err := io.ReadFull(c, pb[:]); err != nil {
		return
	}
	target := net.JoinHostPort(host, strconv.Itoa(int(binary.BigEndian.Uint16(pb[:]))))
	s.mu.Lock()
	s.connects = append(s.connects, Connect{Target: target, Name: name})
	s.mu.Unlock()
	if req[1] != 1 {
		s.reply(c, 7) // only CONNECT
		return
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	if s.source.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: s.source.AsSlice()}
	}
	up, err := d.Dial("tcp", target)
	if err != nil {
		code := byte(1)
		var oe *net.OpError
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			code = 5
		case errors.As(err, &oe) && oe.Timeout():
			code = 4
		}
		s.reply(c, code)
		return
	}
	if !s.track(up) {
		up.Close()
		return
	}
	defer s.untrack(up)
	s.reply(c, 0)
	_ = c.SetDeadline(time.Time{})
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); closeWrite(up); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); closeWrite(c); done <- struct{}{} }()
	<-done
	<-done
}

// readHost reads the request's DST.ADDR of address type atyp: an IPv4 or
// IPv6 address, or a name (name true). ok false: the client is answered
// (or gone).
func (s *Server) readHost(c net.Conn, atyp byte) (host string, name, ok bool) {
	switch atyp {
	case 1, 4:
		b := make([]byte, 4)
		if atyp == 4 {
			b = make([]byte, 16)
		}
		if _, err := io.ReadFull(c, b); err != nil {
			return "", false, false
		}
		a, _ := netip.AddrFromSlice(b)
		return a.Unmap().String(), false, true
	case 3:
		var l [1]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return "", false, false
		}
		b := make([]byte, l[0])
		if _, err := io.ReadFull(c, b); err != nil {
			return "", false, false
		}
		return string(b), true, true
	default:
		s.reply(c, 8)
		return "", false, false
	}
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
		return
	}
	c.Close()
}

// auth runs RFC 1929's subnegotiation.
func (s *Server) auth(c net.Conn) bool {
	var v [2]byte
	if _, err := io.ReadFull(c, v[:]); err != nil || v[0] != 1 {
		return false
	}
	u := make([]byte, v[1])
	if _, err := io.ReadFull(c, u); err != nil {
		return false
	}
	var pl [1]byte
	if _, err := io.ReadFull(c, pl[:]); err != nil {
		return false
	}
	p := make([]byte, pl[0])
	if _, err := io.ReadFull(c, p); err != nil {
		return false
	}
	if string(u) != s.user || string(p) != s.pass {
		s.mu.Lock()
		s.authFail++
		s.mu.Unlock()
		_, _ = c.Write([]byte{1, 1})
		return false
	}
	_, err := c.Write([]byte{1, 0})
	return err == nil
}

// reply sends a CONNECT reply with BND.ADDR 0.0.0.0:0.
func (s *Server) reply(c net.Conn, code byte) {
	_, _ = c.Write([]byte{5, code, 0, 1, 0, 0, 0, 0, 0, 0})
}
