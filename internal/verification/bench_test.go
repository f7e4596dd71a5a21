package verification

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/bulkd/bulkd/internal/jobs"
)

// BenchmarkDecode100k: the decode of a 100,000-address submission (5,000
// domains), the family's share of POST /v1/bulk.
func BenchmarkDecode100k(b *testing.B) {
	var buf bytes.Buffer
	buf.WriteString(`{"emails":[`)
	for i := 0; i < 100_000; i++ {
		if i > 0 {
			buf.WriteByte(',')
		}
		fmt.Fprintf(&buf, `"user.%d@company-%d.example"`, i, i%5000)
	}
	buf.WriteString("]}")
	body := buf.Bytes()
	fam := New(nil, nil)
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for range b.N {
		bl := jobs.NewBuilder(Name, len(body)/24) // as the handler sizes it
		if e := decodeBody(fam, bytes.NewReader(body), bl); e != nil {
			b.Fatal(e)
		}
	}
}
