package jobs

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
)

// Row is one submitted row as stored in the row map.
type Row struct {
	// Echo is what the family needs to echo the row back (its own encoding).
	Echo string `json:"e"`
	// Index is the distinct input the row points at; -1 for an invalid row.
	Index int32 `json:"i"`
	// First is set on the first row of each distinct input: it carries the
	// charge, its repeats carry 0.
	First bool `json:"f,omitempty"`
	// Reason says why an invalid row was skipped.
	Reason string `json:"r,omitempty"`
}

// Input is one distinct input of a shard.
type Input struct {
	// Payload is the canonical input the family's answerer reads.
	Payload string `json:"p"`
	// Rows is how many submitted rows point at this input; answering it
	// answers all of them.
	Rows int64 `json:"m"`
}

// Builder accumulates a submission's rows in order, deduplicating them by
// key. It holds one small struct per row and one per distinct input, never
// the request body.
type Builder struct {
	Family string
	// ID, when set, is the job's id (an Idempotency-Key's claim chose it
	// and recorded it before the charge, so that a retry after a crash
	// finds the job); otherwise Submit makes one.
	ID      string
	rows    []Row
	inputs  []Input
	index   map[string]int32
	invalid int64
	// DropDuplicates keeps only the first row of each distinct input in the
	// row map (bulk lookup counts and returns unique rows only).
	DropDuplicates bool
	// WebhookURL, when set, is where the job's transitions are announced
	// (the submission's webhook_url, checked by the API).
	WebhookURL string
	// IdemKey, when set, is the Redis key of the Idempotency-Key record
	// that replays this submission's answer: deleting the job deletes it
	// too (delete.go), or a retry with the key would answer with a job
	// that no longer exists.
	IdemKey string

	// EchoTag is how many bytes at the start of every echo are the
	// family's own tag, not the submitted value (company enrichment: 1,
	// which field the value came from): the cap of invalid rows' echoes
	// keeps them and counts only what follows (AddInvalid).
	EchoTag int

	// suppressed are the distinct inputs answered at submission because
	// they name a suppressed person (Suppress), with that answer.
	suppressed     map[int32]Answer
	suppressedRows int64

	// enc is the encoded row map and inputs (encode), kept so that
	// measuring them and storing them encode once.
	enc *encoded
}

// encoded is a submission as it is written to Redis: the row map's
// chunks and the inputs' shards.
type encoded struct {
	shardSize    int
	rows, shards [][]byte
	bytes        int64 // of both
}

// encode returns the row map and the inputs in shards of shardSize,
// encoding them on first use.
func (b *Builder) encode(shardSize int) (*encoded, error) {
	if b.enc != nil && b.enc.shardSize == shardSize {
		return b.enc, nil
	}
	rows, err := b.rowChunks()
	if err != nil {
		return nil, err
	}
	shards, err := b.shardChunks(shardSize)
	if err != nil {
		return nil, err
	}
	enc := &encoded{shardSize: shardSize, rows: rows, shards: shards}
	for _, part := range [][][]byte{rows, shards} {
		for _, c := range part {
			enc.bytes += int64(len(c))
		}
	}
	b.enc = enc
	return enc, nil
}

// NewBuilder starts a submission of a family; sizeHint is the expected row
// count (0 if unknown).
func NewBuilder(family string, sizeHint int) *Builder {
	return &Builder{Family: family, rows: make([]Row, 0, sizeHint), index: make(map[string]int32, sizeHint)}
}

// AddValid adds a row whose dedupe key is key and whose canonical input is
// payload. Rows with equal keys are one distinct input.
func (b *Builder) AddValid(echo, key, payload string) {
	if i, ok := b.index[key]; ok {
		// Rows counts the rows of the row map that point at the input:
		// a dropped duplicate is not one of them (rows_processed must
		// end at total_rows).
		if !b.DropDuplicates {
			b.inputs[i].Rows++
			b.rows = append(b.rows, Row{Echo: echo, Index: i})
		}
		return
	}
	i := int32(len(b.inputs))
	b.index[key] = i
	b.inputs = append(b.inputs, Input{Payload: payload, Rows: 1})
	b.rows = append(b.rows, Row{Echo: echo, Index: i, First: true})
}

// MaxInvalidEcho is the most characters of an invalid row's echo that
// are stored (docs/security.md): an invalid row costs nothing, and its
// echo is kept for the whole retention, so 30,000 invalid rows of 2,048
// characters stored about 63 MB for the one credit of a single valid row.
// A longer echo is stored as its first MaxInvalidEcho characters and
// InvalidEchoMarker, and the row's reason says how long the value was
// (kept short: it is stored per row too).
const MaxInvalidEcho = 256

// InvalidEchoMarker ends an invalid row's echo that was cut.
const InvalidEchoMarker = "…"

// AddInvalid adds a row skipped as invalid. Its echo after the family's
// tag (EchoTag) must be a plain string, because one over MaxInvalidEcho
// characters is cut (CapEcho): every family's invalid rows get the same
// cap here, in the engine.
func (b *Builder) AddInvalid(echo, reason string) {
	b.invalid++
	if tag := min(b.EchoTag, len(echo)); len(echo)-tag > MaxInvalidEcho {
		if capped, n, cut := CapEcho(echo[tag:]); cut {
			echo = echo[:tag] + capped
			reason += fmt.Sprintf(" (value cut from %d characters)", n)
		}
	}
	b.rows = append(b.rows, Row{Echo: echo, Index: -1, Reason: reason})
}

// CapEcho cuts an echo longer than MaxInvalidEcho characters (runes) to
// that many and InvalidEchoMarker; it returns the echo, its length in
// characters when cut, and whether it was.
func CapEcho(echo string) (string, int, bool) {
	if len(echo) <= MaxInvalidEcho { // bytes >= runes: short enough
		return echo, 0, false
	}
	n, cut := 0, -1
	for i := range echo {
		if n == MaxInvalidEcho {
			cut = i
		}
		n++
	}
	if cut < 0 {
		return echo, 0, false
	}
	return echo[:cut] + InvalidEchoMarker, n, true
}

// Payloads calls f with each distinct input's index and payload.
func (b *Builder) Payloads(f func(i int, payload string)) {
	for i := range b.inputs {
		f(i, b.inputs[i].Payload)
	}
}

// Suppress answers the distinct inputs idx at submission with a: they name
// a person on the suppression list (docs/privacy.md). They are not
// charged and never processed, and neither their payload nor the echo of
// any row pointing at them is stored.
func (b *Builder) Suppress(idx []int, a Answer) {
	if len(idx) == 0 {
		return
	}
	if b.suppressed == nil {
		b.suppressed = make(map[int32]Answer, len(idx))
	}
	for _, i := range idx {
		if _, ok := b.suppressed[int32(i)]; ok {
			continue
		}
		b.suppressed[int32(i)] = a
		b.inputs[i].Payload = ""
		b.suppressedRows += b.inputs[i].Rows
	}
	for r := range b.rows {
		if _, ok := b.suppressed[b.rows[r].Index]; ok && b.rows[r].Index >= 0 {
			b.rows[r].Echo = ""
		}
	}
	b.enc = nil // encoded before: encode again
}

// Suppressed is how many distinct inputs Suppress answered.
func (b *Builder) Suppressed() int { return len(b.suppressed) }

// Rows is the number of rows in the row map.
func (b *Builder) Rows() int { return len(b.rows) }

// Invalid is the number of invalid rows.
func (b *Builder) Invalid() int64 { return b.invalid }

// Distinct is the number of distinct valid inputs.
func (b *Builder) Distinct() int { return len(b.inputs) }

// rowChunks encodes the row map in RowChunk-sized chunks.
func (b *Builder) rowChunks() ([][]byte, error) {
	n := (len(b.rows) + RowChunk - 1) / RowChunk
	out := make([][]byte, 0, n)
	for c := 0; c < n; c++ {
		end := min((c+1)*RowChunk, len(b.rows))
		out = append(out, encodeRows(b.rows[c*RowChunk:end]))
	}
	return out, nil
}

// encodeRows writes rows in a compact binary form that a results page
// decodes in microseconds: per row uvarint(index+1) (0 = invalid), a flags
// byte (1 = first), then the echo and the reason, each uvarint length +
// bytes. Echoes are arbitrary client strings, so nothing is delimited.
func encodeRows(rows []Row) []byte {
	size := 0
	for i := range rows {
		size += 12 + len(rows[i].Echo) + len(rows[i].Reason)
	}
	buf := make([]byte, 0, size)
	for _, r := range rows {
		buf = binary.AppendUvarint(buf, uint64(int64(r.Index)+1))
		var flags byte
		if r.First {
			flags = 1
		}
		buf = append(buf, flags)
		buf = binary.AppendUvarint(buf, uint64(len(r.Echo)))
		buf = append(buf, r.Echo...)
		buf = binary.AppendUvarint(buf, uint64(len(r.Reason)))
		buf = append(buf, r.Reason...)
	}
	return buf
}

// decodeRows reads what encodeRows wrote.
func decodeRows(b []byte) ([]Row, error) {
	rows := make([]Row, 0, RowChunk)
	for len(b) > 0 {
		idx, n := binary.Uvarint(b)
		if n <= 0 || len(b) < n+1 {
			return nil, errors.New("corrupt row chunk")
		}
		r := Row{Index: int32(int64(idx) - 1), First: b[n] == 1}
		b = b[n+1:]
		var err error
		if r.Echo, b, err = takeString(b); err != nil {
			return nil, err
		}
		if r.Reason, b, err = takeString(b); err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	return rows, nil
}

func takeString(b []byte) (string, []byte, error) {
	l, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < l {
		return "", nil, errors.New("corrupt row chunk")
	}
	return string(b[n : n+int(l)]), b[n+int(l):], nil
}

// shardChunks encodes the distinct inputs in shards of size.
func (b *Builder) shardChunks(size int) ([][]byte, error) {
	n := (len(b.inputs) + size - 1) / size
	out := make([][]byte, 0, n)
	for s := 0; s < n; s++ {
		end := min((s+1)*size, len(b.inputs))
		blob, err := json.Marshal(b.inputs[s*size : end])
		if err != nil {
			return nil, fmt.Errorf("encode inputs: %w", err)
		}
		out = append(out, blob)
	}
	return out, nil
}

// GroupInputs reorders the distinct inputs so that inputs with the same
// group key are next to each other (groups in order of first appearance),
// and remaps the rows to match. Shards are contiguous runs of inputs, so a
// family whose work is cheaper per group (email verification: one SMTP
// session per mail domain) calls it once the body is read; a group then
// spans at most two shards. Rows keep their submission order.
func (b *Builder) GroupInputs(key func(payload string) string) {
	order := map[string]int32{}
	groups := make([]int32, len(b.inputs))
	for i, in := range b.inputs {
		k := key(in.Payload)
		g, ok := order[k]
		if !ok {
			g = int32(len(order))
			order[k] = g
		}
		groups[i] = g
	}
	b.GroupBy(groups, len(order))
}

// GroupBy is GroupInputs with each distinct input's group given: groups[i]
// is input i's (inputs as Distinct counts them), numbered from 0 to n-1
// in order of first appearance.
func (b *Builder) GroupBy(groups []int32, n int) {
	if n <= 1 {
		return
	}
	// Counting sort by group: stable, O(n).
	start := make([]int, n+1)
	for _, g := range groups {
		start[g+1]++
	}
	for g := 1; g < len(start); g++ {
		start[g] += start[g-1]
	}
	newIdx := make([]int32, len(b.inputs))
	inputs := make([]Input, len(b.inputs))
	for i, g := range groups {
		newIdx[i] = int32(start[g])
		inputs[start[g]] = b.inputs[i]
		start[g]++
	}
	b.inputs = inputs
	for i := range b.rows {
		if b.rows[i].Index >= 0 {
			b.rows[i].Index = newIdx[b.rows[i].Index]
		}
	}
	for k, i := range b.index {
		b.index[k] = newIdx[i]
	}
}
