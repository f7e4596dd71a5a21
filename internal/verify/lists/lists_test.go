package lists

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/testredis"
)

func TestDefaults(t *testing.T) {
	l := Default()
	for _, d := range []string{"mailinator.com", "yopmail.com", "x.mailinator.com", "Guerrillamail.COM"} {
		if !l.IsDisposable(d) {
			t.Errorf("IsDisposable(%q) = false", d)
		}
	}
	for _, d := range []string{"gmail.com", "example.com", "com", "mailinator.com.evil.org"} {
		if l.IsDisposable(d) {
			t.Errorf("IsDisposable(%q) = true", d)
		}
	}
	for _, d := range []string{"gmail.com", "yahoo.co.uk", "hotmail.fr", "web.de", "proton.me"} {
		if !l.IsFree(d) {
			t.Errorf("IsFree(%q) = false", d)
		}
	}
	if l.IsFree("acme.com") || l.IsFree("x.gmail.com") {
		t.Error("IsFree too broad")
	}
	for _, r := range []string{"info", "Sales", "support+eu", `"admin"`, "postmaster", "noreply", "no-reply"} {
		if !l.IsRole(r) {
			t.Errorf("IsRole(%q) = false", r)
		}
	}
	for _, r := range []string{"john", "john.info", "+info", `"in fo"`} {
		if l.IsRole(r) {
			t.Errorf("IsRole(%q) = true", r)
		}
	}
	for _, in := range l.Infos() {
		if in.Count < 100 || in.Source != "embedded" {
			t.Errorf("info %+v", in)
		}
	}
}

func TestLoad(t *testing.T) {
	l := Default()
	n, err := l.Load(Disposable, strings.NewReader("# comment\n\nTemp.Example.\nother.example # trailing\n"))
	if err != nil || n != 2 {
		t.Fatalf("Load = %d, %v", n, err)
	}
	if !l.IsDisposable("temp.example") || !l.IsDisposable("a.other.example") || l.IsDisposable("mailinator.com") {
		t.Fatal("Load did not replace the list")
	}
	if _, err := l.Load(Disposable, strings.NewReader("good.example\nnot a domain\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("bad line: %v", err)
	}
	if !l.IsDisposable("temp.example") {
		t.Fatal("failed Load replaced the list")
	}
	if _, err := l.Load("nope", strings.NewReader("")); err == nil {
		t.Fatal("unknown kind accepted")
	}
	if _, err := l.Load(Role, strings.NewReader("a@b\n")); err == nil {
		t.Fatal("bad role accepted")
	}
}

func TestSuggest(t *testing.T) {
	l := Default()
	cases := map[string]string{
		"gmial.com": "gmail.com", "gmai.com": "gmail.com", "gamil.com": "gmail.com", "gmail.co": "gmail.com",
		"hotmail.con": "hotmail.com", "hotmial.com": "hotmail.com", "hotamil.co": "hotmail.com", "outlok.com": "outlook.com",
		"yahooo.com": "yahoo.com", "acme.con": "acme.com", "acme.cmo": "acme.com", "aol.con": "aol.com",
		"iclod.com": "icloud.com", "gmial.con": "gmail.com",
		// no suggestion:
		"gmail.com": "", "mail.com": "", "ymail.com": "", "aon.com": "", "acme.com": "", "acme.co": "",
		"mailinator.com": "", "gmx.de": "", "gmc.com": "", "example.org": "",
	}
	for in, want := range cases {
		if got := l.Suggest(in); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestOSA(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{{"gmail", "gmial", 1}, {"abc", "abc", 0}, {"abc", "", 3}, {"ca", "abc", 3}, {"kitten", "sitting", 3}} {
		if got := osa(c.a, c.b, 5); got != c.d {
			t.Errorf("osa(%q,%q) = %d, want %d", c.a, c.b, got, c.d)
		}
	}
	if got := osa("aaaaaaaa", "bbbbbbbb", 2); got != 3 {
		t.Errorf("cutoff: %d", got)
	}
}

func TestRedisRoundTrip(t *testing.T) {
	rdb, _ := testredis.Client(t)
	ctx := context.Background()
	if _, err := Save(ctx, rdb, Disposable, "list.txt", strings.NewReader("a.example\nb.example\n"), time.Now()); err != nil {
		t.Fatal(err)
	}
	l, err := LoadFromRedis(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	if !l.IsDisposable("a.example") || l.IsDisposable("mailinator.com") {
		t.Fatal("stored list not overlaid")
	}
	if !l.IsFree("gmail.com") || !l.IsRole("info") {
		t.Fatal("defaults lost")
	}
	in := l.Infos()
	if in[0].Count != 2 || in[0].Source != "redis: list.txt" || in[1].Source != "embedded" {
		t.Fatalf("infos %+v", in)
	}
	if _, err := Save(ctx, rdb, Free, "x", strings.NewReader("bad entry\n"), time.Now()); err == nil {
		t.Fatal("bad list saved")
	}
}
