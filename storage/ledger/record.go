package ledger

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
)

// On-disk records. A ticket is stored under the key store + 0x00 + object key with the value
//
//	version(1) state(1) ownerKind(1) uvarint(len) ownerID  toKind(1) [uvarint(len) toID uvarint(seq)]
//
// where toKind 0 means "no transfer offered". A transfer pair's acknowledged sequence is stored
// under ownerKind uvarint(len) ownerID (from) followed by the same for to, as a uvarint.
// Credentials never appear in either: names, owners and sequence numbers only.

const recordVersion = 1

// record is a decoded ticket value.
type record struct {
	state uint8
	owner Owner
	to    Owner  // pending transfer receiver; Kind 0 = none
	seq   uint64 // its sequence number
}

func appendOwner(b []byte, o Owner) []byte {
	b = append(b, byte(o.Kind))
	b = binary.AppendUvarint(b, uint64(len(o.ID)))
	return append(b, o.ID...)
}

func encodeRecord(r record) []byte {
	b := make([]byte, 0, 8+len(r.owner.ID)+len(r.to.ID))
	b = append(b, recordVersion, r.state)
	b = appendOwner(b, r.owner)
	if r.to.Kind == 0 {
		return append(b, 0)
	}
	b = appendOwner(b, r.to)
	return binary.AppendUvarint(b, r.seq)
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	// Only the minimal encoding, the one every writer here produces: a key with a padded
	// varint would decode to the name of another key (a pair key re-encoded to delete it
	// would miss it).
	if n != uvarintLen(v) {
		d.fail("non-minimal varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// uvarintLen is the length of v's minimal uvarint encoding.
func uvarintLen(v uint64) int { return max(1, (bits.Len64(v)+6)/7) }

func (d *decoder) owner(kind byte) Owner {
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)) {
		d.fail("truncated owner id")
	}
	if d.err != nil {
		return Owner{}
	}
	o := Owner{Kind: Kind(kind), ID: string(d.b[:n])}
	d.b = d.b[n:]
	if err := o.validate(); err != nil {
		d.fail(err.Error())
	}
	return o
}

func (d *decoder) fail(why string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorrupt, why)
	}
}

// decodeRecord parses a ticket value. It never panics on any input.
func decodeRecord(b []byte) (record, error) {
	d := decoder{b: b}
	if v := d.byte(); d.err == nil && v != recordVersion {
		d.fail(fmt.Sprintf("record version %d", v))
	}
	var r record
	r.state = d.byte()
	if d.err == nil && r.state != stHeld && r.state != stAbandoned {
		d.fail(fmt.Sprintf("state %d", r.state))
	}
	r.owner = d.owner(d.byte())
	if k := d.byte(); k != 0 {
		r.to = d.owner(k)
		r.seq = d.uvarint()
		if d.err == nil && (r.seq == 0 || r.state != stHeld) {
			d.fail("transfer on a ticket that cannot move")
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	return r, d.err
}

func ticketKey(store, key string) []byte {
	b := make([]byte, 0, len(store)+1+len(key))
	b = append(append(append(b, store...), 0), key...)
	return b
}

func splitTicketKey(b []byte) (store, key string, err error) {
	i := bytes.IndexByte(b, 0)
	if i < 0 || i == len(b)-1 {
		return "", "", fmt.Errorf("%w: ticket key without store separator", ErrCorrupt)
	}
	return string(b[:i]), string(b[i+1:]), nil
}

func pairKey(from, to Owner) []byte { return appendOwner(appendOwner(nil, from), to) }

func decodePairKey(b []byte) (from, to Owner, err error) {
	d := decoder{b: b}
	from = d.owner(d.byte())
	to = d.owner(d.byte())
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes in pair key")
	}
	return from, to, d.err
}

func decodeSeq(b []byte) (uint64, error) {
	d := decoder{b: b}
	v := d.uvarint()
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes in sequence")
	}
	return v, d.err
}

func encodeSeq(v uint64) []byte { return binary.AppendUvarint(nil, v) }
