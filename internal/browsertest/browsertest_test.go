package browsertest

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// The harness drives a real Chromium: a form is filled and submitted, the
// answer page is read, weighed and photographed.
func TestBrowserDrivesAPage(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<!doctype html><html lang="en"><title>form</title><link rel="stylesheet" href="/s.css">
<form id="f" method="post" action="/hello"><label for="name">Name</label><input id="name" name="name"><button id="go">Go</button></form>`))
	})
	mux.HandleFunc("/s.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css")
		_, _ = w.Write([]byte(strings.Repeat("body{margin:0}\n", 100)))
	})
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`<!doctype html><p id="out">Hello, ` + r.PostFormValue("name") + `</p>`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	b := Start(t)
	b.ResetWeight()
	b.Run("open the form", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#name")))
	total, by := b.Transferred()
	if total < 1500 || by[srv.URL+"/s.css"] < 1500 {
		t.Errorf("weight %d %v: want the page and its 1.5 KB stylesheet counted", total, by)
	}
	b.Run("submit", chromedp.SendKeys(chromedp.CSS("#name"), "Ada"), chromedp.Click(chromedp.CSS("#go")), chromedp.WaitVisible(chromedp.CSS("#out")))
	if got := b.Text("#out"); got != "Hello, Ada" {
		t.Errorf("answer %q", got)
	}
	if !strings.HasSuffix(b.Location(), "/hello") {
		t.Errorf("location %s", b.Location())
	}
	p := b.Screenshot("hello")
	if st, err := os.Stat(p); err != nil || st.Size() < 1000 {
		t.Errorf("screenshot %s: %v", p, err)
	}
}
