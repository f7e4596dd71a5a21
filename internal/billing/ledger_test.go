package billing_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/billing"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/testredis"
)

type ledgerEnv struct {
	t    *testing.T
	ctx  context.Context
	rdb  redis.UniversalClient
	b    *billing.Billing
	acct string
	n    int
}

func newLedgerEnv(t *testing.T, opening credits.Amount) *ledgerEnv {
	rdb := testredis.Universal(t) // a 3-master Cluster with BULKD_TEST_REDIS=cluster
	ctx := context.Background()
	a, err := accounts.NewStore(rdb, nil).CreateAccount(ctx, "ledger", opening)
	if err != nil {
		t.Fatal(err)
	}
	return &ledgerEnv{t: t, ctx: ctx, rdb: rdb, b: billing.New(rdb, nil), acct: a.ID}
}

// moves makes n money movements of every kind that writes the ledger: a
// charge, its refund, a second charge kept, a credit added by hand, and a
// quota consumption (another unit, not in the credit sum).
func (e *ledgerEnv) moves(n int) {
	e.t.Helper()
	for range n {
		e.n++
		id := fmt.Sprintf("job-%d", e.n)
		if _, err := e.b.Charge(e.ctx, billing.Charge{AccountID: e.acct, KeyID: "k", ChargeID: id, Amount: 1400}); err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.b.Reverse(e.ctx, e.acct, id, "failed"); err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.b.Charge(e.ctx, billing.Charge{AccountID: e.acct, KeyID: "k", ChargeID: id + "b", Amount: 200}); err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.b.Adjust(e.ctx, e.acct, 1000, "top-up"); err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.b.Consume(e.ctx, billing.Consumption{AccountID: e.acct, KeyID: "u", ChargeID: id + "q", N: 3, Limit: 1 << 40,
			Window: billing.DailyWindow(billing.BulkSearches, time.Now())}); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *ledgerEnv) reconcile() *billing.Reconciliation {
	e.t.Helper()
	r, err := e.b.Reconcile(e.ctx, e.acct)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// serverNow is the Redis server's clock: what stream ids are made of.
func (e *ledgerEnv) serverNow() time.Time {
	e.t.Helper()
	now, err := e.rdb.Time(e.ctx).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return now
}

func (e *ledgerEnv) export(opt billing.ExportOptions) ([]billing.Entry, *billing.Export) {
	e.t.Helper()
	var got []billing.Entry
	x, err := e.b.ExportLedger(e.ctx, e.acct, opt, func(en billing.Entry) error { got = append(got, en); return nil })
	if err != nil {
		e.t.Fatal(err)
	}
	if int64(len(got)) != x.Entries {
		e.t.Fatalf("export wrote %d entries, says %d", len(got), x.Entries)
	}
	return got, x
}

// The balance equals the opening balance plus the ledger; a balance
// changed without an entry, or an entry without its movement, is caught.
func TestReconcile(t *testing.T) {
	e := newLedgerEnv(t, credits.Whole(10))
	e.moves(3)
	r := e.reconcile()
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	// 3 x (-1.4 + 1.4 - 0.2 + 1) = 2.4
	if r.Opening != credits.Whole(10) || r.Ledger != 2400 || r.Balance != 12400 || r.Entries != 15 || r.OpeningInferred {
		t.Fatalf("%+v", r)
	}

	// A movement without an entry.
	if err := e.rdb.HIncrBy(e.ctx, accounts.AccountKey(e.acct), "balance", 500).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.reconcile().Err(); err == nil || !strings.Contains(err.Error(), "balance 12.9, ledger says 12.4") {
		t.Fatalf("balance changed behind the ledger's back: %v", err)
	}
	// The next movement's entry shows where the gap is.
	e.moves(1)
	r = e.reconcile()
	if len(r.Breaks) != 1 || r.Err() == nil {
		t.Fatalf("breaks %v, err %v", r.Breaks, r.Err())
	}

	if _, err := e.b.Reconcile(e.ctx, "acct_missing"); !errors.Is(err, billing.ErrAccountNotFound) {
		t.Fatalf("unknown account: %v", err)
	}
}

// An account made before opening_balance was recorded: the opening is
// inferred from the first entry (and said to be).
func TestReconcileLegacyAccount(t *testing.T) {
	e := newLedgerEnv(t, credits.Whole(7))
	if err := e.rdb.HDel(e.ctx, accounts.AccountKey(e.acct), "opening_balance").Err(); err != nil {
		t.Fatal(err)
	}
	r := e.reconcile()
	if r.Err() != nil || !r.OpeningInferred || r.Opening != credits.Whole(7) {
		t.Fatalf("no entries: %+v %v", r, r.Err())
	}
	e.moves(2)
	r = e.reconcile()
	if r.Err() != nil || !r.OpeningInferred || r.Opening != credits.Whole(7) || r.Ledger != 1600 {
		t.Fatalf("%+v %v", r, r.Err())
	}
}

// Export everything, then archive what came before a date: exactly those
// entries leave the stream, the ones after stay, and the balance still
// equals the ledger (archived totals + what remains).
func TestExportAndArchive(t *testing.T) {
	e := newLedgerEnv(t, credits.Whole(100))
	e.moves(5)
	time.Sleep(3 * time.Millisecond)
	cut := e.serverNow()
	time.Sleep(3 * time.Millisecond)
	e.moves(2)

	all, xall := e.export(billing.ExportOptions{})
	if len(all) != 35 || xall.First != all[0].ID || xall.Last != all[34].ID {
		t.Fatalf("export all: %d entries, %s..%s", len(all), xall.First, xall.Last)
	}
	if all[0].Kind != billing.KindCharge || all[0].Amount != "-1.4" || all[0].After != "98.6" || all[4].Unit != "bulk_searches" || all[4].Amount != "3" {
		t.Fatalf("entries %+v", all[:5])
	}
	before, x := e.export(billing.ExportOptions{Before: cut})
	if len(before) != 25 || x.Credits != 5*800 || x.Units["bulk_searches"] != 15 {
		t.Fatalf("before the cut: %d entries, credits %s, units %v", len(before), x.Credits, x.Units)
	}
	for i, en := range before {
		if en != all[i] {
			t.Fatalf("entry %d: %+v, export all had %+v", i, en, all[i])
		}
	}
	n, err := e.b.ArchiveLedger(e.ctx, x)
	if err != nil || n != 25 {
		t.Fatalf("archived %d: %v", n, err)
	}
	rest, _ := e.export(billing.ExportOptions{})
	if len(rest) != 10 || rest[0] != all[25] || rest[9] != all[34] {
		t.Fatalf("after the archive the stream holds %d entries", len(rest))
	}
	r := e.reconcile()
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if r.Archived.Through != all[24].ID || r.Archived.Entries != 25 || r.Archived.Credits != 4000 || r.Archived.Units["bulk_searches"] != 15 ||
		r.Ledger != 1600 || r.Entries != 10 || r.Balance != credits.Whole(100)+5600 {
		t.Fatalf("%+v", r)
	}

	// The same export again: the marker has moved, nothing is deleted twice.
	if _, err := e.b.ArchiveLedger(e.ctx, x); !errors.Is(err, billing.ErrArchiveConflict) {
		t.Fatalf("second archive of one export: %v", err)
	}
	// An export that skipped entries (--since past the marker) cannot be
	// archived either: the stream holds more than it exported.
	_, skip := e.export(billing.ExportOptions{Since: all[26].ID})
	if _, err := e.b.ArchiveLedger(e.ctx, skip); !errors.Is(err, billing.ErrArchiveConflict) {
		t.Fatalf("archive of an export with a gap: %v", err)
	}
	if r := e.reconcile(); r.Err() != nil || r.Entries != 10 {
		t.Fatalf("after refused archives: %+v %v", r, r.Err())
	}
	// Archiving the rest empties the stream; new entries still get ids
	// after the archived ones and the books still balance.
	_, x2 := e.export(billing.ExportOptions{})
	if n, err := e.b.ArchiveLedger(e.ctx, x2); err != nil || n != 10 {
		t.Fatalf("archive the rest: %d %v", n, err)
	}
	e.moves(1)
	r = e.reconcile()
	if r.Err() != nil || r.Entries != 5 || r.Archived.Entries != 35 || r.Archived.Credits != 5600 {
		t.Fatalf("%+v %v", r, r.Err())
	}
}

// An archive of thousands of entries (several batches) while charges keep
// arriving: every entry before the cut is deleted, every entry after it
// stays, and the balance equals the ledger at every step.
func TestArchiveWhileAppending(t *testing.T) {
	e := newLedgerEnv(t, credits.Whole(1_000_000))
	const old = 2500 // entries before the cut: three batches
	for i := range old {
		if _, err := e.b.Adjust(e.ctx, e.acct, credits.Amount(i%7-3), "old"); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(3 * time.Millisecond)
	cut := e.serverNow()
	time.Sleep(3 * time.Millisecond)

	var wg sync.WaitGroup
	stop := make(chan struct{})
	var appended int
	var reconciled int
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := e.b.Charge(e.ctx, billing.Charge{AccountID: e.acct, ChargeID: fmt.Sprint("c", i), Amount: 200}); err != nil {
				t.Error(err)
				return
			}
			appended++
			if i%50 == 0 { // reconcile while entries move to the archive
				r, err := e.b.Reconcile(e.ctx, e.acct)
				if err != nil {
					t.Error(err)
					return
				}
				if err := r.Err(); err != nil {
					t.Error(err)
				}
				reconciled++
			}
		}
	}()
	time.Sleep(20 * time.Millisecond)
	var exported []billing.Entry
	x, err := e.b.ExportLedger(e.ctx, e.acct, billing.ExportOptions{Before: cut}, func(en billing.Entry) error {
		exported = append(exported, en)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(exported) != old || len(x.Batches) != 3 {
		t.Fatalf("exported %d entries in %d batches, want %d in 3", len(exported), len(x.Batches), old)
	}
	n, err := e.b.ArchiveLedger(e.ctx, x)
	if err != nil || n != old {
		t.Fatalf("archived %d: %v", n, err)
	}
	time.Sleep(20 * time.Millisecond)
	close(stop)
	wg.Wait()
	r := e.reconcile()
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if r.Archived.Entries != old || r.Entries != int64(appended) || appended == 0 || reconciled == 0 {
		t.Fatalf("archived %d, %d left, %d appended meanwhile (%d reconciliations)", r.Archived.Entries, r.Entries, appended, reconciled)
	}
	rest, _ := e.export(billing.ExportOptions{})
	for _, en := range rest {
		if en.Kind != billing.KindCharge {
			t.Fatalf("an entry from before the cut survived: %+v", en)
		}
	}
}

// The ledger is an audit log: no script may trim it as a side effect of
// appending (XADD ... MAXLEN/MINID) and nothing but the archive may XTRIM
// it. The check reads every Go and Lua source of the module.
func TestLedgerIsNeverTrimmedSilently(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	xadd := regexp.MustCompile(`(?is)XADD['"]?\s*,[^)\n]*\b(MAXLEN|MINID)\b`)
	goAdd := regexp.MustCompile(`(?s)XAddArgs\{[^}]*\b(MaxLen|MinID)\s*:`)
	goTrim := regexp.MustCompile(`\.(XTrim\w*)\(`)
	luaTrim := regexp.MustCompile(`(?i)['"]XTRIM['"]`)
	var checked int
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == ".git" || name == "var" || name == "bin" || name == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, ".lua") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if rel == filepath.Join("internal", "billing", "ledger_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		src := string(b)
		checked++
		if rel == filepath.Join("internal", "privacy", "audit.go") {
			// The privacy audit log is not the ledger: it is kept for
			// --privacy-audit-retention and trimmed by age as it is
			// appended to, by design (docs/privacy.md).
			return nil
		}
		if m := xadd.FindString(src); m != "" {
			t.Errorf("%s trims a stream as it appends (%q): the ledger must never be trimmed silently", rel, m)
		}
		if m := goAdd.FindString(src); m != "" {
			t.Errorf("%s trims a stream as it appends (%q): the ledger must never be trimmed silently", rel, m)
		}
		if rel == filepath.Join("internal", "billing", "ledger.go") {
			return nil // the archive: deletes only what was exported and fsynced
		}
		if m := goTrim.FindString(src); m != "" {
			t.Errorf("%s trims a stream (%s)", rel, m)
		}
		if m := luaTrim.FindString(src); m != "" {
			t.Errorf("%s trims a stream in a script (%s)", rel, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("only %d source files checked: wrong root %s?", checked, root)
	}
	// The check itself finds what it is looking for.
	for _, bad := range []string{
		`redis.call('XADD', KEYS[3], 'MAXLEN', '~', 1000, '*', 'ts', ARGV[1])`,
		`redis.call("XADD", KEYS[3], "MINID", ARGV[9], "*")`,
	} {
		if !xadd.MatchString(bad) {
			t.Errorf("the check misses %s", bad)
		}
	}
	if !goAdd.MatchString("rdb.XAdd(ctx, &redis.XAddArgs{Stream: k,\n\tMaxLen: 100, Values: v})") ||
		!goTrim.MatchString(`rdb.XTrimMaxLen(ctx, key, 10)`) || !luaTrim.MatchString(`redis.call('XTRIM', k, 'MAXLEN', 1)`) {
		t.Error("the trim checks miss a trim")
	}
}
