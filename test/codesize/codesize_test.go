// Package codesize guards the size rules of docs/architecture.md (issue
// 29, item 5): no non-test Go file over 800 lines, and no non-test
// function over 100 lines unless its doc comment says why it "stays
// whole". It parses every Go file of the repository (go/parser), so
// `make test` runs it.
package codesize

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const (
	maxFileLines = 800
	maxFuncLines = 100
	// wholeWords, in a long function's doc comment, say it must stay
	// whole (followed by why).
	wholeWords = "stays whole"
)

// root is the repository's top directory (the one with go.mod).
func root(t *testing.T) string {
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test")
		}
		dir = up
	}
}

// violation is one file or function over its limit.
type violation struct {
	where string // path:line
	what  string
	lines int
	dir   string // the file's directory, relative
}

// scan parses every non-test, non-generated Go file under top.
func scan(t *testing.T, top string) []violation {
	var out []violation
	fset := token.NewFileSet()
	err := filepath.WalkDir(top, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != top && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || name == "node_modules" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") || strings.HasPrefix(name, "zz_generated") {
			return nil
		}
		rel, _ := filepath.Rel(top, path)
		rel = filepath.ToSlash(rel)
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		if n := fset.File(f.Pos()).LineCount(); n > maxFileLines {
			out = append(out, violation{where: rel, what: "file", lines: n, dir: dir})
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			start, end := fset.Position(fn.Pos()).Line, fset.Position(fn.End()).Line
			n := end - start + 1
			if n <= maxFuncLines || (fn.Doc != nil && strings.Contains(fn.Doc.Text(), wholeWords)) {
				continue
			}
			out = append(out, violation{where: rel + ":" + itoa(start), what: "func " + funcName(fn), lines: n, dir: dir})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].where < out[j].where })
	return out
}

func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	if s, ok := typ.(*ast.StarExpr); ok {
		typ = s.X
	}
	if ix, ok := typ.(*ast.IndexExpr); ok {
		typ = ix.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// TestSizes fails on any non-test Go file over 800 lines and any non-test
// function over 100 lines whose doc comment does not say it stays whole.
func TestSizes(t *testing.T) {
	for _, v := range scan(t, root(t)) {
		limit := maxFuncLines
		if v.what == "file" {
			limit = maxFileLines
		}
		t.Errorf("%s: %s is %d lines (at most %d; a longer function's doc comment says why it %q)", v.where, v.what, v.lines, limit, wholeWords)
	}
}
