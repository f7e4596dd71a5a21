// Package company holds bulkd's company data set.
//
//   - Record is one company. Its JSON form is exactly the data fields of a
//     company result row (SPEC 2.4, nested objects per SPEC 2.6), so the job
//     engine can embed it in the row.
//   - Store keeps records in Redis and answers batch lookups by canonical
//     network URL (ByNetworkURL) and by the company's own website domain
//     (ByDomain, never its email domain). The key layout is described in
//     store.go; values use the compact binary encoding in codec.go.
//   - Import streams a file into a Store: bulkd's own JSONL (one Record per
//     line), or the People Data Labs free company dataset as NDJSON or as
//     its backslash-escaped CSV. Bad lines are counted and skipped; imports
//     are idempotent, and a company whose network URL or domain changed
//     loses its old index entries.
//   - Generate writes a deterministic, clearly fictional sample data set
//     whose first records (Northwind Traders, Contoso Analytics, Fabrikam
//     Robotics, Tailspin Toys) documentation can rely on.
//
// The package never normalizes lookup inputs itself: callers pass canonical
// network URLs and domains produced by a Normalizer (the real one is
// internal/company/normalize), so the rules for "the same input written
// differently" (SPEC 2.5 rule 3) live in exactly one place.
package company
