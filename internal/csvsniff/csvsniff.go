// Package csvsniff guesses how a CSV that people made was written: the
// dashboard's uploads and bulkctl's input files follow one rule.
package csvsniff

import "strings"

// Comma is the delimiter of a CSV whose first line is first: the most
// frequent of comma, semicolon and tab in it, a comma on a tie with it
// or when there is none (spreadsheets in many locales write ';', and
// exports from databases often '\t').
func Comma(first string) rune {
	commas, semis, tabs := strings.Count(first, ","), strings.Count(first, ";"), strings.Count(first, "\t")
	switch {
	case tabs > commas && tabs >= semis:
		return '\t'
	case semis > commas:
		return ';'
	}
	return ','
}
