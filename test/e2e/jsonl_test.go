package e2e

import (
	"bytes"
	"encoding/json"

	"github.com/bulkd/bulkd/internal/company"
)

func jsonLines(b []byte) []company.Record {
	var out []company.Record
	for _, line := range bytes.Split(b, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var r company.Record
		if json.Unmarshal(line, &r) == nil {
			out = append(out, r)
		}
	}
	return out
}
