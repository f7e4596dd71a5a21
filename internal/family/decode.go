package family

import (
	"io"

	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/jsonbody"
)

// Decode reads a submission body of f into b: its Form read by the one
// decoder of every family, with f's function per row (jsonbody.Decode).
// A returned error is the 4xx to answer; nothing has been charged then.
func Decode(f Family, body io.Reader, b *jobs.Builder) (jsonbody.Submission, *apierr.Error) {
	return jsonbody.Decode(f.Form(), f.Rows(), body, b)
}
