package spamc_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/spamc"
	"github.com/bulkd/bulkd/internal/testspamd"
)

// A REPORT answer exactly as spamd 4.0.1 sent it for testdata/spam.eml.
func TestReadReportAnswer(t *testing.T) {
	raw, err := os.ReadFile("testdata/report-spam.txt")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := spamc.ReadResponse(bufio.NewReader(bytes.NewReader(raw)))
	if err != nil {
		t.Fatal(err)
	}
	res, err := resp.Result()
	if err != nil {
		t.Fatal(err)
	}
	if !res.Spam || res.Score != 11.2 || res.Threshold != 5 {
		t.Fatalf("verdict %v %v / %v", res.Spam, res.Score, res.Threshold)
	}
	want := map[string]spamc.Rule{
		"DEAR_FRIEND":             {Name: "DEAR_FRIEND", Score: 2.7, Description: "BODY: Dear Friend? That's not very dear!"},
		"NO_RECEIVED":             {Name: "NO_RECEIVED", Score: 0, Description: "Informational: message has no Received headers"},
		"ADVANCE_FEE_4_NEW_MONEY": {Name: "ADVANCE_FEE_4_NEW_MONEY", Score: 1, Description: "Advance Fee fraud and lots of money"},
		"US_DOLLARS_3":            {Name: "US_DOLLARS_3", Score: 1, Description: "BODY: Mentions millions of $ ($NN,NNN,NNN.NN)"},
	}
	if len(res.Rules) != 13 {
		t.Fatalf("%d rules: %+v", len(res.Rules), res.Rules)
	}
	sum := 0.0
	for _, r := range res.Rules {
		sum += r.Score
		if w, ok := want[r.Name]; ok && w != r {
			t.Errorf("rule %+v, want %+v", r, w)
		}
		delete(want, r.Name)
	}
	if len(want) > 0 {
		t.Errorf("missing rules %v", want)
	}
	// The table's scores are rounded to 0.1; they add up to the total.
	if sum < 11.1 || sum > 11.3 {
		t.Errorf("rule scores add up to %v, total 11.2", sum)
	}
}

// Wrapped descriptions (network rules' long ones) and rule details.
func TestParseReportContinuations(t *testing.T) {
	report := `Content analysis details:   (3.5 points, 5.0 required)

 pts rule name              description
---- ---------------------- --------------------------------------------------
 0.0 RCVD_IN_ZEN_BLOCKED_OPENDNS RBL: ADMINISTRATOR NOTICE: The query to
                            zen.spamhaus.org was blocked due to usage of an
                            open resolver.
                            [URIs: example.com]
 2.5 URIBL_BLACK            Contains an URL listed in the URIBL blacklist
                            [URIs: bad.example]
-1.0 ALL_TRUSTED            Passed through trusted hosts only via SMTP
 2.0 LONG_RULE_NAME_THAT_GOES_ON
                            Described on the next line

trailing text 5.0 NOT_A_RULE after the table
`
	got := spamc.ParseReport(report)
	want := []spamc.Rule{
		{"RCVD_IN_ZEN_BLOCKED_OPENDNS", 0, "RBL: ADMINISTRATOR NOTICE: The query to zen.spamhaus.org was blocked due to usage of an open resolver."},
		{"URIBL_BLACK", 2.5, "Contains an URL listed in the URIBL blacklist"},
		{"ALL_TRUSTED", -1, "Passed through trusted hosts only via SMTP"},
		{"LONG_RULE_NAME_THAT_GOES_ON", 2, "Described on the next line"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("rule %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if r := spamc.ParseReport("a report template without a table"); len(r) != 0 {
		t.Fatalf("rules from no table: %+v", r)
	}
}

func TestParseSpamHeader(t *testing.T) {
	for _, c := range []struct {
		in         string
		spam       bool
		score, thr float64
		wantErr    bool
	}{
		{"True ; 15.3 / 5.0", true, 15.3, 5, false},
		{"False ; -0.0 / 5.0", false, 0, 5, false},
		{"Yes ; 6 / 5", true, 6, 5, false},
		{"no;1.5/7.5", false, 1.5, 7.5, false},
		{"Maybe ; 1 / 5", false, 0, 0, true},
		{"True ; NaN / 5.0", false, 0, 0, true},
		{"True ; 1e309 / 5.0", false, 0, 0, true},
		{"True 1 / 5", false, 0, 0, true},
		{"True ; 1 5", false, 0, 0, true},
	} {
		spam, score, thr, err := spamc.ParseSpamHeader(c.in)
		if (err != nil) != c.wantErr || spam != c.spam || score != c.score || thr != c.thr {
			t.Errorf("%q: %v %v %v %v", c.in, spam, score, thr, err)
		}
	}
}

func TestReadResponseErrors(t *testing.T) {
	for _, c := range []struct{ name, in, wantErr string }{
		{"empty", "", "status line"},
		{"not spamd", "HTTP/1.1 200 OK\r\n\r\n", "not SPAMD/"},
		{"bad code", "SPAMD/1.1 x EX_OK\r\n", "malformed"},
		{"header without colon", "SPAMD/1.1 0 EX_OK\r\nbroken\r\n\r\n", "no colon"},
		{"short body", "SPAMD/1.1 0 EX_OK\r\nContent-length: 10\r\n\r\nabc", "body"},
		{"huge body", "SPAMD/1.1 0 EX_OK\r\nContent-length: 99999999\r\n\r\n", "limit"},
		{"negative length", "SPAMD/1.1 0 EX_OK\r\nContent-length: -1\r\n\r\n", "malformed"},
		{"long line", "SPAMD/1.1 0 " + strings.Repeat("x", 10_000) + "\r\n", "line over"},
		{"cut headers", "SPAMD/1.1 0 EX_OK\r\nSpam: True ; 1 / 5\r\n", "headers"},
	} {
		_, err := spamc.ReadResponse(bufio.NewReader(strings.NewReader(c.in)))
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: err %v, want %q", c.name, err, c.wantErr)
		}
	}
	// A protocol error is a response, not a read error.
	r, err := spamc.ReadResponse(bufio.NewReader(strings.NewReader("SPAMD/1.0 76 Bad header line: BOGUS SPAMC/1.5\r\n")))
	if err != nil || r.Code != 76 || r.Message != "Bad header line: BOGUS SPAMC/1.5" {
		t.Fatalf("%+v %v", r, err)
	}
	r, err = spamc.ReadResponse(bufio.NewReader(strings.NewReader("SPAMD/1.5 0 PONG\r\n")))
	if err != nil || r.Message != "PONG" {
		t.Fatalf("%+v %v", r, err)
	}
}

// fakeSpamd answers every connection with answer after reading the
// request (or, with answer "", closes at once): the broken servers a real
// spamd cannot be made to be.
func fakeSpamd(t *testing.T, answer string) string {
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
			go func() {
				defer c.Close()
				if answer == "" {
					return
				}
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil || line == "\r\n" {
						break
					}
				}
				_, _ = c.Write([]byte(answer))
			}()
		}
	}()
	return l.Addr().String()
}

// Nonsense answers count as unavailability and open the breaker; after
// the cooldown one trial goes through, and a good answer closes it again.
func TestBreaker(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	bad := fakeSpamd(t, "garbage\r\n")
	c := &spamc.Client{Addr: bad, Timeout: 2 * time.Second, FailureThreshold: 3, Cooldown: 5 * time.Second, Now: clock}
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := c.Report(ctx, []byte("Subject: x\r\n\r\nhi\r\n")); !errors.Is(err, spamc.ErrUnavailable) {
			t.Fatalf("check %d: %v", i, err)
		}
	}
	if c.Available() {
		t.Fatal("breaker still closed after 3 failures")
	}
	_, err := c.Report(ctx, []byte("x"))
	if !errors.Is(err, spamc.ErrUnavailable) || !strings.Contains(err.Error(), "in a row") {
		t.Fatalf("open breaker: %v", err)
	}
	// After the cooldown the trial fails too: open again for a cooldown.
	advance(6 * time.Second)
	if !c.Available() {
		t.Fatal("breaker not half-open after the cooldown")
	}
	if _, err := c.Report(ctx, []byte("x")); err == nil || strings.Contains(err.Error(), "in a row") {
		t.Fatalf("trial was not tried: %v", err)
	}
	if c.Available() {
		t.Fatal("failed trial did not reopen the breaker")
	}
	// spamd is back (same client, a good server): the trial closes it.
	good := fakeSpamd(t, "SPAMD/1.1 0 EX_OK\r\nContent-length: 0\r\nSpam: False ; 0.5 / 5.0\r\n\r\n")
	c.Addr = good
	advance(6 * time.Second)
	res, err := c.Report(ctx, []byte("x"))
	if err != nil || res.Score != 0.5 {
		t.Fatalf("trial against a good spamd: %+v %v", res, err)
	}
	if !c.Available() {
		t.Fatal("breaker open after a good answer")
	}
	// Error codes are unavailability too.
	c.Addr = fakeSpamd(t, "SPAMD/1.0 76 Bad header line\r\n")
	if _, err := c.Report(ctx, []byte("x")); !errors.Is(err, spamc.ErrUnavailable) || !strings.Contains(err.Error(), "76") {
		t.Fatalf("code 76: %v", err)
	}
	c.Addr = fakeSpamd(t, "")
	if _, err := c.Report(ctx, []byte("x")); !errors.Is(err, spamc.ErrUnavailable) {
		t.Fatalf("closed connection: %v", err)
	}
}

// A caller that gives up does not count against spamd.
func TestCallerCancelDoesNotOpenBreaker(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close() // accepts into the backlog, never answers
	c := &spamc.Client{Addr: l.Addr().String(), Timeout: 10 * time.Second, FailureThreshold: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	ctx, cancel2 := context.WithCancel(ctx)
	go func() { time.Sleep(20 * time.Millisecond); cancel2() }()
	if _, err := c.Report(ctx, []byte("x")); err == nil {
		t.Fatal("no error")
	}
	if !c.Available() {
		t.Fatal("a cancelled caller opened the breaker")
	}
}

// Against a real spamd: a spam and a ham message, then the ways spamd
// becomes unavailable (frozen: too slow; stopped: refusing) and comes back.
func TestAgainstSpamd(t *testing.T) {
	sd := testspamd.Start(t, 2)
	spam, _ := os.ReadFile("testdata/spam.eml")
	ham, _ := os.ReadFile("testdata/ham.eml")
	ctx := context.Background()
	c := &spamc.Client{Addr: sd.Addr, Timeout: 2 * time.Second, MaxConns: 2, MaxQueue: 1, Cooldown: 300 * time.Millisecond}

	t.Run("report", func(t *testing.T) {
		if err := c.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := c.Report(ctx, spam)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Spam || res.Score < res.Threshold || res.Threshold != 5 {
			t.Fatalf("spam: %v %v/%v", res.Spam, res.Score, res.Threshold)
		}
		names := map[string]bool{}
		for _, r := range res.Rules {
			names[r.Name] = true
			if r.Description == "" {
				t.Errorf("rule %s without description", r.Name)
			}
		}
		for _, n := range []string{"DEAR_FRIEND", "DRUGS_ERECTILE", "LOTS_OF_MONEY"} {
			if !names[n] {
				t.Errorf("rule %s did not fire: %+v", n, res.Rules)
			}
		}
		res, err = c.Report(ctx, ham)
		if err != nil {
			t.Fatal(err)
		}
		if res.Spam || res.Score > 1 {
			t.Fatalf("ham: %v %v %+v", res.Spam, res.Score, res.Rules)
		}
	})

	t.Run("frozen spamd is too slow: bounded wait, busy beyond the queue, recovers", func(t *testing.T) {
		if err := sd.Freeze(); err != nil {
			t.Fatal(err)
		}
		thawed := false
		defer func() {
			if !thawed {
				_ = sd.Thaw()
			}
		}()
		// 2 connections + 1 waiting fit; the 4th and 5th are refused at once.
		var wg sync.WaitGroup
		errs := make([]error, 5)
		took := make([]time.Duration, 5)
		for i := range errs {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				time.Sleep(time.Duration(i) * 30 * time.Millisecond) // in order
				t0 := time.Now()
				_, errs[i] = c.Report(ctx, ham)
				took[i] = time.Since(t0)
			}(i)
		}
		wg.Wait()
		for i, err := range errs {
			if !errors.Is(err, spamc.ErrUnavailable) {
				t.Fatalf("check %d: %v", i, err)
			}
			if took[i] > 3*time.Second {
				t.Fatalf("check %d took %v with a 2 s timeout", i, took[i])
			}
		}
		busy := 0
		for i, err := range errs {
			if strings.Contains(err.Error(), "busy") {
				busy++
				if took[i] > 100*time.Millisecond {
					t.Errorf("busy answer took %v", took[i])
				}
			}
		}
		if busy != 2 {
			t.Fatalf("%d busy answers, want 2: %v", busy, errs)
		}
		// Three timeouts in a row opened the breaker: the next is instant.
		t0 := time.Now()
		if _, err := c.Report(ctx, ham); !errors.Is(err, spamc.ErrUnavailable) || time.Since(t0) > 50*time.Millisecond {
			t.Fatalf("open breaker: %v after %v", err, time.Since(t0))
		}
		if err := sd.Thaw(); err != nil {
			t.Fatal(err)
		}
		thawed = true
		waitRecovered(t, c, ham)
	})

	t.Run("stopped spamd refuses fast, restarted spamd is used again", func(t *testing.T) {
		sd.Stop()
		for i := 0; i < 3; i++ {
			t0 := time.Now()
			_, err := c.Report(ctx, ham)
			if !errors.Is(err, spamc.ErrUnavailable) || time.Since(t0) > time.Second {
				t.Fatalf("check %d against a stopped spamd: %v after %v", i, err, time.Since(t0))
			}
		}
		if c.Available() {
			t.Fatal("breaker closed after 3 refused connections")
		}
		if err := sd.Restart(); err != nil {
			t.Fatal(err)
		}
		waitRecovered(t, c, ham)
	})
}

// waitRecovered: checks succeed again within the cooldown plus a few
// seconds (spamd's children finish what queued while they were away).
func waitRecovered(t *testing.T, c *spamc.Client, msg []byte) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		if _, err = c.Report(context.Background(), msg); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no recovery within 15 s: %v", err)
}

func FuzzReadResponse(f *testing.F) {
	raw, _ := os.ReadFile("testdata/report-spam.txt")
	for _, s := range []string{string(raw), "SPAMD/1.5 0 PONG\r\n", "SPAMD/1.0 76 Bad\r\n", "SPAMD/1.1 0 EX_OK\r\nContent-length: 3\r\nSpam: True ; 1 / 5\r\n\r\nabc",
		"SPAMD/1.1 0 EX_OK\r\nSpam: x\r\n\r\nbody", "SPAMD/ 0\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := spamc.ReadResponse(bufio.NewReader(bytes.NewReader(b)))
		if err != nil {
			return
		}
		if len(r.Body) > spamc.MaxReportBytes {
			t.Fatalf("body of %d bytes", len(r.Body))
		}
		res, err := r.Result()
		if err != nil {
			return
		}
		for _, rule := range res.Rules {
			if rule.Name == "" || strings.ContainsAny(rule.Name, " \t\r\n") {
				t.Fatalf("rule name %q", rule.Name)
			}
		}
	})
}

func FuzzParseReport(f *testing.F) {
	raw, _ := os.ReadFile("testdata/report-spam.txt")
	f.Add(string(raw))
	f.Add("---- ---\n 1.0 A b\n                            c\n-0.0 B\n")
	f.Fuzz(func(t *testing.T, s string) {
		for _, r := range spamc.ParseReport(s) {
			if r.Name == "" || r.Score != r.Score {
				t.Fatalf("rule %+v", r)
			}
		}
	})
}
