package verify

import (
	"bufio"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// corpusLine is one reply of testdata/replies.tsv.
type corpusLine struct {
	line   int
	code   int
	text   string // the enhanced code (when any) and the text, as the client reads them
	stage  blockStage
	class  string
	source string
}

// readCorpus reads testdata/replies.tsv: tab-separated code, enhanced code
// ("-" when none), text, stage (connect, mail, rcpt), class
// (rcptClass.String) and source (repository and file, or documentation
// page). Lines starting with # are comments.
func readCorpus(t *testing.T) []corpusLine {
	t.Helper()
	f, err := os.Open("testdata/replies.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []corpusLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	n := 0
	for sc.Scan() {
		n++
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		fs := strings.Split(l, "\t")
		if len(fs) != 6 {
			t.Fatalf("replies.tsv:%d: %d fields, want 6", n, len(fs))
		}
		code, err := strconv.Atoi(fs[0])
		if err != nil {
			t.Fatalf("replies.tsv:%d: code %q", n, fs[0])
		}
		text := fs[2]
		if fs[1] != "-" {
			text = fs[1] + " " + text
		}
		var st blockStage
		switch fs[3] {
		case "connect":
			st = stageConnect
		case "mail":
			st = stageMail
		case "rcpt":
			st = stageRcpt
		default:
			t.Fatalf("replies.tsv:%d: stage %q", n, fs[3])
		}
		if fs[5] == "" {
			t.Fatalf("replies.tsv:%d: no source", n)
		}
		out = append(out, corpusLine{line: n, code: code, text: text, stage: st, class: fs[4], source: fs[5]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// corpusClient is the client a corpus reply is read by: the first IPv4
// address the text names is taken for ours (the worst case for a block:
// a server that names an address names the client's), with our HELO name.
func corpusClient(text string) clientID {
	c := clientID{helo: "verify.bulkd.example"}
	if ips := reIPv4.FindAllString(text, 1); len(ips) > 0 {
		c.ip = ips[0]
	}
	return c
}

// sourceOf is the repository (and its top file for sisimai's tables) or
// the web host a corpus line cites, for the per-source counts.
func sourceOf(src string) string {
	if i := strings.Index(src, "://"); i >= 0 {
		host := src[i+3:]
		if j := strings.IndexAny(host, "/ "); j >= 0 {
			host = host[:j]
		}
		return host
	}
	fields := strings.Fields(src)
	if len(fields) > 1 && strings.HasPrefix(fields[0], "sisimai/") {
		return fields[0] + " " + strings.SplitN(fields[1], "/", 2)[0]
	}
	return fields[0]
}

// TestReplyCorpus runs every reply of testdata/replies.tsv (real texts of
// mail servers and providers, each with its source) through the
// classifier at its stage and checks its class. It logs the count per
// source and per class.
func TestReplyCorpus(t *testing.T) {
	lines := readCorpus(t)
	if len(lines) < 300 {
		t.Errorf("%d replies in the corpus, want at least 300", len(lines))
	}
	perClass := map[string]int{}
	perSource := map[string]int{}
	for _, l := range lines {
		r := reply{code: l.code, text: l.text, enh: parseEnhanced(l.code, l.text)}
		got := classifyAt(r, l.stage, corpusClient(l.text)).String()
		if got != l.class {
			t.Errorf("replies.tsv:%d: %d %s (stage %d): class %s, want %s [%s]", l.line, l.code, l.text, l.stage, got, l.class, l.source)
		}
		perClass[l.class]++
		perSource[sourceOf(l.source)]++
	}
	t.Logf("%d replies", len(lines))
	for _, m := range []map[string]int{perClass, perSource} {
		var keys []string
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			t.Logf("  %-40s %d", k, m[k])
		}
	}
}
