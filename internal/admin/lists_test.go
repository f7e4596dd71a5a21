package admin_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/admin"
	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/bulkd/bulkd/internal/verify"
)

func TestListsLoadShow(t *testing.T) {
	rdb, srv := testredis.Client(t)
	c := &cli{t: t, url: srv.URL, now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	file := filepath.Join(t.TempDir(), "burners.txt")
	if err := os.WriteFile(file, []byte("# mine\nburner.example\nTemp.Example\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := c.run("lists", "load", "--kind", "disposable", file); got != "2\n" {
		t.Fatalf("lists load printed %q", got)
	}
	var views []admin.ListView
	if err := json.Unmarshal([]byte(c.run("lists", "show")), &views); err != nil {
		t.Fatal(err)
	}
	if len(views) != 3 || views[0].Kind != "disposable" || views[0].Count != 2 || views[0].Source != "redis: burners.txt" ||
		views[0].Embedded < 100 || views[0].LoadedAt != "2026-05-01T12:00:00Z" || views[1].Source != "embedded" {
		t.Fatalf("lists show: %+v", views)
	}
	l, err := verify.LoadListsFromRedis(t.Context(), rdb)
	if err != nil {
		t.Fatal(err)
	}
	if !l.IsDisposable("temp.example") || l.IsDisposable("mailinator.com") || !l.IsRole("info") {
		t.Fatal("LoadListsFromRedis did not overlay the loaded list")
	}
	if _, err := c.try("lists", "load", "--kind", "nope", file); err == nil {
		t.Fatal("bad kind accepted")
	}
	bad := filepath.Join(t.TempDir(), "bad.txt")
	_ = os.WriteFile(bad, []byte("ok.example\nnot a domain\n"), 0o644)
	if _, err := c.try("lists", "load", "--kind", "free", bad); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("bad file: %v", err)
	}
}

// TestListsSyncClear: `lists sync` stores a list in either mode and says
// what changed; every process's loader sees it; `lists clear` restores the
// built-in list.
func TestListsSyncClear(t *testing.T) {
	rdb, srv := testredis.Client(t)
	c := &cli{t: t, url: srv.URL, now: time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)}
	file := filepath.Join(t.TempDir(), "extra-free.txt")
	if err := os.WriteFile(file, []byte("# ours\nmail.example\nposte.example\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var res struct {
		Kind      string `json:"kind"`
		Mode      string `json:"mode"`
		Entries   int    `json:"entries"`
		Added     int    `json:"added"`
		Effective int    `json:"effective"`
		Version   int64  `json:"version"`
	}
	if err := json.Unmarshal([]byte(c.run("lists", "sync", "--list", "free", "--mode", "add", file)), &res); err != nil {
		t.Fatal(err)
	}
	if res.Kind != "free" || res.Mode != "add" || res.Entries != 2 || res.Added != 2 || res.Effective < 1000 || res.Version != 1 {
		t.Fatalf("sync printed %+v", res)
	}
	l, err := verify.LoadListsFromRedis(t.Context(), rdb)
	if err != nil {
		t.Fatal(err)
	}
	if !l.IsFree("mail.example") || !l.IsFree("gmail.com") {
		t.Fatal("an added list must keep the built-in entries")
	}
	var views []admin.ListView
	if err := json.Unmarshal([]byte(c.run("lists", "show")), &views); err != nil {
		t.Fatal(err)
	}
	if views[2].Kind != "free" || views[2].Mode != "add" || views[2].Count != res.Effective || views[2].Version != 1 ||
		views[2].Source != "redis: extra-free.txt + embedded" {
		t.Fatalf("lists show: %+v", views[2])
	}
	if _, err := c.try("lists", "sync", "--list", "free", "--mode", "merge", file); err == nil {
		t.Fatal("unknown mode accepted")
	}
	if _, err := c.try("lists", "sync", "--list", "nope", file); err == nil {
		t.Fatal("unknown list accepted")
	}
	if got := c.run("lists", "clear", "--list", "free"); got != `{"kind":"free","version":2}`+"\n" {
		t.Fatalf("clear printed %q", got)
	}
	if l, err = verify.LoadListsFromRedis(t.Context(), rdb); err != nil || l.IsFree("mail.example") {
		t.Fatalf("clear kept the list (%v)", err)
	}
}
