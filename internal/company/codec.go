package company

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Stored record encoding (version 1).
//
// A record is stored as a compact binary value instead of JSON: JSON repeats
// about 250 bytes of field names per record, and decoding 500 JSON records
// costs several milliseconds of the lookup budget, while this format decodes
// in well under a microsecond per record.
//
//	byte      0x01 (format version)
//	u16 BE    length of network_url, then its bytes (0 = null)
//	u16 BE    length of domain, then its bytes (0 = null)
//	uvarint   presence bitmap of the nullable fields below (bit i = field i)
//	fields    present ones only, in bit order: strings as uvarint length +
//	          bytes, integers as zig-zag varints, objects as a presence
//	          byte followed by their present members
//	uvarint   number of specialties, each a string
//	uvarint   number of similar companies, each an object whose
//	          network_url is stored as the length of its common prefix with
//	          the record's own network_url plus the remaining string
//
// network_url and domain come first, with fixed-width lengths, because the
// Put Lua script reads them from the old value to find stale index entries.
const codecVersion = 1

// Presence bits of the top-level nullable fields, in encoding order.
const (
	bitNetworkID = iota
	bitName
	bitDescription
	bitWebsite
	bitEmailDomain
	bitIndustry
	bitCompanySize
	bitEmployeeCount
	bitCompanyType
	bitHeadquarters
	bitFoundedYear
	bitFollowerCount
	numBits
)

// maxKeyLen bounds network_url and domain so their length fits the u16 of
// the header; the spec caps inputs at 2,048 characters anyway.
const maxKeyLen = 1<<16 - 1

var errCorrupt = errors.New("corrupt stored company record")

// encodeRecord appends the stored form of r to dst. r must already have
// been validated by validateForPut.
func encodeRecord(dst []byte, r *Record) []byte {
	dst = append(dst, codecVersion)
	dst = appendU16Str(dst, r.NetworkURL)
	dst = appendU16Str(dst, r.Domain)

	var bits uint64
	set := func(bit int, present bool) {
		if present {
			bits |= 1 << bit
		}
	}
	set(bitNetworkID, r.NetworkID != nil)
	set(bitName, r.Name != nil)
	set(bitDescription, r.Description != nil)
	set(bitWebsite, r.Website != nil)
	set(bitEmailDomain, r.EmailDomain != nil)
	set(bitIndustry, r.Industry != nil)
	set(bitCompanySize, r.CompanySize != nil)
	set(bitEmployeeCount, r.EmployeeCount != nil)
	set(bitCompanyType, r.CompanyType != nil)
	set(bitHeadquarters, r.Headquarters != nil)
	set(bitFoundedYear, r.FoundedYear != nil)
	set(bitFollowerCount, r.FollowerCount != nil)
	dst = binary.AppendUvarint(dst, bits)

	if r.NetworkID != nil {
		dst = binary.AppendVarint(dst, *r.NetworkID)
	}
	dst = appendOptStr(dst, r.Name)
	dst = appendOptStr(dst, r.Description)
	dst = appendOptStr(dst, r.Website)
	dst = appendOptStr(dst, r.EmailDomain)
	dst = appendOptStr(dst, r.Industry)
	if cs := r.CompanySize; cs != nil {
		dst = append(dst, mask(cs.Label != nil, cs.Min != nil, cs.Max != nil))
		dst = appendOptStr(dst, cs.Label)
		dst = appendOptInt(dst, cs.Min)
		dst = appendOptInt(dst, cs.Max)
	}
	dst = appendOptInt(dst, r.EmployeeCount)
	dst = appendOptStr(dst, r.CompanyType)
	if hq := r.Headquarters; hq != nil {
		dst = append(dst, mask(hq.Text != nil, hq.City != nil, hq.Region != nil, hq.Country != nil))
		dst = appendOptStr(dst, hq.Text)
		dst = appendOptStr(dst, hq.City)
		dst = appendOptStr(dst, hq.Region)
		dst = appendOptStr(dst, hq.Country)
	}
	dst = appendOptInt(dst, r.FoundedYear)
	dst = appendOptInt(dst, r.FollowerCount)

	dst = binary.AppendUvarint(dst, uint64(len(r.Specialties)))
	for _, s := range r.Specialties {
		dst = appendStr(dst, s)
	}
	dst = binary.AppendUvarint(dst, uint64(len(r.SimilarCompanies)))
	own := ""
	if r.NetworkURL != nil {
		own = *r.NetworkURL
	}
	for i := range r.SimilarCompanies {
		sc := &r.SimilarCompanies[i]
		dst = append(dst, mask(sc.Name != nil, sc.NetworkURL != nil, sc.Industry != nil, sc.Location != nil))
		dst = appendOptStr(dst, sc.Name)
		if sc.NetworkURL != nil {
			dst = appendSharedPrefix(dst, own, *sc.NetworkURL)
		}
		dst = appendOptStr(dst, sc.Industry)
		dst = appendOptStr(dst, sc.Location)
	}
	return dst
}

func mask(present ...bool) byte {
	var m byte
	for i, p := range present {
		if p {
			m |= 1 << i
		}
	}
	return m
}

func appendU16Str(dst []byte, s *string) []byte {
	if s == nil {
		return append(dst, 0, 0)
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(*s)))
	return append(dst, *s...)
}

func appendStr(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

func appendOptStr(dst []byte, s *string) []byte {
	if s == nil {
		return dst
	}
	return appendStr(dst, *s)
}

// appendSharedPrefix writes s as the length of its common prefix with
// base followed by the rest. Similar companies' network URLs share
// "https://www.<host>/company/" with the record's own URL, so this saves
// about 35 bytes per entry, some 8% of a typical record.
func appendSharedPrefix(dst []byte, base, s string) []byte {
	n := 0
	for n < len(base) && n < len(s) && base[n] == s[n] {
		n++
	}
	dst = binary.AppendUvarint(dst, uint64(n))
	return appendStr(dst, s[n:])
}

func appendOptInt(dst []byte, n *int) []byte {
	if n == nil {
		return dst
	}
	return binary.AppendVarint(dst, int64(*n))
}

// decoder reads a stored value. It works on a string because that is what
// go-redis hands back, and substrings share its memory instead of copying.
type decoder struct {
	s    string
	pos  int
	err  error
	strs strSlab // backing store for *string fields, allocated in bulk
	ints []int   // same for *int fields
}

// decodeRecord parses a stored value. It never panics on corrupt input.
func decodeRecord(s string) (*Record, error) {
	d := decoder{s: s}
	if len(s) == 0 || s[0] != codecVersion {
		return nil, fmt.Errorf("%w: unknown format version", errCorrupt)
	}
	d.pos = 1
	r := &Record{}
	r.NetworkURL = d.u16Str()
	r.Domain = d.u16Str()
	bits := d.uvarint()
	if bits>>numBits != 0 {
		d.fail()
	}
	has := func(bit int) bool { return bits&(1<<bit) != 0 }
	if has(bitNetworkID) {
		id := d.varint()
		r.NetworkID = &id
	}
	r.Name = d.optStr(has(bitName))
	r.Description = d.optStr(has(bitDescription))
	r.Website = d.optStr(has(bitWebsite))
	r.EmailDomain = d.optStr(has(bitEmailDomain))
	r.Industry = d.optStr(has(bitIndustry))
	if has(bitCompanySize) {
		m := d.byte()
		r.CompanySize = &CompanySize{
			Label: d.optStr(m&1 != 0),
			Min:   d.optInt(m&2 != 0),
			Max:   d.optInt(m&4 != 0),
		}
	}
	r.EmployeeCount = d.optInt(has(bitEmployeeCount))
	r.CompanyType = d.optStr(has(bitCompanyType))
	if has(bitHeadquarters) {
		m := d.byte()
		r.Headquarters = &Headquarters{
			Text:    d.optStr(m&1 != 0),
			City:    d.optStr(m&2 != 0),
			Region:  d.optStr(m&4 != 0),
			Country: d.optStr(m&8 != 0),
		}
	}
	r.FoundedYear = d.optInt(has(bitFoundedYear))
	r.FollowerCount = d.optInt(has(bitFollowerCount))

	// Counts are checked against the bytes left (every item takes at least
	// one byte) so corrupt data cannot trigger a huge allocation.
	n := d.count()
	r.Specialties = make([]string, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		r.Specialties = append(r.Specialties, d.str())
	}
	n = d.count()
	r.SimilarCompanies = make([]SimilarCompany, 0, n)
	own := ""
	if r.NetworkURL != nil {
		own = *r.NetworkURL
	}
	for i := 0; i < n && d.err == nil; i++ {
		m := d.byte()
		sc := SimilarCompany{Name: d.optStr(m&1 != 0)}
		if m&2 != 0 {
			sc.NetworkURL = d.sharedPrefix(own)
		}
		sc.Industry = d.optStr(m&4 != 0)
		sc.Location = d.optStr(m&8 != 0)
		r.SimilarCompanies = append(r.SimilarCompanies, sc)
	}
	if d.err == nil && d.pos != len(d.s) {
		d.fail()
	}
	if d.err != nil {
		return nil, d.err
	}
	return r, nil
}

func (d *decoder) fail() {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated or malformed at byte %d", errCorrupt, d.pos)
	}
	d.pos = len(d.s)
}

func (d *decoder) byte() byte {
	if d.err != nil || d.pos >= len(d.s) {
		d.fail()
		return 0
	}
	b := d.s[d.pos]
	d.pos++
	return b
}

func (d *decoder) uvarint() uint64 {
	var x uint64
	for shift := uint(0); shift < 64; shift += 7 {
		b := d.byte()
		if d.err != nil {
			return 0
		}
		if b < 0x80 {
			if shift == 63 && b > 1 {
				d.fail()
				return 0
			}
			return x | uint64(b)<<shift
		}
		x |= uint64(b&0x7f) << shift
	}
	d.fail()
	return 0
}

func (d *decoder) varint() int64 {
	ux := d.uvarint()
	x := int64(ux >> 1)
	if ux&1 != 0 {
		x = ^x
	}
	return x
}

func (d *decoder) count() int {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.s)-d.pos) {
		d.fail()
		return 0
	}
	return int(n)
}

func (d *decoder) take(n uint64) string {
	if d.err != nil || n > uint64(len(d.s)-d.pos) {
		d.fail()
		return ""
	}
	s := d.s[d.pos : d.pos+int(n)]
	d.pos += int(n)
	return s
}

func (d *decoder) str() string { return d.take(d.uvarint()) }

// strSlab hands out *string values carved from a shared array: one
// allocation for many fields. Growing it leaves earlier pointers valid
// (they keep the old array alive).
type strSlab []string

func (s *strSlab) ptr(v string) *string {
	if len(*s) == cap(*s) {
		*s = make([]string, 0, 32)
	}
	*s = append(*s, v)
	return &(*s)[len(*s)-1]
}

// optStr and optInt carve their pointers from slabs: one allocation for
// all fields instead of one each, which halves the cost of decoding a
// record. Growing a slab leaves earlier pointers valid (they keep the old
// array alive).
func (d *decoder) optStr(present bool) *string {
	if !present {
		return nil
	}
	return d.strs.ptr(d.str())
}

func (d *decoder) optInt(present bool) *int {
	if !present {
		return nil
	}
	if len(d.ints) == cap(d.ints) {
		d.ints = make([]int, 0, 8)
	}
	d.ints = append(d.ints, int(d.varint()))
	return &d.ints[len(d.ints)-1]
}

// sharedPrefix reads what appendSharedPrefix wrote.
func (d *decoder) sharedPrefix(base string) *string {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(base)) {
		d.fail()
		return nil
	}
	rest := d.str()
	if n == 0 {
		return d.strs.ptr(rest)
	}
	return d.strs.ptr(base[:n] + rest)
}

func (d *decoder) u16Str() *string {
	if d.pos+2 > len(d.s) {
		d.fail()
		return nil
	}
	n := uint64(d.s[d.pos])<<8 | uint64(d.s[d.pos+1])
	d.pos += 2
	if n == 0 {
		return nil
	}
	return d.strs.ptr(d.take(n))
}
