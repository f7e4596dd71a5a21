package mailworld

import (
	"bufio"
	"testing"
	"time"
)

// A Postfix-like slow server takes its time over each RCPT and answers a
// pipelined group only once it has processed all of it: the first reply of
// a group of three comes after three delays, and the others with it.
func TestSlowRcptsHoldsAGroupsReplies(t *testing.T) {
	const per = 150 * time.Millisecond
	spec, err := Apply(Classes(testOpts), "mx.ok.test", SlowRcpts(per))
	if err != nil {
		t.Fatal(err)
	}
	w := start(t, spec)
	s := dial(t, w, "mx.ok.test")
	s.hello()
	t0 := time.Now()
	if _, err := s.c.Write([]byte("MAIL FROM:<>\r\nRCPT TO:<alice@ok.test>\r\nRCPT TO:<nobody@ok.test>\r\nRCPT TO:<bob@ok.test>\r\n")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(s.c)
	first, err := br.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < 3*per {
		t.Errorf("first reply %q after %v, want after the whole group (>= %v)", first, d, 3*per)
	}
	if first != "250 2.1.0 Ok\r\n" {
		t.Errorf("first reply %q, want MAIL's 250", first)
	}
	if n := br.Buffered(); n < len("250 2.1.5 Ok\r\n550 5.1.1 User unknown\r\n250 2.1.5 Ok\r\n") {
		t.Errorf("only %d bytes buffered with the first reply: the group's replies did not come together", n)
	}
	// The truth is unchanged.
	for _, want := range []string{"250 2.1.5", "550 5.1.1", "250 2.1.5"} {
		line, err := br.ReadString('\n')
		if err != nil || len(line) < len(want) || line[:len(want)] != want {
			t.Errorf("reply %q (%v), want %s", line, err, want)
		}
	}
}

func TestApplyNamesAHost(t *testing.T) {
	spec := Classes(testOpts)
	if _, err := Apply(spec, "mx.nowhere.test", SlowRcpts(time.Second)); err == nil {
		t.Error("Apply to a host the spec does not have: no error")
	}
	got, err := Apply(spec, "mx.ok.test", SlowRcpts(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range spec.Hosts {
		if h.RcptDelay != 0 {
			t.Errorf("the caller's host %s changed", h.Name)
		}
		if canon(h.Name) == "mx.ok.test" && got.Hosts[i].RcptDelay != time.Second {
			t.Errorf("the applied host's RcptDelay = %v", got.Hosts[i].RcptDelay)
		}
	}
}

func TestOwnHost(t *testing.T) {
	spec := Bench(BenchOptions{Domains: 20, PerDomain: 5, Seed: 1})
	dom, host, ok := OwnHost(spec)
	if !ok || host != "mx."+dom {
		t.Fatalf("OwnHost = %q, %q, %v; want a domain on its own mx.<domain>", dom, host, ok)
	}
}
