package mtaworld

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startOrSkip starts a world in a test directory, or skips when the mail
// software cannot run here (not root, packages missing: hack/ensure-mta.sh).
func startOrSkip(t *testing.T, opts Options) *World {
	t.Helper()
	if err := Available(opts.Root); err != nil {
		if errors.Is(err, ErrNotRoot) || errors.Is(err, ErrNotInstalled) {
			t.Skipf("real-MTA world unavailable: %v", err)
		}
		t.Fatal(err)
	}
	w, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// session speaks SMTP without pipelining and returns each reply's first line.
func session(t *testing.T, addr string, rcpts ...string) []string {
	t.Helper()
	c, err := net.DialTimeout("tcp4", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(c)
	read := func() string {
		var first string
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return "EOF " + err.Error()
			}
			if first == "" {
				first = strings.TrimSpace(line)
			}
			if len(line) < 4 || line[3] != '-' {
				return first
			}
		}
	}
	out := []string{read()}
	for _, cmd := range append([]string{"EHLO probe.test", "MAIL FROM:<verify@bulkd.localhost>"}, prefix("RCPT TO:", rcpts)...) {
		_, _ = c.Write([]byte(cmd + "\r\n"))
		out = append(out, read())
	}
	_, _ = c.Write([]byte("QUIT\r\n"))
	read()
	return out
}

func prefix(p string, xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = p + "<" + x + ">"
	}
	return out
}

// Every server answers as its software does: a mailbox is accepted, an
// unknown user is refused at RCPT, the DNSBL server refuses our client,
// the catch-all accepts anything, the greylisting server defers first.
func TestServersAnswer(t *testing.T) {
	w := startOrSkip(t, Options{})
	t.Log("\n" + w.Summary())
	byServer := map[string][]Case{}
	for _, c := range w.Cases() {
		byServer[c.Server] = append(byServer[c.Server], c)
	}
	for _, s := range w.Servers() {
		var good, bad string
		for _, c := range byServer[s.Name] {
			if good == "" && c.Truth != Undeliverable {
				good = c.Email
			}
			if bad == "" && c.Truth == Undeliverable {
				bad = c.Email
			}
		}
		rcpts := []string{good}
		if bad != "" {
			rcpts = append(rcpts, bad)
		}
		replies := session(t, net.JoinHostPort(s.IP, strconv.Itoa(w.SMTPPort())), rcpts...)
		t.Logf("%s: %q", s.Name, replies)
		want := map[string]string{"postfix-dnsbl": "554", "postfix-greylist": "450"}[s.Name]
		if want == "" {
			want = "250"
		}
		if len(replies) < 4 || !strings.HasPrefix(replies[3], want) {
			t.Errorf("%s: RCPT %s: %q, want %s", s.Name, good, replies, want)
		}
		if bad != "" && s.Name != "postfix-greylist" && (len(replies) < 5 || !strings.HasPrefix(replies[4], "550")) {
			t.Errorf("%s: RCPT %s: %q, want 550", s.Name, bad, replies)
		}
	}
}

// The limits answer with the software's own texts: a second connection
// to a server limited to one is refused, recipients past a rate limit or
// a per-message limit are deferred. The texts are logged (they are the
// ones docs/mta-world.md quotes).
func TestLimitsAnswer(t *testing.T) {
	w := startOrSkip(t, Options{})
	addrOf := func(name string) string {
		return net.JoinHostPort(w.ServerOf(name).IP, strconv.Itoa(w.SMTPPort()))
	}
	many := func(domain string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = "user" + strconv.Itoa(100+i) + "@" + domain
		}
		return out
	}
	for _, tc := range []struct {
		server string
		rcpts  []string
		want   string // a reply that must appear
	}{
		// smtpd_recipient_limit counts accepted recipients only.
		{"postfix-plain", existing(w, "postfix-plain", 12), "452 4.5.3"},
		// Mailboxes, not unknown users: past smtpd_soft_error_limit each
		// refusal waits 1 s, and the RCPTs would spread over more than
		// the 10 s rate window.
		{"postfix-rcptrate", append(existing(w, "postfix-rcptrate", 18), many("rate2.test", 3)...), "450 4.7.1"},
		{"exim-ratelimit", many("exim1.test", 30), "451"},
		{"exim-conn", many("exim3.test", 12), "452"},
	} {
		replies := session(t, addrOf(tc.server), tc.rcpts...)
		found := ""
		for _, r := range replies {
			if strings.HasPrefix(r, tc.want) {
				found = r
				break
			}
		}
		t.Logf("%s: %q", tc.server, found)
		if found == "" {
			t.Errorf("%s: no %s reply in %q", tc.server, tc.want, replies)
		}
	}
	for _, name := range []string{"postfix-anvil", "exim-conn"} {
		first, err := net.DialTimeout("tcp4", addrOf(name), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = first.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := bufio.NewReader(first).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		second := session(t, addrOf(name))
		_ = first.Close()
		t.Logf("%s, second connection: %q", name, second[0])
		if !strings.HasPrefix(second[0], "421") {
			t.Errorf("%s: second connection greeted %q, want 421", name, second[0])
		}
	}
}

func existing(w *World, server string, n int) []string {
	var out []string
	for _, c := range w.Cases() {
		if c.Server == server && c.Truth == Deliverable && len(out) < n {
			out = append(out, c.Email)
		}
	}
	return out
}
