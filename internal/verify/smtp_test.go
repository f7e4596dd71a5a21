package verify

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		code int
		text string
		want rcptClass
	}{
		{250, "2.1.5 Ok", rcAccepted},
		{251, "User not local; will forward", rcAccepted},
		{550, "5.1.1 User unknown", rcNotFound},
		{550, "5.1.1 <x@y>: Recipient address rejected: User unknown in virtual mailbox table", rcNotFound},
		{553, "5.1.6 mailbox has moved", rcNotFound},
		{550, "5.2.1 Mailbox disabled", rcDisabled},
		{552, "5.2.2 Mailbox full", rcFull},
		{452, "4.2.2 Over quota", rcFull},
		{452, "4.5.3 Too many recipients", rcTooMany},
		{452, "Too many recipients", rcTooMany},
		{452, "", rcTooMany},
		{552, "5.5.3 Too many recipients", rcTooMany},
		{450, "4.7.1 Greylisted, try again later", rcGreylisted},
		{451, "4.7.1 Please try again later", rcGreylisted},
		{451, "4.3.0 Temporary lookup failure", rcTempFail},
		{450, "4.1.1 Recipient lookup failed, try later", rcGreylisted},
		{450, "Greylisted for 300 seconds", rcGreylisted},
		{451, "Local error in processing", rcTempFail},
		{421, "4.7.0 Too many concurrent connections", rcRateLimited},
		{550, "5.7.1 Relaying denied", rcRejected},
		{554, "5.7.1 Service unavailable; client host blocked", rcRejected},
		{550, "No such user here", rcNotFound},
		{550, "Requested action not taken: mailbox unavailable", rcNotFound},
		{550, "", rcNotFound},
		{550, "Administrative prohibition", rcRejected},
		{550, "Account disabled", rcDisabled},
		{552, "Requested mail action aborted: exceeded storage allocation", rcFull},
		{551, "User not local; please try <forward-path>", rcRejected},
		{550, "5.7.1 Recipient address rejected: user does not exist", rcNotFound},
		{550, "4.1.1 mismatched class", rcRejected}, // an enhanced code of another class is ignored
	}
	for _, c := range cases {
		r := reply{code: c.code, text: c.text, enh: parseEnhanced(c.code, c.text)}
		if got := classify(r); got != c.want {
			t.Errorf("classify(%d %s) = %d, want %d", c.code, c.text, got, c.want)
		}
	}
}

func TestRetryHint(t *testing.T) {
	for text, want := range map[string]time.Duration{
		"Greylisted, try again in 60 seconds": time.Minute,
		"greylisted for 5 minutes":            5 * time.Minute,
		"try again later":                     0,
		"4.7.1 300s":                          300 * time.Second,
	} {
		if got := retryHint(text); got != want {
			t.Errorf("retryHint(%q) = %v, want %v", text, got, want)
		}
	}
}

// TestReplyParsing feeds the reply reader multi-line, malformed and
// oversized replies.
func TestReplyParsing(t *testing.T) {
	read := func(raw string) (reply, error) {
		a, b := net.Pipe()
		defer a.Close()
		go func() { _, _ = b.Write([]byte(raw)); b.Close() }()
		return newSMTPConn(a, time.Second, time.Time{}).read()
	}
	r, err := read("250-mx.test Hello\r\n250-PIPELINING\r\n250 8BITMIME\r\n")
	if err != nil || r.code != 250 || !strings.Contains(r.text, "PIPELINING") {
		t.Fatalf("multi-line: %+v %v", r, err)
	}
	r, err = read("550 5.1.1 <a@b> User unknown\n")
	if err != nil || r.code != 550 || r.enh != [3]int{5, 1, 1} {
		t.Fatalf("bare LF: %+v %v", r, err)
	}
	for _, bad := range []string{"hello\r\n", "25\r\n", "250-a\r\n251 b\r\n", "2500 x\r\n", "999 x\r\n", "250x\r\n",
		"250 " + strings.Repeat("a", maxReplyLine) + "\r\n", strings.Repeat("250-x\r\n", maxReplyLines+1), "250 no end"} {
		if _, err := read(bad); !errors.Is(err, errDropped) {
			t.Errorf("read(%.30q): %v, want errDropped", bad, err)
		}
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	start := time.Now()
	if _, err := newSMTPConn(a, 100*time.Millisecond, time.Time{}).read(); !errors.Is(err, errTimeout) {
		t.Fatalf("silent server: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("timeout took %v", d)
	}
}
