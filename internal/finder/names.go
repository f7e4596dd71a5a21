package finder

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// maxNameRunes bounds the runes of a name that are looked at (the API caps
// fields at 255 characters; this keeps the functions bounded when called
// from elsewhere).
const maxNameRunes = 512

// style is a transliteration style.
type style int

const (
	// styleStrip drops diacritics: ä -> a, ø -> o, å -> a.
	styleStrip style = iota
	// styleExpand writes the German/Nordic digraphs: ä -> ae, ö/ø -> oe,
	// ü -> ue, å -> aa, as many companies in those countries do.
	styleExpand
)

// NormalizeName returns the canonical form of a first or last name: trimmed,
// Unicode NFKC, lowercased, diacritics removed and other scripts
// transliterated (see doc.go), apostrophes dropped; its words are separated
// by "-" where the name had a hyphen (or dash) and by "." where it had any
// other separator (white space, dots of initials, commas, underscores...).
// The result contains only [a-z0-9.-], never starts or ends with a
// separator and never has two in a row; NormalizeName is idempotent. It is
// "" when nothing of the name can be written in ASCII.
func NormalizeName(s string) string {
	return normalizeName(s, styleStrip)
}

// normalizeName is NormalizeName in a given transliteration style.
func normalizeName(s string, st style) string {
	s = strings.TrimFunc(s, isTrimmed)
	if s == "" {
		return ""
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, " ")
	}
	if n := utf8.RuneCountInString(s); n > maxNameRunes {
		i := 0
		for k := range s {
			if i == maxNameRunes {
				s = s[:k]
				break
			}
			i++
		}
	}
	// Apostrophe-like characters are dropped before NFKC, because NFKC
	// turns some of them (U+00B4 ACUTE ACCENT) into a space and a
	// combining mark, which would split "O´Neil" in two.
	s = strings.Map(func(r rune) rune {
		if isApostrophe(r) {
			return -1
		}
		return r
	}, s)
	s = strings.ToLower(norm.NFKC.String(s))
	s = norm.NFC.String(s)

	var b strings.Builder
	b.Grow(len(s))
	pending := byte(0) // separator waiting for the next word: 0, '.', '-'
	word := func(w string) {
		if w == "" {
			return
		}
		if pending != 0 && b.Len() > 0 {
			b.WriteByte(pending)
		}
		pending = 0
		b.WriteString(w)
	}
	sep := func(c byte) {
		if c == '-' || pending == 0 {
			pending = c
		}
	}
	for _, r := range s {
		switch {
		case r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= '0' && r <= '9'):
			word(string(r))
		case isHyphen(r):
			sep('-')
		case isApostrophe(r) || r == '\u00b7' || r == '\u0387' || r == '\u2027':
			// dropped: O'Neil -> oneil, Paral·lel -> parallel
		case unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Me, r) || unicode.Is(unicode.Cf, r):
			// a stray combining mark or format character (ZWJ, ZWNJ):
			// dropped without splitting the word
		default:
			if t, ok := translit(r, st); ok {
				if t == "" {
					continue // hard and soft signs
				}
				word(t)
				continue
			}
			sep('.')
		}
	}
	return b.String()
}

// translit writes one non-ASCII rune in ASCII: a table of letters that
// have no decomposition (ß, æ, ø, ł, đ, þ ...), Cyrillic and Greek, then
// the canonical decomposition without its marks (é -> e). ok is false for
// characters with no ASCII reading (other scripts, symbols, punctuation).
func translit(r rune, st style) (string, bool) {
	if st == styleExpand {
		if t, ok := expand[r]; ok {
			return t, true
		}
	}
	if t, ok := letters[r]; ok {
		return t, true
	}
	if !unicode.IsLetter(r) && !unicode.IsNumber(r) {
		return "", false
	}
	var b strings.Builder
	for _, d := range norm.NFD.String(string(r)) {
		switch {
		case d < utf8.RuneSelf && (d >= 'a' && d <= 'z' || d >= '0' && d <= '9'):
			b.WriteRune(d)
		case d >= 'A' && d <= 'Z':
			b.WriteRune(d + 'a' - 'A')
		case unicode.Is(unicode.Mn, d):
		default:
			if t, ok := letters[unicode.ToLower(d)]; ok {
				b.WriteString(t)
				continue
			}
			return "", false
		}
	}
	if b.Len() == 0 {
		return "", false
	}
	return b.String(), true
}

func isTrimmed(r rune) bool {
	return unicode.IsSpace(r) || r == '\u200b' || r == '\ufeff' || r == '\u00a0'
}

func isApostrophe(r rune) bool {
	switch r {
	case '\'', '`', '\u00b4', '\u2018', '\u2019', '\u201b', '\u02bc', '\u02b9', '\u02bb', '\u02bd', '\u02c8',
		'\u2032', '\uff07':
		return true
	}
	return false
}

func isHyphen(r rune) bool {
	switch r {
	case '-', '\u2010', '\u2011', '\u2012', '\u2013', '\u2014', '\u2015', '\u2212', '\ufe58', '\ufe63', '\uff0d', '\u058a', '\u05be', '\u1806', '\u2e3a', '\u2e3b', '\u30a0':
		return true
	}
	return false
}

// expand is styleExpand's table (the letters it writes differently).
var expand = map[rune]string{
	'ä': "ae", 'ö': "oe", 'ü': "ue", 'ø': "oe", 'å': "aa", 'æ': "ae", 'œ': "oe",
}

// letters are the transliterations of letters that NFD does not reduce to
// ASCII, and of the Cyrillic and Greek alphabets (lowercase; the input is
// lowercased first). Hard and soft signs map to "".
var letters = map[rune]string{
	// Latin without decomposition.
	'ß': "ss", 'ẞ': "ss", 'æ': "ae", 'œ': "oe", 'ø': "o", 'đ': "d", 'ð': "d", 'þ': "th", 'ł': "l",
	'ı': "i", 'ȷ': "j", 'ŋ': "n", 'ħ': "h", 'ŧ': "t", 'ĸ': "k", 'ſ': "s", 'ə': "e", 'ɛ': "e",
	'ɔ': "o", 'ƒ': "f", 'ƚ': "l", 'ɨ': "i", 'ʉ': "u", 'ƀ': "b", 'ɓ': "b", 'ɗ': "d", 'ƙ': "k",
	'ƴ': "y", 'ʒ': "z", 'ĳ': "ij", 'ŀ': "l",
	// Cyrillic (Russian, Ukrainian, Belarusian, Bulgarian, Serbian, Macedonian).
	'а': "a", 'б': "b", 'в': "v", 'г': "g", 'д': "d", 'е': "e", 'ё': "e", 'ж': "zh", 'з': "z",
	'и': "i", 'й': "y", 'к': "k", 'л': "l", 'м': "m", 'н': "n", 'о': "o", 'п': "p", 'р': "r",
	'с': "s", 'т': "t", 'у': "u", 'ф': "f", 'х': "kh", 'ц': "ts", 'ч': "ch", 'ш': "sh",
	'щ': "shch", 'ъ': "", 'ы': "y", 'ь': "", 'э': "e", 'ю': "yu", 'я': "ya", 'і': "i", 'ї': "yi",
	'є': "ye", 'ґ': "g", 'ў': "u", 'ђ': "dj", 'ј': "j", 'љ': "lj", 'њ': "nj", 'ћ': "c", 'џ': "dz",
	'ѓ': "gj", 'ќ': "kj", 'ѕ': "dz",
	// Greek (accents and diaeresis are removed by NFD first).
	'α': "a", 'β': "v", 'γ': "g", 'δ': "d", 'ε': "e", 'ζ': "z", 'η': "i", 'θ': "th", 'ι': "i",
	'κ': "k", 'λ': "l", 'μ': "m", 'ν': "n", 'ξ': "x", 'ο': "o", 'π': "p", 'ρ': "r", 'σ': "s",
	'ς': "s", 'τ': "t", 'υ': "y", 'φ': "f", 'χ': "ch", 'ψ': "ps", 'ω': "o",
}

// Name words that are not part of the name used in addresses.
var (
	// titles are dropped from the start of a first name.
	titles = map[string]bool{"dr": true, "mr": true, "mrs": true, "ms": true, "miss": true, "mx": true,
		"prof": true, "sir": true, "dame": true, "herr": true, "frau": true, "mme": true, "mlle": true}
	// suffixes are dropped from the end of a last name.
	suffixes = map[string]bool{"jr": true, "sr": true, "ii": true, "iii": true, "iv": true, "phd": true,
		"md": true, "esq": true, "mba": true, "cpa": true, "dds": true, "jnr": true, "snr": true}
	// particles start multi-part surnames: "van der Berg", "de la Cruz",
	// "von Trapp", "Ó Briain", "Mac Donald", "al Rashid".
	particles = map[string]bool{"van": true, "von": true, "der": true, "den": true, "de": true, "del": true,
		"della": true, "dela": true, "la": true, "le": true, "du": true, "des": true, "di": true, "da": true,
		"dos": true, "das": true, "do": true, "ten": true, "ter": true, "te": true, "zu": true, "zum": true,
		"zur": true, "af": true, "av": true, "o": true, "mac": true, "mc": true, "ni": true, "nic": true,
		"bin": true, "ibn": true, "ben": true, "al": true, "el": true, "st": true, "san": true, "lo": true}
)

// word is one word of a normalized name and whether a hyphen joined it to
// the previous one.
type word struct {
	s      string
	hyphen bool
}

func words(n string) []word {
	var ws []word
	start, hy := 0, false
	for i := 0; i <= len(n); i++ {
		if i == len(n) || n[i] == '.' || n[i] == '-' {
			if i > start {
				ws = append(ws, word{n[start:i], hy})
			}
			if i < len(n) {
				hy = n[i] == '-'
			}
			start = i + 1
		}
	}
	return ws
}

func join(ws []word, sep string) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = w.s
	}
	return strings.Join(parts, sep)
}

// form is one way of writing a name in an address, with its weight (the
// first form of a name weighs 1) and its kind.
type form struct {
	s    string
	w    float64
	kind formKind
}

// formKind says how a form writes a name of several words.
type formKind int

const (
	kindWhole  formKind = iota // a name of one word
	kindJoined                 // the words joined: "annemarie", "vanderberg"
	kindHyphen                 // the words kept apart by hyphens: "anne-marie"
	kindPart                   // one word (or the words after particles): "anne", "berg"
)

// Weights of a name's forms, by position.
var formWeights = []float64{1, 0.45, 0.2}

// forms builds the forms of a name from (kind, string) in order of
// likelihood, dropping empty and repeated strings.
func forms(kinds []formKind, ss ...string) []form {
	var out []form
	seen := map[string]bool{}
	for i, s := range ss {
		if s == "" || seen[s] {
			continue
		}
		seen[s] = true
		out = append(out, form{s, formWeights[min(len(out), len(formWeights)-1)], kinds[i]})
	}
	return out
}

var (
	whole            = []formKind{kindWhole}
	joinedHyphenPart = []formKind{kindJoined, kindHyphen, kindPart}
	partJoinedHyphen = []formKind{kindPart, kindJoined, kindHyphen}
	joinedPartHyphen = []formKind{kindJoined, kindPart, kindHyphen}
)

// firstForms returns the ways a first name is written in addresses, most
// likely first: one word as is; hyphenated ("Anne-Marie") joined, kept,
// then its first part; several words ("John Michael", first and middle
// names) the first word, then joined, then hyphenated. Leading titles are
// dropped.
func firstForms(n string) []form {
	ws := words(n)
	for len(ws) > 1 && titles[ws[0].s] {
		ws = ws[1:]
	}
	switch {
	case len(ws) == 0:
		return nil
	case len(ws) == 1:
		return forms(whole, ws[0].s)
	case allHyphenated(ws):
		return forms(joinedHyphenPart, join(ws, ""), join(ws, "-"), ws[0].s)
	default:
		return forms(partJoinedHyphen, ws[0].s, join(ws, ""), join(ws, "-"))
	}
}

// lastForms returns the ways a last name is written in addresses, most
// likely first: one word as is; hyphenated ("Smith-Jones") joined, kept,
// then its first part; starting with particles ("van der Berg") joined,
// then without the particles, then hyphenated; other words ("García
// Márquez", Spanish double surnames) the first word, then joined, then
// hyphenated. Trailing suffixes (Jr, III, PhD) are dropped.
func lastForms(n string) []form {
	ws := words(n)
	for len(ws) > 1 && suffixes[ws[len(ws)-1].s] {
		ws = ws[:len(ws)-1]
	}
	switch {
	case len(ws) == 0:
		return nil
	case len(ws) == 1:
		return forms(whole, ws[0].s)
	case particles[ws[0].s]:
		k := 0
		for k < len(ws)-1 && particles[ws[k].s] {
			k++
		}
		return forms(joinedPartHyphen, join(ws, ""), join(ws[k:], ""), join(ws, "-"))
	case allHyphenated(ws):
		return forms(joinedHyphenPart, join(ws, ""), join(ws, "-"), ws[0].s)
	default:
		return forms(partJoinedHyphen, ws[0].s, join(ws, ""), join(ws, "-"))
	}
}

func allHyphenated(ws []word) bool {
	for _, w := range ws[1:] {
		if !w.hyphen {
			return false
		}
	}
	return true
}
