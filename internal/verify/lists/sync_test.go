package lists

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/testredis"
)

// TestMain stops the shared Redis Cluster of BULKD_TEST_REDIS=cluster runs.
func TestMain(m *testing.M) { testredis.Main(m) }

// TestEmbeddedLists: the merged lists are the size SOURCES.md says, no free
// provider is disposable (itself or as a subdomain of a listed domain), and
// the well-known services are where they belong.
func TestEmbeddedLists(t *testing.T) {
	l := Default()
	src, err := os.ReadFile("SOURCES.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range Kinds {
		m := regexp.MustCompile(`\| ` + k + `\.txt \| (\d+) \|`).FindSubmatch(src)
		if m == nil {
			t.Fatalf("SOURCES.md has no count for %s.txt", k)
		}
		if n, _ := strconv.Atoi(string(m[1])); n != EmbeddedCount(k) {
			t.Errorf("%s: SOURCES.md says %d, embedded %d", k, n, EmbeddedCount(k))
		}
	}
	if n := EmbeddedCount(Disposable); n < 100_000 {
		t.Errorf("%d disposable domains", n)
	}
	if n := EmbeddedCount(Free); n < 4_000 {
		t.Errorf("%d free providers", n)
	}
	if n := EmbeddedCount(Role); n < 900 {
		t.Errorf("%d role local parts", n)
	}
	for _, f := range l.Entries(Free) {
		if l.IsDisposable(f) {
			t.Errorf("free provider %s is disposable", f)
		}
	}
	for _, d := range []string{"gmail.com", "outlook.com", "hotmail.com", "yahoo.com", "icloud.com", "gmx.de", "mail.ru", "proton.me", "consultant.com"} {
		if !l.IsFree(d) || l.IsDisposable(d) {
			t.Errorf("%s: free %v disposable %v, want a free provider", d, l.IsFree(d), l.IsDisposable(d))
		}
	}
	for _, d := range []string{"mailinator.com", "guerrillamail.com", "10minutemail.com", "yopmail.com", "temp-mail.org", "sharklasers.com"} {
		if l.IsFree(d) || !l.IsDisposable(d) {
			t.Errorf("%s: free %v disposable %v, want disposable", d, l.IsFree(d), l.IsDisposable(d))
		}
	}
}

func TestSyncModesAndClear(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	res, err := Sync(ctx, rdb, strings.NewReader("a.example\nb.example\n"), SyncOptions{Kind: Disposable, Source: "mine.txt", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if res.Entries != 2 || res.Added != 2 || res.Removed != 0 || res.Effective != 2 || res.Mode != Replace || res.Version != 1 {
		t.Fatalf("first sync %+v", res)
	}
	l, err := LoadFromRedis(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	if !l.IsDisposable("x.a.example") || l.IsDisposable("mailinator.com") || l.Version() != 1 {
		t.Fatal("replace mode did not replace the embedded list")
	}
	// add: the file joins the embedded list; the previous operator list is
	// replaced (b.example goes, c.example comes).
	res, err = Sync(ctx, rdb, strings.NewReader("a.example\nc.example\n"), SyncOptions{Kind: Disposable, Mode: Add, Source: "mine2.txt", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if res.Added != 1 || res.Removed != 1 || res.Effective != EmbeddedCount(Disposable)+2 || res.Version != 2 {
		t.Fatalf("add sync %+v", res)
	}
	if l, err = LoadFromRedis(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	if !l.IsDisposable("c.example") || l.IsDisposable("b.example") || !l.IsDisposable("mailinator.com") {
		t.Fatal("add mode did not add to the embedded list")
	}
	if in := l.Infos()[0]; in.Mode != Add || in.Source != "redis: mine2.txt + embedded" || in.Count != res.Effective {
		t.Fatalf("info %+v", in)
	}
	// A dry run stores nothing.
	if res, err = Sync(ctx, rdb, strings.NewReader("z.example\n"), SyncOptions{Kind: Disposable, DryRun: true}); err != nil || res.Version != 0 || res.Removed != 2 {
		t.Fatalf("dry run %+v %v", res, err)
	}
	if v, err := Clear(ctx, rdb, Disposable); err != nil || v != 3 {
		t.Fatalf("clear: %d %v", v, err)
	}
	if l, err = LoadFromRedis(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	if l.IsDisposable("a.example") || l.Infos()[0].Source != "embedded" || l.Version() != 3 {
		t.Fatalf("clear left %+v", l.Infos()[0])
	}
	if _, err := Sync(ctx, rdb, strings.NewReader("x.example\n"), SyncOptions{Kind: Free, Mode: "merge"}); err == nil {
		t.Fatal("unknown mode accepted")
	}
}

// TestLegacyKeysStillRead: a list stored by an older bulkd (bulkd:lists:<kind>)
// is still in effect until the next sync of its kind replaces it.
func TestLegacyKeysStillRead(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx := context.Background()
	rdb.Set(ctx, legacyPrefix+Role, "boss\n", 0)
	rdb.HSet(ctx, legacyPrefix+"meta", Role, `{"count":1,"source":"old.txt"}`)
	l, err := LoadFromRedis(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	if !l.IsRole("boss") || l.IsRole("info") || l.Infos()[1].Source != "redis: old.txt" {
		t.Fatalf("legacy list not read: %+v", l.Infos()[1])
	}
	if _, err := Sync(ctx, rdb, strings.NewReader("chief\n"), SyncOptions{Kind: Role, Mode: Add}); err != nil {
		t.Fatal(err)
	}
	if n, _ := rdb.Exists(ctx, legacyPrefix+Role).Result(); n != 0 {
		t.Fatal("sync left the legacy key")
	}
}

// TestWatchReloadsEveryProcess: two processes' lists, each watched, take a
// sync within moments of the announcement, and a change whose announcement
// was missed at their next poll. Before Watch, lists were read at start only.
func TestWatchReloadsEveryProcess(t *testing.T) {
	rdb := testredis.Universal(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	start := func(poll time.Duration) *Lists {
		l, err := LoadFromRedis(ctx, rdb)
		if err != nil {
			t.Fatal(err)
		}
		ready := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			Watch(ctx, rdb, l, WatchOptions{Poll: poll, Ready: func() { close(ready) }})
		}()
		<-ready
		return l
	}
	a, b := start(time.Hour), start(time.Hour) // announcements only
	if _, err := Sync(ctx, rdb, strings.NewReader("fresh.example\n"), SyncOptions{Kind: Disposable, Mode: Add, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both processes take the announced list", func() bool {
		return a.IsDisposable("fresh.example") && b.IsDisposable("fresh.example") && a.IsDisposable("mailinator.com")
	})

	// A change nobody announced (a process was reconnecting): the poll.
	c := start(100 * time.Millisecond)
	rdb.Set(ctx, KeyPrefix+Role, "chief\n", 0)
	rdb.Incr(ctx, versionKey)
	waitFor(t, "the poll finds the unannounced change", func() bool { return c.IsRole("chief") && !c.IsRole("info") })
	if a.IsRole("chief") {
		t.Error("a process without poll took a change that was never announced (test is not testing the poll)")
	}

	// Redis emptied (or restored from an older snapshot): what it holds
	// counts, so the process goes back to the embedded lists.
	if err := rdb.Del(ctx, KeyPrefix+Role, versionKey).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the poll finds the emptied store", func() bool { return !c.IsRole("chief") && c.IsRole("info") && c.Version() == 0 })
}

// TestSyncRefusesOversizedLists: more than MaxEntries entries is an error
// and nothing is stored.
func TestSyncRefusesOversizedLists(t *testing.T) {
	rdb := testredis.Universal(t)
	var b strings.Builder
	for i := 0; i <= MaxEntries; i++ {
		fmt.Fprintf(&b, "d%d.example\n", i)
	}
	_, err := Sync(context.Background(), rdb, strings.NewReader(b.String()), SyncOptions{Kind: Disposable})
	if err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("oversized list: %v", err)
	}
	if n, _ := rdb.Exists(context.Background(), KeyPrefix+Disposable, versionKey).Result(); n != 0 {
		t.Fatal("an oversized list was stored")
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", what)
		}
	}
}

// BenchmarkLookups: the embedded lists' lookups as the verifier makes them
// (a disposable check walks the parent domains).
func BenchmarkLookups(b *testing.B) {
	l := Default()
	domains := []string{"gmail.com", "mailinator.com", "a.b.c.mailinator.com", "acme-corp.example", "sub.company.co.uk"}
	b.Run("IsDisposable", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			l.IsDisposable(domains[i%len(domains)])
		}
	})
	b.Run("IsFree", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			l.IsFree(domains[i%len(domains)])
		}
	})
	b.Run("IsRole", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			l.IsRole([]string{"info", "john.smith", "Sales+eu"}[i%3])
		}
	})
}

// BenchmarkEmbeddedParse: parsing the embedded lists (once per process)
// and the heap they hold.
func BenchmarkEmbeddedParse(b *testing.B) {
	var heap float64
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		sets := map[string]set{}
		for k, txt := range map[string]string{Disposable: disposableTxt, Role: roleTxt, Free: freeTxt} {
			s, err := parseString(k, txt)
			if err != nil {
				b.Fatal(err)
			}
			sets[k] = s
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap = float64(after.HeapAlloc) - float64(before.HeapAlloc)
		runtime.KeepAlive(sets)
	}
	b.ReportMetric(heap/(1<<20), "heap-MiB")
}
