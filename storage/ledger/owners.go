package ledger

import (
	"fmt"
	"strings"
)

// Kind says what an owner is.
type Kind uint8

// Owner kinds.
const (
	// Invocation is a worker invocation; Recover settles it through its outcome.
	Invocation Kind = 1
	// HostTxn is a host transaction; it keeps its tickets until its host accepts or abandons.
	HostTxn Kind = 2
	// Sweeper is an orphan sweep's claim on the names it is about to delete.
	Sweeper Kind = 3
)

func (k Kind) String() string {
	switch k {
	case Invocation:
		return "invocation"
	case HostTxn:
		return "host-txn"
	case Sweeper:
		return "sweeper"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Owner holds tickets.
type Owner struct {
	Kind Kind
	ID   string // invocation id or host transaction id; at most MaxOwnerIDLen bytes
}

// MaxOwnerIDLen bounds Owner.ID.
const MaxOwnerIDLen = 256

func (o Owner) String() string { return o.Kind.String() + ":" + o.ID }

func (o Owner) validate() error {
	if o.Kind < Invocation || o.Kind > Sweeper || o.ID == "" || len(o.ID) > MaxOwnerIDLen {
		return fmt.Errorf("%w: owner %v", ErrInvalid, o)
	}
	return nil
}

// ownerRec is one owner with at least one ticket; its tickets form a doubly linked list
// through their slots.
type ownerRec struct {
	owner     Owner
	head      uint32 // first slot+1
	held      uint32
	abandoned uint32
	note      []byte // ReserveNoted's note, journaled under bucketNotes; nil: none
}

// owners gives each live owner a small id so that a slot names it in four bytes.
type owners struct {
	recs []ownerRec
	ids  map[Owner]uint32
	free []uint32
}

func newOwners() owners { return owners{ids: map[Owner]uint32{}} }

func (t *owners) lookup(o Owner) (uint32, bool) {
	id, ok := t.ids[o]
	return id, ok
}

// intern returns o's id, creating the record. The id string is copied so the ledger never
// pins a caller's larger buffer.
func (t *owners) intern(o Owner) uint32 {
	if id, ok := t.ids[o]; ok {
		return id
	}
	o.ID = strings.Clone(o.ID)
	var id uint32
	if n := len(t.free); n > 0 {
		id, t.free = t.free[n-1], t.free[:n-1]
		t.recs[id] = ownerRec{owner: o}
	} else {
		id = uint32(len(t.recs))
		t.recs = append(t.recs, ownerRec{owner: o})
	}
	t.ids[o] = id
	return id
}

func (t *owners) rec(id uint32) *ownerRec { return &t.recs[id] }

// drop forgets an owner without tickets.
func (t *owners) drop(id uint32) {
	delete(t.ids, t.recs[id].owner)
	t.recs[id] = ownerRec{}
	t.free = append(t.free, id)
}

// link puts slot sid at the head of its owner's list.
func link(x *index, r *ownerRec, sid uint32) {
	s := x.slot(sid)
	s.prev, s.next = 0, r.head
	if r.head != 0 {
		x.slot(r.head - 1).prev = sid + 1
	}
	r.head = sid + 1
}

// unlink takes slot sid out of its owner's list.
func unlink(x *index, r *ownerRec, sid uint32) {
	s := x.slot(sid)
	if s.prev != 0 {
		x.slot(s.prev - 1).next = s.next
	} else {
		r.head = s.next
	}
	if s.next != 0 {
		x.slot(s.next - 1).prev = s.prev
	}
	s.prev, s.next = 0, 0
}

// slotsOf lists an owner's slots in the given state.
func slotsOf(x *index, r *ownerRec, state uint8, store uint16, anyStore bool) []uint32 {
	var out []uint32
	for e := r.head; e != 0; e = x.slot(e - 1).next {
		s := x.slot(e - 1)
		if s.state == state && (anyStore || s.store == store) {
			out = append(out, e-1)
		}
	}
	return out
}

// heldBy is the number of names owner oid holds (0 for an owner not interned yet). Called with
// l.mu held.
func (l *Ledger) heldBy(oid uint32, exists bool) int {
	if !exists {
		return 0
	}
	return int(l.own.rec(oid).held)
}
