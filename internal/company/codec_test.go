package company

import (
	"reflect"
	"testing"
)

func TestCodecRoundTrip(t *testing.T) {
	recs := generated(t, 2000, 7)
	recs = append(recs,
		Record{NetworkID: new(int64(1)), Domain: new("a.example")},
		Record{
			NetworkID: new(int64(MaxNetworkID)), NetworkURL: new("https://www.n.example/company/x"),
			Name: new(""), Description: new("line\nbreak \x00 nul"), EmployeeCount: new(-5),
			FoundedYear: new(0), FollowerCount: new(1 << 40),
			CompanySize:      &CompanySize{Max: new(3)},
			Headquarters:     &Headquarters{Country: new("Norway")},
			Specialties:      []string{"", "ünïcode"},
			SimilarCompanies: []SimilarCompany{{}, {Location: new("Oslo")}},
		},
	)
	for i := range recs {
		want := recs[i]
		want.Normalize()
		got, err := decodeRecord(string(encodeRecord(nil, &want)))
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, &want) {
			t.Fatalf("record %d round trip:\n got %s\nwant %s", i, mustJSON(t, got), mustJSON(t, want))
		}
	}
}

func TestCodecRejectsCorrupt(t *testing.T) {
	good := string(encodeRecord(nil, &generated(t, 5, 1)[4]))
	for _, bad := range []string{"", "\x02", good[:len(good)-1], good + "x", "\x01\xff\xff"} {
		if _, err := decodeRecord(bad); err == nil {
			t.Errorf("decodeRecord(%q) succeeded", bad)
		}
	}
}

// FuzzDecodeRecord checks that corrupt stored values never panic and that
// whatever decodes re-encodes to something that decodes the same.
func FuzzDecodeRecord(f *testing.F) {
	for _, r := range generated(f, 8, 3) {
		f.Add(encodeRecord(nil, &r))
	}
	f.Add([]byte{1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRecord(string(b))
		if err != nil {
			return
		}
		r2, err := decodeRecord(string(encodeRecord(nil, r)))
		if err != nil || !reflect.DeepEqual(r, r2) {
			t.Fatalf("re-encode mismatch: %v", err)
		}
	})
}
