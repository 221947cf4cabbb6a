package ledger

import (
	"context"
	"fmt"
	"strings"

	"github.com/cba1309c/steward/storage"
)

// Prefix tickets. A ticket whose name ends in "/" is a prefix ticket: it owns every object whose
// key starts with it, for engines whose format names its own files (Lance's _indices/<uuid>/).
// It keeps every promise of a name ticket — reserved before anything under it is written, all or
// nothing and durable (the same journal record), accepted on commit, counted in Stats — and on
// abandon the cleanup worker lists everything under the prefix, deletes it in batches and
// releases the ticket only once a listing comes back empty; a failed listing or delete keeps it
// and is retried like any failed batch. Sweep treats every object under a held prefix as owned.
//
// Ownership is exclusive across the tree: a prefix cannot be reserved over a name or prefix
// another owner holds below it, and no name or prefix can be reserved below another owner's
// prefix.

// IsPrefix reports whether a ticket name is a prefix ticket's (it ends in "/").
func IsPrefix(name string) bool { return strings.HasSuffix(name, "/") }

// validName: an object key, or a prefix (a valid key followed by "/").
func validName(name string) bool {
	if len(name) > MaxKeyLen {
		return false
	}
	if IsPrefix(name) {
		return storage.ValidKey(name[:len(name)-1])
	}
	return storage.ValidKey(name)
}

// maxPrefixRounds bounds the list-and-delete rounds of one prefix cleanup attempt: objects that
// keep appearing under an abandoned prefix (a writer outside custody) fail the attempt, which is
// retried later, instead of holding the cleanup worker.
const maxPrefixRounds = 4

// conflictsLocked reports a name that another owner's tickets overlap: a prefix above name, or
// (for a prefix) a name below it. oid is the reserving owner (exists false: a new owner, so
// everything held is another's). Called with l.mu held.
func (l *Ledger) conflictsLocked(sid uint16, name string, oid uint32, exists bool) bool {
	if l.idx.prefixes[sid] == 0 {
		return false
	}
	other := func(id uint32) bool {
		s := l.idx.slot(id)
		return !exists || s.owner != oid || s.state != stHeld
	}
	if id, ok := l.heldAbove(sid, name); ok && other(id) {
		return true
	}
	if !IsPrefix(name) {
		return false
	}
	// A prefix is rare (one per index build): a scan of the slots is cheaper than keeping an
	// ordered index beside the hash table for it.
	for id := uint32(0); id < l.idx.nslots; id++ {
		s := l.idx.slot(id)
		if s.state != stFree && s.store == sid && strings.HasPrefix(string(l.idx.name(s)), name) && other(id) {
			return true
		}
	}
	return false
}

// heldAbove returns the slot of a prefix ticket strictly above name, if any.
func (l *Ledger) heldAbove(sid uint16, name string) (uint32, bool) {
	if l.idx.prefixes[sid] == 0 {
		return 0, false
	}
	for i := 0; i < len(name)-1; i++ {
		if name[i] == '/' {
			if id, ok := l.idx.lookup(sid, name[:i+1]); ok {
				return id, true
			}
		}
	}
	return 0, false
}

// deletePrefix deletes everything under prefix in the named store, and answers one result for
// the prefix itself: success only once a listing under it came back empty.
func (l *Ledger) deletePrefix(ctx context.Context, store, prefix string) ([]storage.DeleteResult, error) {
	st, err := l.resolveStore(store)
	if err != nil {
		return nil, err
	}
	for round := 0; round < maxPrefixRounds; round++ {
		var keys []string
		for info, err := range st.List(ctx, prefix) {
			if err != nil {
				return nil, fmt.Errorf("list %q: %w", prefix, err)
			}
			if strings.HasPrefix(info.Key, prefix) { // never delete what a store answers outside it
				keys = append(keys, info.Key)
			}
		}
		if len(keys) == 0 {
			return []storage.DeleteResult{{Key: prefix}}, nil
		}
		for len(keys) > 0 {
			n := min(len(keys), l.cfg.BatchSize)
			res := st.DeleteBatch(ctx, keys[:n])
			if len(res) != n {
				return nil, fmt.Errorf("%w: store %q answered %d results for %d keys", storage.ErrUnavailable, store, len(res), n)
			}
			for _, r := range res {
				if r.Err != nil {
					return []storage.DeleteResult{{Key: prefix, Err: r.Err}}, nil
				}
			}
			l.mu.Lock()
			l.stats.prefixObjectsDeleted += uint64(n)
			l.mu.Unlock()
			keys = keys[n:]
		}
	}
	return []storage.DeleteResult{{Key: prefix, Err: fmt.Errorf("%w: objects keep appearing under %q", storage.ErrUnavailable, prefix)}}, nil
}
