// Package credits is the fixed-point money type of bulkd. Balances, charges
// and refunds are whole numbers of milli-credits so that prices like 0.2
// credits per verified email add up exactly; they only become decimal numbers
// at the JSON edge.
package credits

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Scale is the number of units in one credit.
const Scale = 1000

// Amount is a number of milli-credits.
type Amount int64

// Whole returns n whole credits.
func Whole(n int64) Amount { return Amount(n * Scale) }

// Mul returns a*n, failing on overflow (a 100,000-row job at any real price
// is far from it, but a corrupt input must not wrap around).
func (a Amount) Mul(n int64) (Amount, error) {
	if n == 0 || a == 0 {
		return 0, nil
	}
	r := int64(a) * n
	if r/n != int64(a) {
		return 0, errors.New("credits: overflow")
	}
	return Amount(r), nil
}

// String renders the amount as a minimal decimal: 12.4, 100, 0.2, -3.05.
func (a Amount) String() string {
	v := int64(a)
	neg := v < 0
	var u uint64
	if neg {
		u = uint64(-(v + 1)) + 1 // safe for MinInt64
	} else {
		u = uint64(v)
	}
	whole, frac := u/Scale, u%Scale
	s := strconv.FormatUint(whole, 10)
	if frac != 0 {
		f := fmt.Sprintf("%03d", frac)
		s += "." + strings.TrimRight(f, "0")
	}
	if neg {
		s = "-" + s
	}
	return s
}

// MarshalJSON writes the amount as a JSON number.
func (a Amount) MarshalJSON() ([]byte, error) { return []byte(a.String()), nil }

// UnmarshalJSON reads a JSON number (or a string holding one).
func (a *Amount) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	v, err := Parse(s)
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// Parse reads a decimal such as "12.4" or "-0.2" exactly; more than three
// decimals is an error rather than a silent rounding.
func Parse(s string) (Amount, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("credits: empty amount")
	}
	neg := false
	switch s[0] {
	case '-':
		neg, s = true, s[1:]
	case '+':
		s = s[1:]
	}
	whole, frac, hasFrac := strings.Cut(s, ".")
	if whole == "" && (!hasFrac || frac == "") {
		return 0, fmt.Errorf("credits: %q is not a number", s)
	}
	if len(frac) > 3 {
		return 0, fmt.Errorf("credits: %q has more than 3 decimals", s)
	}
	for _, r := range whole + frac {
		if r < '0' || r > '9' {
			return 0, fmt.Errorf("credits: %q is not a number", s)
		}
	}
	var w uint64
	if whole != "" {
		var err error
		w, err = strconv.ParseUint(whole, 10, 63)
		if err != nil || w > math.MaxInt64/Scale-1 {
			return 0, fmt.Errorf("credits: %q is out of range", s)
		}
	}
	f := uint64(0)
	if frac != "" {
		frac += strings.Repeat("0", 3-len(frac))
		f, _ = strconv.ParseUint(frac, 10, 16)
	}
	v := int64(w*Scale + f)
	if neg {
		v = -v
	}
	return Amount(v), nil
}
