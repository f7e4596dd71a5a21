package verify

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func hostileVerifier(t *testing.T, port int, lim HostLimiter) *Verifier {
	t.Helper()
	v, err := New(Config{DNSServer: hTestDNS(t), SMTPPort: port, CommandTimeout: time.Second, RateLimitBackoff: 5 * time.Second,
		Policy: loopbackAllowed}, nil, lim)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func ehloOK(cmd string) string {
	u := strings.ToUpper(cmd)
	switch {
	case strings.HasPrefix(u, "EHLO"):
		return "250-mx.h.test\r\n250 PIPELINING"
	case strings.HasPrefix(u, "MAIL"), strings.HasPrefix(u, "RSET"):
		return "250 ok"
	}
	return ""
}

func TestHostile421Banner(t *testing.T) {
	// A 421 without throttling words: the 30 s back-off (a throttling 421 is
	// in throttle_test.go).
	srv := startScriptedSMTP(t, "421 4.3.2 Service shutting down", nil)
	lim := NewLocalLimiter(LimiterOptions{})
	v := hostileVerifier(t, srv.port, lim)
	r := v.VerifyOne(context.Background(), "a@h.test")
	if r.Reason != ReasonRateLimited || !r.Temporary || r.RetryAfter != 5*time.Second || r.Status != StatusUnknown {
		t.Fatalf("%+v", r)
	}
	// Politeness is keyed by the server's address, not the MX name.
	if rel, left, _ := lim.AcquireOrBackoff(context.Background(), limitKey("", "ip:127.0.0.1")); rel != nil || left <= 0 {
		t.Fatal("server not backed off in the limiter")
	}
	// While backed off, no new session is opened at all.
	before := srv.sessions.Load()
	if r := v.VerifyOne(context.Background(), "b@h.test"); r.Reason != ReasonRateLimited {
		t.Fatalf("%+v", r)
	}
	if srv.sessions.Load() != before {
		t.Fatal("connected to a backed-off host")
	}
}

func TestHostileHELOFallbackNoPipelining(t *testing.T) {
	var sawHelo atomic.Bool
	srv := startScriptedSMTP(t, "220 old.h.test", func(cmd string) string {
		u := strings.ToUpper(cmd)
		switch {
		case strings.HasPrefix(u, "EHLO"):
			return "502 5.5.2 what?"
		case strings.HasPrefix(u, "HELO"):
			sawHelo.Store(true)
			return "250 old.h.test"
		case strings.HasPrefix(u, "MAIL"), strings.HasPrefix(u, "RSET"):
			return "250 ok"
		case strings.Contains(u, "<ALICE@"):
			return "250 ok"
		case strings.HasPrefix(u, "RCPT"):
			return "550 no such user here"
		}
		return "500 ?"
	})
	v := hostileVerifier(t, srv.port, nil)
	res := v.Verify(context.Background(), []string{"alice@h.test", "bob@h.test", "alice@x.h.test"})
	if !sawHelo.Load() || res[0].Reason != ReasonAccepted || res[1].Reason != ReasonMailboxNotFound || res[2].Reason != ReasonAccepted {
		t.Fatalf("%v %+v", sawHelo.Load(), res)
	}
	if n := srv.sessions.Load(); n != 1 {
		t.Fatalf("%d sessions, want 1", n)
	}
}

func TestHostileMailFromRefused(t *testing.T) {
	srv := startScriptedSMTP(t, "220 h", func(cmd string) string {
		if strings.HasPrefix(strings.ToUpper(cmd), "MAIL") {
			return "553 5.7.1 sender rejected"
		}
		if strings.HasPrefix(strings.ToUpper(cmd), "RCPT") {
			return "503 5.5.1 need MAIL"
		}
		return ehloOK(cmd)
	})
	v := hostileVerifier(t, srv.port, nil)
	for _, r := range v.Verify(context.Background(), []string{"a@h.test", "b@h.test"}) {
		if r.Reason != ReasonSMTPError || r.SMTPCode != 553 || r.Status != StatusUnknown {
			t.Fatalf("%+v", r)
		}
	}
}

func TestHostileAlways452(t *testing.T) {
	srv := startScriptedSMTP(t, "220 h", func(cmd string) string {
		if strings.HasPrefix(strings.ToUpper(cmd), "RCPT") {
			return "452 4.5.3 Too many recipients"
		}
		return ehloOK(cmd)
	})
	v := hostileVerifier(t, srv.port, nil)
	for _, r := range v.Verify(context.Background(), []string{"a@h.test", "b@h.test"}) {
		if r.Reason != ReasonTemporaryFailure || !r.Temporary {
			t.Fatalf("%+v", r)
		}
	}
	if n := srv.sessions.Load(); n > 3 {
		t.Fatalf("%d sessions for a host that never answers a RCPT", n)
	}
}

func TestHostileGarbage(t *testing.T) {
	srv := startScriptedSMTP(t, "220 h", func(cmd string) string {
		if strings.HasPrefix(strings.ToUpper(cmd), "RCPT") {
			return "hello there"
		}
		return ehloOK(cmd)
	})
	v := hostileVerifier(t, srv.port, nil)
	if r := v.VerifyOne(context.Background(), "a@h.test"); r.Reason != ReasonSMTPError || r.Temporary {
		t.Fatalf("%+v", r)
	}
	if n := srv.sessions.Load(); n != 2 {
		t.Fatalf("%d sessions, want 2 (one retry)", n)
	}
}

func TestHostileProbeGreylisted(t *testing.T) {
	srv := startScriptedSMTP(t, "220 h", func(cmd string) string {
		u := strings.ToUpper(cmd)
		switch {
		case strings.Contains(u, "BULKD-PROBE-"):
			return "451 4.7.1 greylisted, try again in 120 seconds"
		case strings.HasPrefix(u, "RCPT") && strings.Contains(u, "<GONE@"):
			return "550 5.1.1 unknown"
		case strings.HasPrefix(u, "RCPT"):
			return "250 ok"
		}
		return ehloOK(cmd)
	})
	v := hostileVerifier(t, srv.port, nil)
	res := v.Verify(context.Background(), []string{"a@h.test", "gone@h.test"})
	if r := res[0]; r.Reason != ReasonGreylisted || r.Status != StatusUnknown || r.RetryAfter != 2*time.Minute {
		t.Fatalf("accepted behind a greylisted probe: %+v", r)
	}
	if r := res[1]; r.Reason != ReasonMailboxNotFound {
		t.Fatalf("%+v", r)
	}
}
