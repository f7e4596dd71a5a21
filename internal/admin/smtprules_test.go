package admin_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/bulkd/bulkd/internal/verify/rules"
)

func TestSMTPRules(t *testing.T) {
	rdb, srv := testredis.Client(t)
	c := &cli{t: t, url: srv.URL, now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	list := func() map[string]rules.Entry {
		var es []rules.Entry
		if err := json.Unmarshal([]byte(c.run("smtp-rules", "list")), &es); err != nil {
			t.Fatal(err)
		}
		m := map[string]rules.Entry{}
		for _, e := range es {
			m[e.Suffix] = e
		}
		return m
	}
	m := list()
	if e := m["protection.outlook.com"]; e.Provider != "microsoft" || e.Source != rules.SourceDefault || !e.Probe {
		t.Fatalf("default outlook rule: %+v", e)
	}
	if got := c.run("smtp-rules", "set", "protection.outlook.com", "provider=microsoft", "sessions=1", "timeout=20s"); got != "protection.outlook.com provider=microsoft sessions=1 timeout=20s\n" {
		t.Fatalf("set printed %q", got)
	}
	m = list()
	if e := m["protection.outlook.com"]; e.Sessions != 1 || e.Timeout != "20s" || e.Source != rules.SourceOperator || e.ProviderSessions != 0 {
		t.Fatalf("after set: %+v", e)
	}
	// Every process's table follows (Holder.Refresh is what Watch runs).
	h := rules.NewHolder(nil)
	if changed, err := h.Refresh(t.Context(), rdb); err != nil || !changed {
		t.Fatalf("Refresh: %v %v", changed, err)
	}
	if r, ok := h.Table().Match("acme-com.mail.protection.outlook.com"); !ok || r.Sessions != 1 {
		t.Fatalf("Match after set: %+v", r)
	}
	if changed, _ := h.Refresh(t.Context(), rdb); changed {
		t.Fatal("Refresh without a change reported one")
	}
	if _, err := c.try("smtp-rules", "set", "x.test", "sessions=0"); err == nil {
		t.Fatal("sessions=0 accepted")
	}
	if _, err := c.try("smtp-rules", "set", "x.test", "provider_sessions=3"); err == nil {
		t.Fatal("provider_sessions without provider accepted")
	}
	c.run("smtp-rules", "unset", "protection.outlook.com")
	if e := list()["protection.outlook.com"]; e.Source != rules.SourceDefault {
		t.Fatalf("after unset: %+v", e)
	}
	if _, err := c.try("smtp-rules", "unset", "protection.outlook.com"); err == nil {
		t.Fatal("unset of no rule succeeded")
	}
	file := filepath.Join(t.TempDir(), "rules.txt")
	_ = os.WriteFile(file, []byte("# ours\nmx.acme.test sessions=1 rcpts=10 probe=no\nmail.example provider=example provider_sessions=4\n"), 0o644)
	if got := c.run("smtp-rules", "load", file); got != "2\n" {
		t.Fatalf("load printed %q", got)
	}
	m = list()
	if e := m["mx.acme.test"]; e.Sessions != 1 || e.Rcpts != 10 || e.Probe {
		t.Fatalf("loaded: %+v", e)
	}
	bad := filepath.Join(t.TempDir(), "bad.txt")
	_ = os.WriteFile(bad, []byte("ok.test sessions=2\nok.test rcpts=5\n"), 0o644)
	if _, err := c.try("smtp-rules", "load", bad); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("bad file: %v", err)
	}
	if e := list()["mx.acme.test"]; e.Source != rules.SourceOperator {
		t.Fatal("a bad file replaced the rules")
	}
	// A process's holder picks a change up by itself while it is used.
	live := rules.NewRedisHolder(t.Context(), rdb, 20*time.Millisecond, nil)
	if _, ok := live.Table().Match("mx.acme.test"); !ok {
		t.Fatal("NewRedisHolder did not read the stored rules")
	}
	c.run("smtp-rules", "reset")
	if _, ok := list()["mx.acme.test"]; ok {
		t.Fatal("reset kept a rule")
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		if _, ok := live.Table().Match("mx.acme.test"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the holder never saw the reset")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
