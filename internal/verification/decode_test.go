package verification

import (
	"io"

	"github.com/bulkd/bulkd/internal/apierr"
	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/jobs"
)

// decodeBody is what the family's Decode was: its body read by the
// decoder of every family, with its Form and its function per row.
func decodeBody(f family.Family, r io.Reader, b *jobs.Builder) *apierr.Error {
	_, e := family.Decode(f, r, b)
	return e
}
