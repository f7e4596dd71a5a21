package finder

import (
	"slices"
	"testing"
)

// TestFavouredShape: a shape orders the priors only with at least 2
// addresses and at least twice any other shape; pattern fields do not
// count, and a tie favours nothing.
func TestFavouredShape(t *testing.T) {
	for _, c := range []struct {
		counts map[string]int64
		want   string
	}{
		{nil, ""},
		{map[string]int64{"shape:i.w": 1}, ""},
		{map[string]int64{"shape:i.w": 2}, "i.w"},
		{map[string]int64{"shape:i.w": 4, "shape:joined": 2}, "i.w"},
		{map[string]int64{"shape:i.w": 3, "shape:joined": 2}, ""},
		{map[string]int64{"shape:i.w": 2, "shape:w.w": 2}, ""},
		{map[string]int64{"{f}{last}": 9, "shape:w_w": 2}, "w_w"},
		{map[string]int64{"{f}{last}": 9}, ""},
		{map[string]int64{"shape:joined": 2}, ""}, // office@, hello@: maybe not people
		{map[string]int64{"shape:joined": 3, "shape:w.w": 1}, "joined"},
	} {
		if got := favouredShape(c.counts); got != c.want {
			t.Errorf("favouredShape(%v) = %q, want %q", c.counts, got, c.want)
		}
	}
}

// TestShapeOrdersPriors: with a favoured shape the shape's patterns come
// first, in prior order; without one the priors are unchanged.
func TestShapeOrdersPriors(t *testing.T) {
	n := parseName("John", "Smith")
	locals := func(cs []cand) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.local)
		}
		return out
	}
	plain := locals(priorCands(n, ""))
	if plain[0] != "john.smith" || plain[4] != "j.smith" {
		t.Fatalf("priors %v", plain)
	}
	for shape, want := range map[string][]string{
		"i.w":    {"j.smith"},
		"w.w":    {"john.smith", "smith.john"},
		"w_w":    {"john_smith", "smith_john"},
		"joined": {"jsmith", "john", "johnsmith", "johns", "smithj", "smith", "smithjohn"},
	} {
		got := locals(priorCands(n, shape))
		if !slices.Equal(got[:len(want)], want) {
			t.Errorf("shape %s: %v, want %v first", shape, got, want)
		}
		if len(got) != len(plain) {
			t.Errorf("shape %s: %d candidates, want %d (the order changes, not the set size)", shape, len(got), len(plain))
		}
	}
}

// TestMemShapesCountEachAddressOnce: the in-process store counts an
// address's shape once, however often it is learned.
func TestMemShapesCountEachAddressOnce(t *testing.T) {
	s := newMemPatterns()
	addrs := []ShapeAddr{{"a.test", "i.w", "j.smith"}, {"a.test", "i.w", "m.jones"}}
	for range 3 {
		if err := s.LearnShapes(t.Context(), addrs); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := s.CountsMany(t.Context(), []string{"a.test"})
	if got["a.test"]["shape:i.w"] != 2 {
		t.Errorf("counts %v, want shape:i.w 2", got)
	}
}
