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
