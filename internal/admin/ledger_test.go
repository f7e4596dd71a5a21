package admin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/testredis"
)

// `ledger export --archive --before`: the entries before the date go to a
// new, fsynced file and leave Redis; the later ones stay; `ledger
// reconcile` still balances (archived totals + what is left).
func TestLedgerExportArchive(t *testing.T) {
	rdb, srv := testredis.Client(t)
	c := &cli{t: t, url: srv.URL, now: time.Now()}
	acct := strings.TrimSpace(c.run("account", "create", "--name", "Ledger", "--credits", "10"))
	for _, amt := range []string{"1", "2.5", "0.2"} {
		c.run("credits", "add", acct, amt)
	}
	time.Sleep(3 * time.Millisecond)
	cut := rdb.Time(context.Background()).Val()
	time.Sleep(3 * time.Millisecond)
	c.run("credits", "remove", acct, "4")
	c.run("credits", "add", acct, "0.3")
	c.now = time.Now()

	all := strings.Split(strings.TrimSpace(c.run("ledger", "export", acct)), "\n")
	if len(all) != 5 {
		t.Fatalf("export printed %d lines: %q", len(all), all)
	}
	before := cut.UTC().Format(time.RFC3339Nano)
	for _, bad := range [][]string{
		{"ledger", "export", acct, "--archive"},                           // no --before
		{"ledger", "export", acct, "--archive", "--before", before},       // stdout is not a file
		{"ledger", "export", acct, "--archive", "--before", "2999-01-01"}, // future
		{"ledger", "export", acct, "--archive", "--before", before, "--since", "0-1"},
	} {
		if out, err := c.try(bad...); err == nil {
			t.Errorf("%v accepted: %s", bad, out)
		}
	}
	if n := rdb.XLen(context.Background(), accounts.LedgerKey(acct)).Val(); n != 5 {
		t.Fatalf("a refused archive deleted entries: %d left", n)
	}

	file := filepath.Join(t.TempDir(), "ledger.jsonl")
	var sum struct {
		Entries  int64       `json:"entries"`
		Last     string      `json:"last_id"`
		Credits  json.Number `json:"credits"`
		Archived int64       `json:"archived"`
		Marker   struct {
			Through string `json:"through"`
			Entries int64  `json:"entries"`
		} `json:"archive_marker"`
	}
	out := c.run("ledger", "export", acct, "--archive", "--before", before, "--output", file)
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatalf("summary %q: %v", out, err)
	}
	if sum.Entries != 3 || sum.Archived != 3 || sum.Credits.String() != "3.7" || sum.Marker.Entries != 3 || sum.Marker.Through != sum.Last {
		t.Fatalf("summary %s", out)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		lines = append(lines, sc.Text())
	}
	if strings.Join(lines, "\n") != strings.Join(all[:3], "\n") {
		t.Fatalf("archive file:\n%s\nwant the first three of:\n%s", strings.Join(lines, "\n"), strings.Join(all, "\n"))
	}
	left := strings.Split(strings.TrimSpace(c.run("ledger", acct)), "\n")
	if strings.Join(left, "\n") != strings.Join(all[3:], "\n") {
		t.Fatalf("left in the ledger:\n%s", strings.Join(left, "\n"))
	}
	if _, err := c.try("ledger", "export", acct, "--output", file); err == nil {
		t.Fatal("an export overwrote an existing file")
	}

	var rec struct {
		Balance   json.Number `json:"balance"`
		LedgerSum string      `json:"ledger_sum"`
		OK        bool        `json:"ok"`
	}
	if err := json.Unmarshal([]byte(c.run("ledger", "reconcile", acct)), &rec); err != nil {
		t.Fatal(err)
	}
	if !rec.OK || rec.Balance.String() != "10" || rec.LedgerSum != "10" {
		t.Fatalf("reconcile %+v", rec)
	}
	// A balance changed behind the ledger's back fails the command.
	rdb2 := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb2.Close()
	rdb2.HIncrBy(context.Background(), accounts.AccountKey(acct), "balance", 1)
	if out, err := c.try("ledger", "reconcile", acct); err == nil || !strings.Contains(out, `"ok": false`) {
		t.Fatalf("reconcile after tampering: %v %s", err, out)
	}
}
