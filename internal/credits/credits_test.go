package credits

import (
	"encoding/json"
	"testing"
)

func TestStringAndParse(t *testing.T) {
	cases := []struct {
		in   Amount
		want string
	}{
		{0, "0"}, {Whole(100), "100"}, {12400, "12.4"}, {200, "0.2"}, {-3050, "-3.05"}, {1, "0.001"}, {Whole(3) / 5 * 5, "3"},
	}
	for _, c := range cases {
		if got := c.in.String(); got != c.want {
			t.Errorf("%d.String() = %q, want %q", int64(c.in), got, c.want)
		}
		back, err := Parse(c.want)
		if err != nil || back != c.in {
			t.Errorf("Parse(%q) = %v, %v; want %d", c.want, back, err, int64(c.in))
		}
	}
	for _, bad := range []string{"", "abc", "1.2345", "1e3", "--1", ".", "99999999999999999999"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

func TestSumOfFifthsIsExact(t *testing.T) {
	price := Amount(200) // 0.2 credits
	var sum Amount
	for i := 0; i < 100000; i++ {
		sum += price
	}
	if sum != Whole(20000) {
		t.Fatalf("sum = %s", sum)
	}
	total, err := price.Mul(100000)
	if err != nil || total != sum {
		t.Fatalf("Mul = %s, %v", total, err)
	}
}

func TestJSON(t *testing.T) {
	b, _ := json.Marshal(struct {
		C Amount `json:"credits"`
	}{12400})
	if string(b) != `{"credits":12.4}` {
		t.Fatalf("got %s", b)
	}
	var v struct {
		C Amount `json:"credits"`
	}
	if err := json.Unmarshal([]byte(`{"credits":0.6}`), &v); err != nil || v.C != 600 {
		t.Fatalf("got %v %v", v.C, err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"0", "12.4", "-0.2", "1.", ".5", "9223372036854775"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := Parse(s)
		if err != nil {
			return
		}
		b, err := Parse(a.String())
		if err != nil || b != a {
			t.Fatalf("round trip %q -> %s -> %v %v", s, a, b, err)
		}
	})
}
