package ledger

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/cba1309c/steward/storage"
)

// Defaults for Config.
const (
	DefaultCapacity  = 65536
	DefaultRetryWait = time.Second
	// DefaultDeletesInFlight is Config.DeletesInFlight's default.
	DefaultDeletesInFlight = 2
)

// Config configures a Ledger. The zero value is a memory-only ledger of default capacity whose
// abandoned names wait until a store resolver is given (useful only in tests).
type Config struct {
	// Path is the bbolt journal file, created if missing, with its write-ahead log beside it
	// (WALPath: Path+".wal", 4 MiB). A file that is present but empty, truncated or damaged,
	// or a log that is missing while the journal has had one or is not the journal's own, is
	// refused with a *CorruptError naming it (never started empty).
	// "" keeps the ledger in memory only (tests and benchmarks of the index): nothing survives
	// Close. Default: "".
	Path string
	// Capacity bounds the tickets held, in transit and awaiting deletion. Default: 65,536.
	Capacity int
	// Stores resolves a store name for the cleanup worker's deletes and for Sweep. Results are
	// cached per name. Default: none (every delete fails and is retried).
	Stores func(name string) (storage.Store, error)
	// RetryWait is how long the cleanup worker pauses after a failed delete batch.
	// Default: 1s.
	RetryWait time.Duration
	// BatchSize is the most keys in one delete request. Default and maximum: 1000
	// (storage.MaxDeleteBatch).
	BatchSize int
	// DeletesInFlight is how many delete requests the cleanup worker has out at once (each
	// on other names). Default: 2: a store answers one batch while it reads the next (MinIO
	// here deleted 3000 objects in batches of 500 1.4 times as fast two at a time).
	DeletesInFlight int
	// Logger receives cleanup failures and recovery decisions (names and owners only, never
	// credentials). Default: a null logger.
	Logger hclog.Logger
	// Now is the clock behind retry ages. Default: time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.Capacity <= 0 {
		c.Capacity = DefaultCapacity
	}
	if c.RetryWait <= 0 {
		c.RetryWait = DefaultRetryWait
	}
	if c.BatchSize <= 0 || c.BatchSize > storage.MaxDeleteBatch {
		c.BatchSize = storage.MaxDeleteBatch
	}
	if c.DeletesInFlight <= 0 {
		c.DeletesInFlight = DefaultDeletesInFlight
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Ledger is the ownership ledger. Safe for concurrent use.
type Ledger struct {
	cfg Config
	log hclog.Logger
	j   *journal // nil when memory-only

	mu       sync.Mutex
	closed   bool
	idx      *index
	own      owners
	stores   []string
	storeIDs map[string]uint16
	xfer     transfers
	loaded   map[Owner]struct{} // owners found in the journal, until Recover settles them
	clean    cleanupState
	changed  chan struct{} // closed and replaced when tickets are released or tasks move
	stats    counters

	stop context.CancelFunc
	wg   sync.WaitGroup
}

type counters struct {
	highWater         int
	admissionFailures uint64
	quotaRefusals     uint64
	deleteFailures    uint64
	deleted           uint64

	prefixObjectsDeleted uint64
}

// Open loads the journal at cfg.Path (if any) and starts the cleanup worker, which at once
// resumes deleting the names that were abandoned before a restart.
func Open(ctx context.Context, cfg Config) (*Ledger, error) {
	cfg.setDefaults()
	l := &Ledger{
		cfg: cfg, log: cfg.Logger.Named("ledger"), idx: newIndex(), own: newOwners(),
		storeIDs: map[string]uint16{}, xfer: newTransfers(), loaded: map[Owner]struct{}{},
		changed: make(chan struct{}),
	}
	l.clean.init()
	if cfg.Path != "" {
		j, err := openJournal(cfg.Path, l.log)
		if err != nil {
			return nil, err
		}
		l.j = j
		if err := l.load(); err != nil {
			j.close()
			return nil, corruptFile(cfg.Path, err)
		}
	}
	if err := ctx.Err(); err != nil {
		l.Close()
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.Background())
	l.stop = cancel
	for range l.cfg.DeletesInFlight {
		l.wg.Add(1)
		go l.worker(wctx)
	}
	return l, nil
}

// Close stops the cleanup worker (an in-flight delete is cancelled and its tickets kept),
// commits what the journal has queued and closes it. Tickets survive in the journal.
func (l *Ledger) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	l.stop()
	l.wg.Wait()
	if l.j != nil {
		if err := l.j.close(); err != nil {
			return fmt.Errorf("%w: close: %w", ErrJournal, err)
		}
	}
	return nil
}

// Reserve takes a ticket for each key of store for owner, before the objects are uploaded. A
// key ending in "/" is a prefix ticket (prefix.go): it owns every object under it.
// It is all or nothing: ErrCapacity when the ledger would exceed its capacity, ErrNameOwned
// when another owner (or the cleanup worker) holds one of the names. Keys the owner already
// holds are accepted again (idempotent). When Reserve returns nil the tickets are durable.
func (l *Ledger) Reserve(ctx context.Context, owner Owner, store string, keys []string) error {
	return l.ReserveNoted(ctx, owner, nil, store, keys)
}

// ReserveNoted is Reserve with a note for the owner: opaque bytes (at most MaxNoteLen) that the
// ledger keeps with the owner for as long as it holds a ticket. The note is journaled in the
// same commit as the owner's first ticket and deleted with its last, and Recover hands it to the
// SettleFunc, so what settles an owner after a restart (for an invocation: where it would have
// committed) can never be missing while its tickets exist, nor outlive them. An owner that
// already has a note keeps it; nil adds none.
func (l *Ledger) ReserveNoted(ctx context.Context, owner Owner, note []byte, store string, keys []string) error {
	return l.ReserveWithin(ctx, owner, 0, note, store, keys)
}

// ReserveWithin is ReserveNoted for an owner bounded to quota tickets held at once (its held
// names, offered ones included; abandoned names awaiting deletion do not count): a reservation
// whose new names would take the owner past quota is refused with ErrQuota, all or nothing, and
// counted in Stats.QuotaRefusals. quota <= 0 is no bound. The ledger's capacity applies too, so
// one owner can never take what the others need.
func (l *Ledger) ReserveWithin(ctx context.Context, owner Owner, quota int, note []byte, store string, keys []string) error {
	p, err := l.reserveAsync(ctx, owner, quota, note, store, keys)
	if err != nil {
		return err
	}
	return p.Wait()
}

// Note returns a copy of the owner's note, if it holds tickets and has one.
func (l *Ledger) Note(owner Owner) ([]byte, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	oid, ok := l.own.lookup(owner)
	if !ok || l.own.rec(oid).note == nil {
		return nil, false
	}
	return bytes.Clone(l.own.rec(oid).note), true
}

// ReserveAsync admits the reservation at once (capacity, ownership) and makes it durable in the
// background: the returned Pending's Wait reports when it is on disk, or rolls it back and fails.
// An upload may start before Wait returns as long as the object cannot come into existence
// first (GuardReader holds back the end of the body until then), so the journal's fsync hides
// behind the transfer instead of adding to it.
func (l *Ledger) ReserveAsync(ctx context.Context, owner Owner, store string, keys []string) (*Pending, error) {
	return l.reserveAsync(ctx, owner, 0, nil, store, keys)
}

func (l *Ledger) reserveAsync(ctx context.Context, owner Owner, quota int, note []byte, store string, keys []string) (*Pending, error) {
	if err := checkArgs(ctx, owner, store, keys, false); err != nil {
		return nil, err
	}
	if len(note) > MaxNoteLen {
		return nil, fmt.Errorf("%w: note of %d bytes for %v (max %d)", ErrInvalid, len(note), owner, MaxNoteLen)
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, ErrClosed
	}
	if _, known := l.storeIDs[store]; !known && len(l.stores) == MaxStores {
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: more than %d store names", ErrInvalid, MaxStores)
	}
	sid := l.storeID(store)
	oid, exists := l.own.lookup(owner)
	fresh := 0
	for _, k := range keys {
		if id, ok := l.idx.lookup(sid, k); ok {
			if s := l.idx.slot(id); !exists || s.owner != oid || s.state != stHeld {
				l.mu.Unlock()
				return nil, keyErr("reserve", store, k, ErrNameOwned)
			}
			continue
		}
		if l.conflictsLocked(sid, k, oid, exists) {
			l.mu.Unlock()
			return nil, keyErr("reserve", store, k, ErrNameOwned)
		}
		fresh++
	}
	if held := l.heldBy(oid, exists); quota > 0 && held+fresh > quota {
		l.stats.quotaRefusals++
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: %v holds %d tickets, %d requested, quota %d", ErrQuota, owner, held, fresh, quota)
	}
	if l.idx.count+fresh > l.cfg.Capacity {
		l.stats.admissionFailures++
		used := l.idx.count
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: %d tickets used, %d requested, capacity %d", ErrCapacity, used, fresh, l.cfg.Capacity)
	}
	oid = l.own.intern(owner)
	var ops []jop
	if rec := l.own.rec(oid); note != nil && rec.note == nil {
		rec.note = bytes.Clone(note)
		if l.j != nil {
			ops = append(ops, jop{bucket: bucketNotes, key: appendOwner(nil, owner), val: rec.note})
		}
	}
	var added []uint32
	for _, k := range keys {
		id, ok := l.idx.lookup(sid, k)
		if !ok {
			if id, ok = l.hold(sid, k, oid); !ok {
				l.rollback(oid, added)
				l.mu.Unlock()
				return nil, keyErr("reserve", store, k, ErrCapacity)
			}
			added = append(added, id)
		}
		if l.j != nil {
			ops = append(ops, l.ticketOp(id))
		}
	}
	done := l.submit(ops, true)
	l.mu.Unlock()
	p := &Pending{ready: make(chan struct{})}
	go func() {
		if err := await(done); err != nil {
			l.mu.Lock()
			l.rollback(oid, added)
			l.mu.Unlock()
			p.err = fmt.Errorf("reserve %d names of %s for %v: %w", len(keys), store, owner, err)
		}
		close(p.ready)
	}()
	return p, nil
}

// Pending is a reservation admitted in memory whose journal write may still be in flight.
type Pending struct {
	ready chan struct{}
	err   error
}

// Wait blocks until the reservation is durable (nil) or has been rolled back (the error).
func (p *Pending) Wait() error {
	<-p.ready
	return p.err
}

// GuardReader returns r (size bytes, or -1 if unknown), except that any read that could deliver
// the body's last byte, or its end, waits until p is durable; if the reservation failed, the read
// fails with that error instead, so the upload is aborted and the object never exists. Store
// clients create an object only after its last byte: custody is on disk before the object can be.
// When r is an io.ReadSeeker and io.ReaderAt (bytes.Reader, *os.File, io.SectionReader), so is the
// result, with the same guard on ReadAt: S3 clients use those to hash, retry and upload parts in
// parallel, and hiding them would make a guarded upload slower than a plain one.
func GuardReader(r io.Reader, size int64, p *Pending) io.Reader {
	g := &guarded{r: r, size: size, p: p}
	rs, seeks := r.(io.ReadSeeker)
	ra, readsAt := r.(io.ReaderAt)
	if seeks && readsAt && size >= 0 {
		return &guardedRandom{guarded: g, s: rs, at: ra}
	}
	return g
}

type guarded struct {
	r    io.Reader
	size int64
	pos  int64
	p    *Pending
}

func (g *guarded) Read(b []byte) (int, error) {
	if g.size >= 0 && g.pos+int64(len(b)) >= g.size {
		if err := g.p.Wait(); err != nil {
			return 0, err
		}
	}
	n, err := g.r.Read(b)
	g.pos += int64(n)
	if err == io.EOF {
		if werr := g.p.Wait(); werr != nil {
			return n, werr
		}
	}
	return n, err
}

// guardedRandom adds Seek and ReadAt, guarded the same way.
type guardedRandom struct {
	*guarded
	s  io.Seeker
	at io.ReaderAt
}

func (g *guardedRandom) Seek(offset int64, whence int) (int64, error) {
	n, err := g.s.Seek(offset, whence)
	if err == nil {
		g.pos = n
	}
	return n, err
}

func (g *guardedRandom) ReadAt(b []byte, off int64) (int, error) {
	if off+int64(len(b)) >= g.size {
		if err := g.p.Wait(); err != nil {
			return 0, err
		}
	}
	return g.at.ReadAt(b, off)
}

// hold inserts a held ticket for a name nobody owns. ok is false only when the name arena is
// out of references.
func (l *Ledger) hold(sid uint16, key string, oid uint32) (uint32, bool) {
	id, ok := l.idx.insert(sid, key, oid, stHeld)
	if !ok {
		return 0, false
	}
	rec := l.own.rec(oid)
	link(l.idx, rec, id)
	rec.held++
	l.stats.highWater = max(l.stats.highWater, l.idx.count)
	return id, true
}

// rollback removes tickets a failed reservation added.
func (l *Ledger) rollback(oid uint32, added []uint32) {
	rec := l.own.rec(oid)
	for _, id := range added {
		if s := l.idx.slot(id); s.state == stHeld && s.owner == oid {
			l.xfer.cancel(id)
			unlink(l.idx, rec, id)
			rec.held--
			l.idx.remove(id)
		}
	}
	l.maybeDrop(oid)
}

// Accept releases the owner's tickets for keys of store: the objects are published. keys nil
// means every name the owner holds in store, or in every store when store is "". A key
// without a ticket is skipped (a retried accept succeeds); a key held by someone else, or
// already abandoned, fails the whole call with ErrNotOwned.
//
// The release is journaled with the next group commit, not waited for: if the process dies
// first, the ticket comes back and Recover (or the host) settles it again.
func (l *Ledger) Accept(ctx context.Context, owner Owner, store string, keys []string) error {
	if err := checkArgs(ctx, owner, store, keys, true); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	oid, ids, err := l.targets("accept", owner, store, keys, false)
	if err != nil || len(ids) == 0 {
		return err
	}
	rec := l.own.rec(oid)
	var ops []jop
	for _, id := range ids {
		l.xfer.cancel(id)
		if l.j != nil {
			ops = append(ops, jop{bucket: bucketTickets, key: l.ticketKey(id)})
		}
		unlink(l.idx, rec, id)
		rec.held--
		l.idx.remove(id)
	}
	l.maybeDrop(oid)
	l.submit(ops, false)
	l.notify()
	return nil
}

// Abandon hands the owner's tickets for keys of store to the cleanup worker, which deletes
// the objects and then releases the tickets. keys nil means every name the owner holds in
// store, or in every store when store is "". Keys without a ticket, or already abandoned by
// this owner, are skipped; a key held by someone else fails the whole call with ErrNotOwned.
// The hand-over is durable when Abandon returns nil.
func (l *Ledger) Abandon(ctx context.Context, owner Owner, store string, keys []string) error {
	if err := checkArgs(ctx, owner, store, keys, true); err != nil {
		return err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	oid, ids, err := l.targets("abandon", owner, store, keys, true)
	if err != nil || len(ids) == 0 {
		l.mu.Unlock()
		return err
	}
	done := l.abandonLocked(oid, ids)
	l.mu.Unlock()
	if err := await(done); err != nil {
		// The worker deletes anyway; after a restart the names come back held and are
		// settled (or abandoned) again, which is safe.
		return fmt.Errorf("abandon %d names for %v: %w", len(ids), owner, err)
	}
	return nil
}

// abandonLocked marks held slots abandoned and queues them for deletion, one task per store.
func (l *Ledger) abandonLocked(oid uint32, ids []uint32) <-chan error {
	rec := l.own.rec(oid)
	byStore := map[uint16][]uint32{}
	var ops []jop
	for _, id := range ids {
		l.xfer.cancel(id)
		s := l.idx.slot(id)
		s.state = stAbandoned
		rec.held--
		rec.abandoned++
		byStore[s.store] = append(byStore[s.store], id)
		if l.j != nil {
			ops = append(ops, l.ticketOp(id))
		}
	}
	for st, sids := range byStore {
		l.enqueue(st, sids)
	}
	return l.submit(ops, true)
}

// targets resolves keys (nil: all) to the owner's slots. With skipAbandoned, names the owner
// already abandoned are skipped; otherwise they are ErrNotOwned.
func (l *Ledger) targets(op string, owner Owner, store string, keys []string, skipAbandoned bool) (uint32, []uint32, error) {
	oid, exists := l.own.lookup(owner)
	sid, storeKnown := l.storeIDs[store]
	if keys == nil {
		if !exists || (store != "" && !storeKnown) {
			return 0, nil, nil
		}
		return oid, slotsOf(l.idx, l.own.rec(oid), stHeld, sid, store == ""), nil
	}
	var ids []uint32
	for _, k := range keys {
		if !storeKnown {
			break
		}
		id, ok := l.idx.lookup(sid, k)
		if !ok {
			continue
		}
		s := l.idx.slot(id)
		switch {
		case !exists || s.owner != oid:
			return 0, nil, keyErr(op, store, k, ErrNotOwned)
		case s.state == stAbandoned && skipAbandoned:
			continue
		case s.state != stHeld:
			return 0, nil, keyErr(op, store, k, ErrNotOwned)
		}
		ids = append(ids, id)
	}
	return oid, dedupe(ids), nil
}

func dedupe(ids []uint32) []uint32 {
	if len(ids) < 2 {
		return ids
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	out := ids[:1]
	for _, id := range ids[1:] {
		if id != out[len(out)-1] {
			out = append(out, id)
		}
	}
	return out
}

// maybeDrop forgets an owner with no tickets and no transfer in flight.
func (l *Ledger) maybeDrop(oid uint32) {
	r := l.own.rec(oid)
	if r.held+r.abandoned != 0 || l.xfer.busy(oid) {
		return
	}
	pairs := l.xfer.forget(oid)
	for _, p := range pairs {
		if l.j != nil {
			l.j.submit([]jop{{bucket: bucketTransfers, key: pairKey(l.own.rec(p[0]).owner, l.own.rec(p[1]).owner)}}, false)
		}
	}
	delete(l.loaded, r.owner)
	if r.note != nil && l.j != nil {
		// Deleted with the last ticket, in the same (unwaited) commit as its release: a note
		// that survives a crash without tickets is dropped at the next load.
		l.j.submit([]jop{{bucket: bucketNotes, key: appendOwner(nil, r.owner)}}, false)
	}
	l.own.drop(oid)
	// A partner left without tickets (a receiver that never got anything) goes too.
	for _, p := range pairs {
		for _, other := range p {
			if other != oid && l.own.rec(other).owner.Kind != 0 {
				l.maybeDrop(other)
			}
		}
	}
}

// storeID interns a store name.
func (l *Ledger) storeID(name string) uint16 {
	if id, ok := l.storeIDs[name]; ok {
		return id
	}
	id := uint16(len(l.stores))
	name = strings.Clone(name)
	l.stores = append(l.stores, name)
	l.storeIDs[name] = id
	return id
}

// MaxStoreName bounds a store name in bytes.
const MaxStoreName = 255

// MaxStores bounds the distinct store names a ledger tracks.
const MaxStores = 1 << 16

// MaxNoteLen bounds an owner's note (ReserveNoted).
const MaxNoteLen = 4096

func (l *Ledger) ticketKey(id uint32) []byte {
	s := l.idx.slot(id)
	return ticketKey(l.stores[s.store], string(l.idx.name(s)))
}

// ticketOp is the journal put for a slot's current state.
func (l *Ledger) ticketOp(id uint32) jop {
	s := l.idx.slot(id)
	r := record{state: s.state, owner: l.own.rec(s.owner).owner}
	if o, ok := l.xfer.offerOf(id); ok {
		r.to, r.seq = l.own.rec(o.pair.to).owner, o.seq
	}
	return jop{bucket: bucketTickets, key: l.ticketKey(id), val: encodeRecord(r)}
}

func (l *Ledger) submit(ops []jop, wait bool) <-chan error {
	if l.j == nil || (len(ops) == 0 && !wait) {
		return nil
	}
	return l.j.submit(ops, wait)
}

func await(done <-chan error) error {
	if done == nil {
		return nil
	}
	return <-done
}

// notify wakes WaitIdle, Sweep and other watchers.
func (l *Ledger) notify() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// checkArgs validates a call's arguments. With allStores, store may be "" when keys is nil
// (the call then covers every store).
func checkArgs(ctx context.Context, owner Owner, store string, keys []string, allStores bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := owner.validate(); err != nil {
		return err
	}
	if store == "" && allStores && keys == nil {
		return nil
	}
	if store == "" || len(store) > MaxStoreName || strings.IndexByte(store, 0) >= 0 {
		return fmt.Errorf("%w: store name %q", ErrInvalid, store)
	}
	for _, k := range keys {
		if !validName(k) {
			return keyErr("check", store, k, ErrInvalid)
		}
	}
	return nil
}
