package verify

import (
	"bufio"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// The one-host test servers of h.test (throttle_test, connlimit_test,
// hostile_test) share these: the listener, the DNS of h.test and the
// Postfix-like dialogue.

// listenSMTP accepts connections on a loopback port until the test ends
// and serves each with serve in its own goroutine; it returns the port.
func listenSMTP(t *testing.T, serve func(c net.Conn)) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// hTestDNS is a DNS server for h.test: every name under h.test has the MX
// mx.h.test, which is 127.0.0.1. It returns the server's address.
func hTestDNS(t *testing.T) string {
	t.Helper()
	f := startFakeDNS(t, func(w dns.ResponseWriter, q dns.Question, m *dns.Msg) bool {
		switch {
		case q.Qtype == dns.TypeMX && strings.HasSuffix(q.Name, "h.test."):
			m.Answer = append(m.Answer, rr(t, q.Name+" 300 IN MX 10 mx.h.test."))
		case q.Qtype == dns.TypeA && q.Name == "mx.h.test.":
			m.Answer = append(m.Answer, rr(t, "mx.h.test. 300 IN A 127.0.0.1"))
		}
		return true
	})
	return f.addr
}

// dialogue answers a session's command lines after the banner with
// reply(cmd), flushing when the client has sent nothing more (a pipelined
// group is answered at once); "" from reply closes the connection without
// an answer. QUIT is answered (reply's own text) and ends the session.
func dialogue(c net.Conn, w *bufio.Writer, reply func(cmd string) string) {
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		cmd := strings.TrimSpace(line)
		rep := reply(cmd)
		if rep == "" {
			return
		}
		w.WriteString(rep + "\r\n")
		if r.Buffered() == 0 {
			w.Flush()
		}
		if strings.EqualFold(cmd, "QUIT") {
			w.Flush()
			return
		}
	}
}

// postfixDialogue answers a session's commands after the banner as
// Postfix does for mx.h.test: local parts starting with "no" and the
// catch-all probe are unknown users, the rest exist. limit, when not nil,
// is asked first at every RCPT: a reply it returns ("" for none) answers
// the RCPT instead (the server's limits).
func postfixDialogue(c net.Conn, w *bufio.Writer, limit func() string) {
	dialogue(c, w, func(cmd string) string {
		u := strings.ToUpper(cmd)
		switch {
		case strings.HasPrefix(u, "EHLO"):
			return "250-mx.h.test\r\n250 PIPELINING"
		case strings.HasPrefix(u, "MAIL"), strings.HasPrefix(u, "RSET"):
			return "250 2.1.0 Ok"
		case strings.HasPrefix(u, "RCPT"):
			if limit != nil {
				if rep := limit(); rep != "" {
					return rep
				}
			}
			if strings.Contains(u, "<NO") || strings.Contains(u, "<BULKD-PROBE-") {
				return "550 5.1.1 " + cmd[8:] + ": Recipient address rejected: User unknown in local recipient table"
			}
			return "250 2.1.5 Ok"
		case u == "QUIT":
			return "221 2.0.0 Bye"
		}
		return "502 5.5.2 Error: command not recognized"
	})
}

// scriptedSMTP is a one-host SMTP server whose replies a test scripts:
// banner is sent first, then reply(cmd) answers each command line ("" to
// close the connection without answering).
type scriptedSMTP struct {
	port     int
	sessions atomic.Int64
}

func startScriptedSMTP(t *testing.T, banner string, reply func(cmd string) string) *scriptedSMTP {
	t.Helper()
	s := &scriptedSMTP{}
	s.port = listenSMTP(t, func(c net.Conn) {
		s.sessions.Add(1)
		defer c.Close()
		sessionDeadline(c, 10*time.Second)
		w := bufio.NewWriter(c)
		w.WriteString(banner + "\r\n")
		w.Flush()
		if !strings.HasPrefix(banner, "220") {
			return
		}
		dialogue(c, w, func(cmd string) string {
			if strings.EqualFold(cmd, "QUIT") {
				return "221 bye"
			}
			return reply(cmd)
		})
	})
	return s
}

// sessionDeadline bounds every test session.
func sessionDeadline(c net.Conn, d time.Duration) { _ = c.SetDeadline(time.Now().Add(d)) }
