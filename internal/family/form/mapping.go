package form

import "strings"

// The mapping of a table's columns to a form's fields, shared by the
// dashboard (its mapping page: a guess, then the person's choice) and
// bulkctl (a guess, or --column): a field is mapped to a column by the
// column's name (GuessHeader, Columns) or by what its values look like
// (GuessValues), and a row becomes the form's cells (Cells) and then a
// body item (Item).

// Guess guesses from a table's first rows whether the first is a header
// and which column is which field: by header name when there is one (the
// aliases), else by what the values look like (the dashboard's guess
// before the person chooses).
func (fm Form) Guess(table [][]string) (header bool, m map[string]int) {
	if len(table) == 0 {
		return false, map[string]int{}
	}
	if m := fm.GuessHeader(table[0]); len(m) > 0 {
		return true, m
	}
	return false, fm.GuessValues(table[0])
}

// Cells is a table row as the form's row: one cell per field, in the
// form's order, from the column m maps it to (field -> column), trimmed;
// "" for a field not mapped or a column past the row. nil when every
// mapped cell is empty (the row is left out).
func (fm Form) Cells(row []string, m map[string]int) []string {
	rec := make([]string, len(fm.Fields))
	blank := true
	for k, f := range fm.Fields {
		if i, ok := m[f.Name]; ok && i >= 0 && i < len(row) {
			rec[k] = strings.TrimSpace(row[i])
		}
		blank = blank && rec[k] == ""
	}
	if blank {
		return nil
	}
	return rec
}

// ByLook says whether a value goes to a field by what it looks like
// rather than by its column (Place): forms of several optional fields
// with a Default (company: a website column may hold network URLs).
func (fm Form) ByLook() bool {
	return len(fm.Fields) > 1 && !fm.AllRequired && fm.Default != ""
}

// Place is the field a value of a ByLook form goes to: the first field,
// in order, other than the Default whose Looks it satisfies, else the
// Default (its index in Fields).
func (fm Form) Place(v string) int {
	def := 0
	for k, f := range fm.Fields {
		if f.Name == fm.Default {
			def = k
			continue
		}
		if f.Looks != nil && f.Looks(v) {
			return k
		}
	}
	return def
}

// Columns are every column of a header whose name means one of the
// form's fields (fields in order, best alias first), each once: the
// columns a ByLook form reads.
func (fm Form) Columns(head []string) []int {
	var idx []int
	seen := map[int]bool{}
	for _, f := range fm.Fields {
		for _, a := range append([]string{Norm(f.Name)}, f.Aliases...) {
			for i, h := range head {
				if Norm(h) == a && !seen[i] {
					seen[i] = true
					idx = append(idx, i)
				}
			}
		}
	}
	return idx
}

// FoldValue is how a value of f is compared for Dedupe (Field.Fold).
func (f Field) FoldValue(v string) string {
	if f.Fold != nil {
		return f.Fold(v)
	}
	return strings.ToLower(strings.TrimSpace(v))
}

// Key is a row's cells as compared for Dedupe: each folded, joined.
func (fm Form) Key(cells []string) string {
	var b strings.Builder
	for k, f := range fm.Fields {
		if k > 0 {
			b.WriteByte(0)
		}
		b.WriteString(f.FoldValue(cells[k]))
	}
	return b.String()
}
