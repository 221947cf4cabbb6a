package lancemanifest

import (
	"encoding/binary"
	"fmt"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
)

// MaxManifestSize bounds a manifest file (64 MiB, as for the built-in format).
const MaxManifestSize = 64 << 20

// MaxFragments bounds the fragments of one version and the members of one fragment bitmap.
const MaxFragments = 1 << 20

// trailerLen is the file's trailer: i64 position, u16 major, u16 minor, "LANC".
const trailerLen = 16

// Fragment is one data fragment of a version.
type Fragment struct {
	ID           uint64 `json:"id"`
	PhysicalRows uint64 `json:"physical_rows"` // rows including deleted ones
}

// Segment is one index segment of the index section: one IndexMetadata.
type Segment struct {
	Name      string
	UUID      string   // canonical 8-4-4-4-12 lowercase hex
	Fragments []uint32 // the fragment bitmap, ascending
}

// Manifest is what steward reads of one version.
type Manifest struct {
	Version   uint64
	Fragments []Fragment // in manifest order
	Indices   []Segment  // empty when the version has no index section
}

// FragmentIDs returns the fragment ids, ascending.
func (m Manifest) FragmentIDs() []uint64 {
	out := make([]uint64, len(m.Fragments))
	for i, f := range m.Fragments {
		out[i] = f.ID
	}
	slices.Sort(out)
	return out
}

// Segments returns the segments of the index called name.
func (m Manifest) Segments(name string) []Segment {
	var out []Segment
	for _, s := range m.Indices {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// Decode reads a whole manifest file.
func Decode(b []byte) (Manifest, error) {
	if len(b) > MaxManifestSize {
		return Manifest{}, fmt.Errorf("%w: %d bytes exceed %d", ErrCorrupt, len(b), MaxManifestSize)
	}
	if len(b) < trailerLen || string(b[len(b)-4:]) != "LANC" {
		return Manifest{}, fmt.Errorf("%w: no LANC trailer", ErrCorrupt)
	}
	pos := binary.LittleEndian.Uint64(b[len(b)-trailerLen:])
	msg, err := section(b[:len(b)-trailerLen], pos)
	if err != nil {
		return Manifest{}, fmt.Errorf("manifest message: %w", err)
	}
	m, indexPos, hasIndex, err := decodeManifest(msg)
	if err != nil {
		return Manifest{}, err
	}
	if hasIndex {
		sec, err := section(b[:len(b)-trailerLen], indexPos)
		if err != nil {
			return Manifest{}, fmt.Errorf("index section: %w", err)
		}
		if m.Indices, err = decodeIndexSection(sec); err != nil {
			return Manifest{}, err
		}
	}
	return m, nil
}

// section returns the length-prefixed message at pos of body.
func section(body []byte, pos uint64) ([]byte, error) {
	if pos > uint64(len(body)) || uint64(len(body))-pos < 4 {
		return nil, fmt.Errorf("%w: position %d outside the file (%d bytes)", ErrCorrupt, pos, len(body))
	}
	n := uint64(binary.LittleEndian.Uint32(body[pos:]))
	if n > uint64(len(body))-pos-4 {
		return nil, fmt.Errorf("%w: message of %d bytes at %d runs past the file", ErrCorrupt, n, pos)
	}
	return body[pos+4 : pos+4+n], nil
}

// fields calls fn for every field of message b; fn gets the raw value of a varint field in v
// and the payload of a bytes field in p.
func fields(b []byte, fn func(num protowire.Number, typ protowire.Type, v uint64, p []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %w", ErrCorrupt, protowire.ParseError(n))
		}
		b = b[n:]
		var v uint64
		var p []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			p, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("%w: field %d: %w", ErrCorrupt, num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := fn(num, typ, v, p); err != nil {
			return err
		}
	}
	return nil
}

// Field numbers of protos/table.proto.
const (
	manifestFragments    = 2
	manifestVersion      = 3
	manifestIndexSection = 6
	fragmentID           = 1
	fragmentPhysicalRows = 4
	sectionIndices       = 1
	indexUUID            = 1
	indexName            = 3
	indexBitmap          = 5
	uuidBytes            = 1
)

func decodeManifest(b []byte) (m Manifest, indexPos uint64, hasIndex bool, err error) {
	err = fields(b, func(num protowire.Number, typ protowire.Type, v uint64, p []byte) error {
		switch {
		case num == manifestFragments && typ == protowire.BytesType:
			if len(m.Fragments) >= MaxFragments {
				return fmt.Errorf("%w: more than %d fragments", ErrCorrupt, MaxFragments)
			}
			f, err := decodeFragment(p)
			m.Fragments = append(m.Fragments, f)
			return err
		case num == manifestVersion && typ == protowire.VarintType:
			m.Version = v
		case num == manifestIndexSection && typ == protowire.VarintType:
			indexPos, hasIndex = v, true
		}
		return nil
	})
	return m, indexPos, hasIndex, err
}

func decodeFragment(b []byte) (f Fragment, err error) {
	err = fields(b, func(num protowire.Number, typ protowire.Type, v uint64, _ []byte) error {
		switch {
		case num == fragmentID && typ == protowire.VarintType:
			f.ID = v
		case num == fragmentPhysicalRows && typ == protowire.VarintType:
			f.PhysicalRows = v
		}
		return nil
	})
	return f, err
}

func decodeIndexSection(b []byte) (out []Segment, err error) {
	err = fields(b, func(num protowire.Number, typ protowire.Type, _ uint64, p []byte) error {
		if num != sectionIndices || typ != protowire.BytesType {
			return nil
		}
		if len(out) >= MaxFragments {
			return fmt.Errorf("%w: more than %d index segments", ErrCorrupt, MaxFragments)
		}
		s, err := decodeIndex(p)
		out = append(out, s)
		return err
	})
	return out, err
}

func decodeIndex(b []byte) (s Segment, err error) {
	err = fields(b, func(num protowire.Number, typ protowire.Type, _ uint64, p []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case indexName:
			s.Name = string(p)
		case indexUUID:
			return fields(p, func(num protowire.Number, typ protowire.Type, _ uint64, u []byte) error {
				if num == uuidBytes && typ == protowire.BytesType {
					if len(u) != 16 {
						return fmt.Errorf("%w: index uuid of %d bytes", ErrCorrupt, len(u))
					}
					s.UUID = formatUUID(u)
				}
				return nil
			})
		case indexBitmap:
			var err error
			s.Fragments, err = DecodeRoaring(p)
			return err
		}
		return nil
	})
	return s, err
}

func formatUUID(u []byte) string {
	const hex = "0123456789abcdef"
	out := make([]byte, 0, 36)
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, hex[c>>4], hex[c&15])
	}
	return string(out)
}
