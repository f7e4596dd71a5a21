package company

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

// jsonFieldNames are the keys decodeRecordJSON knows, at any level.
var jsonFieldNames = []string{
	"network_url", "network_id", "name", "description", "website", "domain", "email_domain",
	"industry", "company_size", "employee_count", "company_type", "headquarters", "founded_year",
	"specialties", "follower_count", "similar_companies", "label", "min", "max", "text", "city",
	"region", "country", "location",
}

// outsideContract reports whether valid JSON data uses one of the two
// features where decodeRecordJSON deliberately differs from encoding/json:
// a key that matches a field only case-insensitively, or a repeated key.
func outsideContract(data []byte) bool {
	type frame struct {
		obj, wantKey bool
		seen         map[string]bool
	}
	var stack []*frame
	afterValue := func() {
		if n := len(stack); n > 0 && stack[n-1].obj {
			stack[n-1].wantKey = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.Token()
		if err != nil {
			return !errors.Is(err, io.EOF) // invalid JSON: nothing to compare
		}
		if n := len(stack); n > 0 && stack[n-1].obj && stack[n-1].wantKey {
			if key, ok := tok.(string); ok {
				top := stack[n-1]
				if top.seen[key] {
					return true
				}
				top.seen[key] = true
				for _, f := range jsonFieldNames {
					if key != f && strings.EqualFold(key, f) {
						return true
					}
				}
				top.wantKey = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{obj: true, wantKey: true, seen: map[string]bool{}})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			afterValue()
		default:
			afterValue()
		}
	}
}

func checkAgainstStdlib(t *testing.T, data []byte) {
	t.Helper()
	got, err := decodeRecordJSON(data)
	var want Record
	wantErr := json.Unmarshal(data, &want)
	if outsideContract(data) {
		return
	}
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("input %q: error %v, encoding/json error %v", data, err, wantErr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("input %q:\n got %s\nwant %s", data, mustJSON(t, got), mustJSON(t, want))
	}
}

var jsonDecodeCases = []string{
	`{}`, `null`, ` {"name":"x"} `, `{"name":null}`, `{"name":"a\"b\\c\/d\b\f\n\r\t"}`,
	`{"name":"\u00e9\u4e2d\ud83d\ude00"}`, `{"name":"\ud83d"}`, `{"name":"\ud83dx"}`, `{"name":"\ude00\ud83d"}`,
	`{"name":"\ud83d\u0041"}`, "{\"name\":\"bad \xff utf8 \xe2\x82\"}", `{"name":"` + "\x01" + `"}`,
	`{"network_id":9007199254740991}`, `{"network_id":-0}`, `{"network_id":1.0}`, `{"network_id":1e3}`,
	`{"network_id":99999999999999999999}`, `{"network_id":01}`, `{"network_id":"1"}`, `{"network_id":-}`,
	`{"specialties":[]}`, `{"specialties":null}`, `{"specialties":["a",null,"b"]}`, `{"specialties":[1]}`,
	`{"similar_companies":[null,{"name":"n","x":[1,{"y":true}]}]}`, `{"company_size":{"label":"1-10","min":1,"max":null}}`,
	`{"headquarters":{"text":"t","city":null,"extra":{}}}`, `{"headquarters":[]}`, `{"n\u0061me":"escaped key"}`,
	`{"unknown":[1,2,{"a":null}],"name":"x"}`, `[1]`, `"x"`, `5`, `true`, `{"name":"x"} x`, `{"name":"x",}`,
	`{"name" "x"}`, `{"name":"x"`, `{`, ``, `{"a":tru}`, `{"a":nul}`, `{"a":1.}`, `{"a":.5}`, `{"a":1e}`,
	`{"a":-01}`, `{"a":"\x"}`, `{"a":"\u12"}`, `{"employee_count":12,"follower_count":-3,"founded_year":1999}`,
	`{"description":"` + strings.Repeat("long ", 100) + `"}`, `{"a":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
}

func TestDecodeRecordJSONMatchesStdlib(t *testing.T) {
	for _, c := range jsonDecodeCases {
		checkAgainstStdlib(t, []byte(c))
	}
	var buf bytes.Buffer
	if err := Generate(&buf, 500, 4, "network.example"); err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		checkAgainstStdlib(t, line)
	}
}

// FuzzDecodeRecordJSON compares decodeRecordJSON with encoding/json.
func FuzzDecodeRecordJSON(f *testing.F) {
	for _, c := range jsonDecodeCases {
		f.Add([]byte(c))
	}
	var buf bytes.Buffer
	_ = Generate(&buf, 6, 4, "network.example")
	for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		f.Add(line)
	}
	f.Fuzz(checkAgainstStdlib)
}

func TestDecodePDLJSON(t *testing.T) {
	row, err := decodePDLJSON([]byte(`{"id":"x","name":"a\"b","founded":1998.0,"size":null,"linkedin_url":"l","extra":{"k":[1]}}`))
	if err != nil || row[pdlName] != `a"b` || row[pdlFounded] != "1998.0" || row[pdlSize] != "" || row[pdlLinkedinURL] != "l" {
		t.Fatalf("got %+v, %v", row, err)
	}
	for _, bad := range []string{`{"founded":true}`, `{"name":{}}`, `{"name":"x"`, `[]`} {
		if _, err := decodePDLJSON([]byte(bad)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

func BenchmarkDecodeRecordJSON(b *testing.B) {
	var buf bytes.Buffer
	_ = Generate(&buf, 100, 4, "network.example")
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	b.Run("custom", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, err := decodeRecordJSON(lines[i%len(lines)]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			var r Record
			if err := json.Unmarshal(lines[i%len(lines)], &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
