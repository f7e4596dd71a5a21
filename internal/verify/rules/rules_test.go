package rules

import (
	"strings"
	"testing"
	"time"
)

func TestParseLine(t *testing.T) {
	r, err := ParseLine("  PPHOSTED.com. provider=Proofpoint sessions=2 provider_sessions=10 rcpts=20 timeout=30s probe=no")
	if err != nil {
		t.Fatal(err)
	}
	want := Rule{Suffix: "pphosted.com", Provider: "proofpoint", Sessions: 2, ProviderSessions: 10, Rcpts: 20, Timeout: 30 * time.Second, NoProbe: true}
	if r != want {
		t.Fatalf("%+v", r)
	}
	if back, err := ParseLine(r.String()); err != nil || back != r {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	for _, bad := range []string{
		"", "bad..suffix", "-x.com", "x.com sessions", "x.com sessions=0", "x.com sessions=101",
		"x.com rcpts=1", "x.com timeout=10ms", "x.com timeout=1h", "x.com probe=maybe", "x.com colour=red",
		"x.com provider_sessions=3", "x.com sessions=2 sessions=3", "x.com provider=a/b",
	} {
		if _, err := ParseLine(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParseFile(t *testing.T) {
	rs, err := Parse(strings.NewReader("# comment\n\na.test sessions=1 # trailing\nb.test\n"))
	if err != nil || len(rs) != 2 || rs[0].Sessions != 1 || rs[1].Suffix != "b.test" {
		t.Fatalf("%+v %v", rs, err)
	}
	if _, err := Parse(strings.NewReader("a.test\nA.test.\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("duplicate: %v", err)
	}
}

func TestMatch(t *testing.T) {
	tbl := DefaultTable()
	for host, want := range map[string]string{
		"acme-com.mail.protection.outlook.com":   "protection.outlook.com",
		"hotmail-com.olc.protection.outlook.com": "olc.protection.outlook.com",
		"ASPMX.L.GOOGLE.COM.":                    "google.com",
		"gmail-smtp-in.l.google.com":             "gmail-smtp-in.l.google.com",
		"mta5.am0.yahoodns.net":                  "yahoodns.net",
		"mx0a-001.pphosted.com":                  "pphosted.com",
		"notgoogle.com":                          "",
		"mx.acme.test":                           "",
		"[127.0.0.1]":                            "",
	} {
		r, ok := tbl.Match(host)
		if ok != (want != "") || r.Suffix != want {
			t.Errorf("%s matched %q (%v), want %q", host, r.Suffix, ok, want)
		}
	}
	if r, _ := tbl.Match("gmail-smtp-in.l.google.com"); !r.NoProbe || r.Provider != "google" {
		t.Errorf("consumer gmail rule: %+v", r)
	}
	if r, _ := tbl.Match("alt1.aspmx.l.google.com"); r.NoProbe {
		t.Error("Google Workspace hosts must be probed (a domain may be catch-all)")
	}
	// An operator rule replaces the default of its suffix.
	op := NewTable(Default(), []Rule{{Suffix: "google.com", Provider: "google", Sessions: 1}})
	if r, _ := op.Match("aspmx.l.google.com"); r.Sessions != 1 || r.Rcpts != 0 {
		t.Errorf("override: %+v", r)
	}
	var nilTable *Table
	if _, ok := nilTable.Match("x.com"); ok {
		t.Error("nil table matched")
	}
}

func TestDefaultsValid(t *testing.T) {
	d := Default()
	if len(d) < 20 {
		t.Fatalf("%d default rules", len(d))
	}
	for _, r := range d {
		if r.Provider == "" {
			t.Errorf("%s: a default rule without a provider", r.Suffix)
		}
		if r.Sessions > 3 {
			t.Errorf("%s: a default above --smtp-sessions-per-host's default", r.Suffix)
		}
	}
}
