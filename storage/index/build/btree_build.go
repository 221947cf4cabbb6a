package build

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync/atomic"

	"github.com/cba1309c/steward/storage/index"
)

// DefaultMemoryBudget bounds the memory of a BTREE build when BuildOptions.MemoryBudget is 0.
const DefaultMemoryBudget = 256 << 20

// DefaultRunEntries is the number of pairs sorted as one run when BuildOptions.RunEntries is 0.
const DefaultRunEntries = 1 << 20

// DefaultStringRunEntries is DefaultRunEntries for string keys: a string run holds its arena
// twice while it sorts (and the next run fills a third), so smaller runs leave the budget to
// the packed runs.
const DefaultStringRunEntries = 1 << 19

// BTreeBuilder turns an unsorted stream of keys into a BTREE segment in bounded memory.
//
// Keys are collected in runs of RunEntries pairs. Each full run is processed on a background
// goroutine while the caller decodes and adds the next one, so input and sorting share two
// cores. Numbers (as order-preserving uint64 encodings) are split into key-range buckets,
// one pass per run, and Finish radix-sorts one bucket of all runs at a time, in cache, on
// every core (see bucket.go, finish.go); strings are moved into key ranges of their leading bytes (the same ranges for
// every run), each range is sorted in cache, and the run is packed front-coded range by range
// (see memRun.sortStrings); Finish sorts one range of all runs at a time, on every core, and
// writes the pages in order (see finish.go). String keys that are all short over a small
// alphabet (hex digests, codes, dates) are coded into one uint64 each and built as numbers
// are (see KeyCode). Input already in order (an id column) is
// recognised in O(n) and not sorted. Runs stay in memory while they fit MemoryBudget; past
// it, the runs held are sorted into one spill file in TempDir, and Finish merges spill files
// with what is in memory. The segment is written as it is merged.
type BTreeBuilder[K index.Key] struct {
	opts    BuildOptions
	str     bool
	cur     *memRun
	runs    []*memRun     // sorted runs in memory (owned by the background sort while pending)
	held    int64         // bytes in runs
	dataCap int           // string arena to allocate for the next run
	buckets *bucketFunc   // numeric (or coded) keys: fixed by the first run
	ranges  *stringRanges // string keys not coded: fixed by the first run (or the one ending the code)
	// code: the string keys are coded as numbers (see KeyCode), from the first run until a
	// run's sort meets a key it cannot code; that sort leaves the ranges of that run in
	// uncoded for the filling side to take once it waited for the sort (see uncode). keyed:
	// the first run was sealed. noCode (tests) keeps every string build on ranges.
	code          *index.KeyCode
	uncoded       *stringRanges
	keyed, noCode bool
	// fillCode is code as the filling side holds it: the runs after the first are coded as
	// they fill, straight from the caller's bytes (no arena, and the coding is done by the
	// goroutine that reads the column rather than the sort's), until a key does not fit (see
	// addCoded) or the sort ended the code.
	fillCode *index.KeyCode
	// chunkEntries: a string Finish's work unit, in pairs (0: see finishStrings); tests make
	// it small.
	chunkEntries int
	// ascending: row ids ascend within and across all runs so far.
	ascending bool
	lastID    uint64
	spills    []*os.File
	scratch   sortScratch
	pending   chan error // result of the in-flight background sort, if any
	// recycled is the fill arena of the last string run the background sort packed: the next
	// run fills it again, so a build keeps two arenas in rotation instead of one per run.
	recycled, reuse fillArena
	stats           BuildStats
	closed          bool
}

// BuildStats describes a finished (or failed) BTREE build.
type BuildStats struct {
	// Runs is the number of sorted runs; Spills the number of spill files written.
	Runs, Spills int
	// PeakBytes is the most memory the builder held at once in runs and sort scratch.
	PeakBytes int64
	// SpilledBytes is the size of all spill files.
	SpilledBytes int64
}

// NewBTreeBuilder returns an empty builder.
func NewBTreeBuilder[K index.Key](opts BuildOptions) *BTreeBuilder[K] {
	str := index.KeyTypeOf[K]() == index.KeyString
	if opts.RunEntries <= 0 {
		opts.RunEntries = DefaultRunEntries
		if str {
			opts.RunEntries = DefaultStringRunEntries
		}
	}
	if opts.MemoryBudget <= 0 {
		opts.MemoryBudget = DefaultMemoryBudget
	}
	return &BTreeBuilder[K]{opts: opts, str: str, ascending: true}
}

// Stats reports the build so far. Call it after Finish for the whole build.
func (b *BTreeBuilder[K]) Stats() BuildStats { return b.stats }

// Add records keys[i] at row id firstRowID+i.
func (b *BTreeBuilder[K]) Add(keys []K, firstRowID uint64) error {
	if b.closed {
		return errClosed
	}
	for len(keys) > 0 {
		if b.cur == nil {
			b.cur = b.newRun()
		}
		n := min(len(keys), b.opts.RunEntries-b.cur.n)
		if ks, ok := any(keys[:n]).([]string); !ok || !b.addCoded(n, firstRowID, func(dst []uint64) bool { return b.fillCode.EncodeStrings(dst, ks) }) {
			addToRun(b.cur, keys[:n], firstRowID)
			b.noteRanges()
		}
		keys, firstRowID = keys[n:], firstRowID+uint64(n)
		// A run of long strings is sealed early: its arena must fit uint32 offsets and a
		// fraction of the budget.
		if b.cur.n == b.opts.RunEntries || int64(len(b.cur.data)) >= min(maxArena/2, b.opts.MemoryBudget/8) {
			if err := b.seal(); err != nil {
				return err
			}
		}
	}
	return nil
}

// AddStrings records string keys without a Go string per key: key i is
// data[offs[i]:offs[i+1]] at row id firstRowID+i (len(offs) keys + 1 offsets, as a Parquet
// page's byte-array values come). The bytes are copied into the build's arena, so data may be
// reused after the call. Only for a BTreeBuilder[string].
func (b *BTreeBuilder[K]) AddStrings(data []byte, offs []uint32, firstRowID uint64) error {
	if b.closed {
		return errClosed
	}
	if !b.str {
		return errors.New("index: AddStrings on a builder of numeric keys")
	}
	if err := index.CheckStringOffsets(data, offs); err != nil {
		return fmt.Errorf("index: AddStrings: %w", err)
	}
	for n := len(offs) - 1; n > 0; {
		if b.cur == nil {
			if b.dataCap == 0 {
				// The first run: its arena sized after this batch's keys, instead of grown
				// from nothing by doubling (16 MB of copies for 8 MB of hex digests).
				per := int64(offs[n]-offs[0])/int64(n) + 1
				b.dataCap = int(min(per*int64(b.opts.RunEntries)*17/16, maxArena/2, b.opts.MemoryBudget/8))
			}
			b.cur = b.newRun()
		}
		take := min(n, b.opts.RunEntries-b.cur.n)
		if !b.addCoded(take, firstRowID, func(dst []uint64) bool { return b.fillCode.EncodeBytes(dst, data, offs[:take+1]) }) {
			addBytesToRun(b.cur, data, offs[:take+1], firstRowID)
			b.noteRanges()
		}
		offs, firstRowID, n = offs[take:], firstRowID+uint64(take), n-take
		if b.cur.n == b.opts.RunEntries || int64(len(b.cur.data)) >= min(maxArena/2, b.opts.MemoryBudget/8) {
			if err := b.seal(); err != nil {
				return err
			}
		}
	}
	return nil
}

// addCoded adds n keys at row ids first, first+1, ... to the run being filled when it is a
// coded one (encode codes them into dst, reporting whether they all fit), and reports whether
// it did. A key that does not fit ends coding as the runs fill: the run's keys so far are
// spelled out into its arena, the rest of the build fills string runs, and the run's sort
// ends the build's code (encodeRun meets the same key: see uncode).
func (b *BTreeBuilder[K]) addCoded(n int, first uint64, encode func(dst []uint64) bool) bool {
	r := b.cur
	if !r.coded {
		return false
	}
	at := len(r.keys)
	if encode(r.extend(n)) {
		r.addIDs(n, first)
		return true
	}
	r.keys = r.keys[:at]
	r.spellOut(b.fillCode)
	b.fillCode = nil
	return false
}

// noteRanges records the range of each string key added to the run being filled since the
// last call, once the ranges are known (from the first run on): the goroutine that reads the
// column has time for it while the run before is packed.
func (b *BTreeBuilder[K]) noteRanges() {
	r := b.cur
	if b.ranges == nil {
		return
	}
	for i := len(r.rid); i < r.n; i++ {
		r.rid = append(r.rid, uint16(b.ranges.of(r.data[r.offs[i]:r.offs[i+1]])))
	}
}

// fillArena is a string run's fill-time buffers, kept for the next run.
type fillArena struct {
	data []byte
	rid  []uint16
	offs []uint32
	keys []uint64 // a numeric run's keys, once they were packed (see deltaKeys)
}

// newRun starts the next run, in a recycled arena when one is free.
func (b *BTreeBuilder[K]) newRun() *memRun {
	coded := b.fillCode != nil
	r := newRun(b.str && !coded, b.opts.RunEntries, b.dataCap, b.reuse)
	r.coded = coded
	b.reuse = fillArena{}
	return r
}

// seal hands the run being filled to a background sort, after the previous one is done.
func (b *BTreeBuilder[K]) seal() error {
	if err := b.wait(); err != nil {
		return err
	}
	// The finished sort packed its run: its arena is free for the run that starts next.
	b.reuse, b.recycled = b.recycled, fillArena{}
	r := b.cur
	b.cur = nil
	if !r.coded {
		b.dataCap = len(r.data) + len(r.data)/16 // the next run is likely alike
	}
	if b.str && !b.keyed {
		// Fixed here, before the sort starts, so that the runs filled from now on can
		// record their ranges as they fill (noteRanges) without racing the sort.
		b.keyed = true
		if !b.noCode {
			b.code = newKeyCode(r)
			b.fillCode = b.code
		}
		if b.code == nil {
			b.ranges = newStringRanges(r)
		}
	}
	b.pending = make(chan error, 1)
	go func() { b.pending <- b.sortRun(r) }()
	return nil
}

func (b *BTreeBuilder[K]) wait() error {
	if b.pending == nil {
		return nil
	}
	err := <-b.pending
	b.pending = nil
	if b.ranges == nil {
		b.ranges = b.uncoded // nil, unless the sort ended the key code
	}
	if b.code == nil {
		b.fillCode = nil
	}
	return err
}

// sortRun sorts r and keeps it, spilling the runs held if they outgrow the budget. The run
// being filled meanwhile is charged at r's size.
func (b *BTreeBuilder[K]) sortRun(r *memRun) error {
	if len(b.runs)+b.stats.Spills > 0 && r.firstID <= b.lastID || !r.idsAscending {
		b.ascending = false
	}
	b.lastID = r.lastID
	filling := r.bytes() // what the run being filled meanwhile grows to, about
	numeric := !b.str || r.coded
	if b.code != nil && !r.coded {
		keys, ok := encodeRun(b.code, r, nil)
		if ok {
			b.recycled = fillArena{data: r.data[:0], offs: r.offs[:1], rid: r.rid[:0]}
			r.keys, r.data, r.offs, r.rid, numeric = keys, nil, nil, nil, true
		} else if err := b.uncode(r); err != nil {
			return err
		}
	}
	var sorted bool
	var or uint64
	if numeric && r.idsAscending {
		sorted, or = sortedDeltas(r.keys)
	}
	switch {
	case !numeric:
		arena := fillArena{data: r.data[:0], offs: r.offs[:1], rid: r.rid[:0]}
		r.sortStrings(&b.scratch, b.cutBy())
		b.recycled = arena
	case r.idsAscending && sorted:
		r.sorted = true // an id column: kept as it is, merged at one compare a pair
		if r.deltas = packDeltas(r.keys, or); r.deltas != nil {
			b.recycled.keys, r.keys = r.keys[:0], nil
		}
	default:
		if b.buckets == nil {
			f := newBucketFunc(r.keys)
			b.buckets = &f
		}
		r.partition(*b.buckets, &b.scratch)
	}
	b.runs = append(b.runs, r)
	b.held += r.bytes()
	b.stats.Runs++
	scratch := b.scratch.bytes() + int64(cap(b.recycled.data)+4*cap(b.recycled.offs)+8*cap(b.recycled.keys))
	b.stats.PeakBytes = max(b.stats.PeakBytes, b.held+filling+scratch)
	if b.held+filling+scratch <= b.opts.MemoryBudget {
		return nil
	}
	return b.spillRuns()
}

// cutBy is the ranges of the build's string runs, for its background sort: those the filling
// side holds, or those the sort that ended the key code left for it (see uncode).
func (b *BTreeBuilder[K]) cutBy() *stringRanges {
	if b.ranges != nil {
		return b.ranges
	}
	return b.uncoded
}

// uncode ends the build's key code at run r, which holds a key the code cannot take: the coded
// runs held are spilled (spelled out), and r and every run after it are string runs, cut by
// the ranges of r. Rare (the first run sets the code: a later one must bring a byte it never
// held, or a longer key): it costs one spill.
func (b *BTreeBuilder[K]) uncode(r *memRun) error {
	if len(b.runs) > 0 {
		if err := b.spillRuns(); err != nil {
			return err
		}
	}
	b.code, b.uncoded = nil, newStringRanges(r)
	return nil
}

// spillRuns merges every run held in memory into one spill file and lets them go.
func (b *BTreeBuilder[K]) spillRuns() error {
	f, err := os.CreateTemp(b.opts.TempDir, "steward-btree-run-*")
	if err != nil {
		return err
	}
	b.spills = append(b.spills, f)
	w := bufio.NewWriterSize(f, 1<<20)
	if b.str && b.code == nil {
		err = spillStrings(w, b.runs, b.cutBy().n)
	} else {
		var rec []byte
		err = merge(b.memSources(), mergeBlock, func(es []entry) error {
			if b.code != nil {
				rec = appendCodedSpilled(b.code, rec[:0], es)
			} else {
				rec = appendSpilled(rec[:0], es, false)
			}
			_, err := w.Write(rec)
			return err
		})
	}
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		return err
	}
	size, err := f.Seek(0, io.SeekCurrent)
	b.stats.Spills++
	b.stats.SpilledBytes += size
	b.runs, b.held = nil, 0
	return err
}

// memSources yields the numeric runs in memory as sorted sources: one per run that was in
// order, one for all bucketed runs. (String runs are written range by range: spillStrings.)
func (b *BTreeBuilder[K]) memSources() []source {
	if len(b.runs) == 0 {
		return nil
	}
	var srcs []source
	var bucketed []*memRun
	for _, r := range b.runs {
		switch {
		case r.sorted:
			srcs = append(srcs, &sortedSource{rd: sortedReader{r: r}})
		default:
			bucketed = append(bucketed, r)
		}
	}
	if len(bucketed) > 0 {
		srcs = append(srcs, newBucketSource(bucketed, *b.buckets, b.ascending))
	}
	return srcs
}

// Finish merges everything added into a segment on w and returns the number of pairs.
func (b *BTreeBuilder[K]) Finish(w io.Writer) (uint64, error) {
	if b.closed {
		return 0, errClosed
	}
	if b.cur != nil && b.cur.n > 0 {
		if err := b.seal(); err != nil {
			return 0, err
		}
	}
	if err := b.wait(); err != nil {
		return 0, err
	}
	// Nothing is sorted or filled again: the merge (and, on an object store, the upload
	// behind it) can have the scratch and the fill arenas.
	b.scratch, b.recycled, b.reuse, b.cur = sortScratch{}, fillArena{}, fillArena{}, nil
	bw, err := index.NewBTreeWriter[K](w, b.opts.PageEntries)
	if err != nil {
		return 0, err
	}
	var code *index.KeyCode
	if len(b.spills) == 0 {
		code = b.code // coded runs are written as they are; spilled ones were spelled out
		bw.SetKeyCode(code)
	}
	if b.bucketed() {
		n, err := finishBuckets(bw, code, b.runs, *b.buckets, b.ascending, b.chunkEntries)
		if err != nil {
			return 0, err
		}
		b.runs, b.held = nil, 0
		return n, bw.Close()
	}
	if blocks := b.numBlocks(); blocks != nil {
		n, err := writeBlocks(bw, blocks)
		if err != nil {
			return 0, err
		}
		b.runs, b.held = nil, 0
		return n, bw.Close()
	}
	if b.str && b.code == nil && len(b.spills) == 0 && len(b.runs) > 0 {
		// The fill arenas and sort scratch just let go, and the column's decode buffers
		// before them, are garbage the pacer would let stand until the heap doubles the
		// packed runs (~150 MB for 10M keys): collected now, Finish's buffers come on top
		// of the runs alone. A cycle over a heap of byte slices costs a few milliseconds.
		runtime.GC()
		n, err := finishStrings(bw, b.runs, b.ranges.n, b.chunkEntries)
		if err != nil {
			return 0, err
		}
		b.runs, b.held = nil, 0
		return n, bw.Close()
	}
	if b.str && len(b.runs) > 0 && (b.code == nil || len(b.spills) > 0) {
		// Beside spill files, the runs in memory join the merge as one more file: a string
		// run is not sorted as a whole (see memRun.sortStrings), and a coded one's keys
		// would be codes among the files' spelled-out keys.
		if err := b.spillRuns(); err != nil {
			return 0, err
		}
	}
	srcs := b.memSources()
	for _, f := range b.spills {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return 0, err
		}
		srcs = append(srcs, &fileSource{r: bufio.NewReaderSize(f, 256<<10), str: b.str})
	}
	var n uint64
	var sk, ids []uint64
	emit, wait := pipeline(func(es []entry) error {
		n += uint64(len(es))
		if b.str && code == nil {
			return addStrings(bw, es)
		}
		sk, ids = sk[:0], ids[:0]
		for _, e := range es {
			sk, ids = append(sk, e.k), append(ids, e.id)
		}
		return bw.AddEncoded(sk, ids)
	})
	err = merge(srcs, bw.PageEntries(), emit)
	if err := wait(); err != nil {
		return 0, err
	}
	if err != nil {
		return 0, err
	}
	b.runs, b.held = nil, 0
	return n, bw.Close()
}

// numBlocks returns the sorted stream of a numeric build as blocks when every run was in
// order and each one starts after the one before ends (an id column), nothing spilled; nil
// otherwise.
func (b *BTreeBuilder[K]) numBlocks() blockSource {
	if b.str && b.code == nil || len(b.spills) > 0 || len(b.runs) == 0 {
		return nil
	}
	sorted, chained := 0, true
	for i, r := range b.runs {
		if !r.sorted {
			continue
		}
		sorted++
		if i > 0 {
			p := b.runs[i-1]
			if !p.sorted || p.lastKey() > r.firstKey() || p.lastKey() == r.firstKey() && p.lastID >= r.firstID {
				chained = false
			}
		}
	}
	if sorted == len(b.runs) && chained {
		return &chainSource{runs: b.runs}
	}
	return nil
}

// bucketed reports whether a numeric build is every run partitioned into buckets, nothing
// spilled: Finish sorts it bucket by bucket (see finishBuckets).
func (b *BTreeBuilder[K]) bucketed() bool {
	if b.str && b.code == nil || len(b.spills) > 0 || len(b.runs) == 0 {
		return false
	}
	for _, r := range b.runs {
		if r.sorted {
			return false
		}
	}
	return true
}

// blockSource yields a numeric build's pairs in order, a block at a time: next fills blk
// (whose buffers it may reuse) and returns false at the end.
type blockSource interface {
	next(blk *numBlock) bool
}

// chainSource yields runs that are in order one after the other, as they are.
type chainSource struct {
	runs []*memRun
	i    int
	rd   sortedReader
}

// chainBlock is how many pairs of a sorted run one block carries.
const chainBlock = 1 << 16

func (s *chainSource) next(blk *numBlock) bool {
	for s.i < len(s.runs) {
		if s.rd.r == nil {
			s.rd = sortedReader{r: s.runs[s.i]}
		}
		if s.rd.next(blk, chainBlock) {
			return true
		}
		s.i, s.rd = s.i+1, sortedReader{}
	}
	return false
}

// writeBlocks writes the blocks of src to bw: they are produced (sorted) on a goroutine of
// their own while this one encodes and writes pages, with up to three blocks in flight. The
// producer is stopped and waited for before writeBlocks returns.
func writeBlocks[K index.Key](bw *index.BTreeWriter[K], src blockSource) (uint64, error) {
	const inFlight = 3
	free, full := make(chan *numBlock, inFlight), make(chan *numBlock, inFlight)
	for range inFlight {
		free <- &numBlock{}
	}
	stop := make(chan struct{})
	go func() {
		defer close(full)
		for {
			var blk *numBlock
			select {
			case blk = <-free:
			case <-stop:
				return
			}
			if !src.next(blk) {
				return
			}
			full <- blk // never blocks: full holds every block
		}
	}()
	var n uint64
	var err error
	var sk, ids []uint64
	stopped := false
	for blk := range full {
		for at := 0; at < blk.len() && err == nil; {
			to := min(blk.len(), at+bw.Room())
			sk, ids = blk.appendPairs(sk[:0], ids[:0], at, to)
			err = bw.AddEncoded(sk, ids)
			n += uint64(to - at)
			at = to
		}
		if err != nil && !stopped {
			close(stop)
			stopped = true
		}
		free <- blk
	}
	return n, err
}

// addStrings hands sorted string entries (not coded) to bw, front-coded as they come: the
// keys' buffers are reused after the call.
func addStrings[K index.Key](bw *index.BTreeWriter[K], es []entry) error {
	for i := range es {
		if err := bw.AddSortedString(stringBytes(es[i].s), es[i].id, -1); err != nil {
			return err
		}
	}
	bw.Detach()
	return nil
}

// pipeline runs consume on a goroutine of its own, so that a build merges on one core while
// pages are encoded and written on another. emit copies each batch (string keys included:
// a merge reuses its buffers) into one of two batches in flight; once consume fails, emit
// returns its error. wait must be called: it stops the goroutine and returns consume's error.
func pipeline(consume func([]entry) error) (emit func([]entry) error, wait func() error) {
	type batch struct {
		es   []entry
		strs []byte
	}
	free, full := make(chan *batch, 2), make(chan *batch, 2)
	free <- &batch{}
	free <- &batch{}
	var failed atomic.Pointer[error]
	done := make(chan struct{})
	go func() {
		defer close(done)
		for bt := range full {
			if failed.Load() == nil {
				if err := consume(bt.es); err != nil {
					failed.Store(&err)
				}
			}
			free <- bt
		}
	}()
	emit = func(es []entry) error {
		if err := failed.Load(); err != nil {
			return *err
		}
		bt := <-free
		size := 0
		for i := range es {
			size += len(es[i].s)
		}
		if cap(bt.strs) < size {
			bt.strs = make([]byte, 0, size+size/4)
		}
		bt.strs = bt.strs[:0]
		bt.es = append(bt.es[:0], es...)
		for i := range bt.es {
			if e := &bt.es[i]; e.s != "" {
				at := len(bt.strs)
				bt.strs = append(bt.strs, e.s...)
				e.s = arenaString(bt.strs[at:])
			}
		}
		full <- bt
		return nil
	}
	wait = func() error {
		close(full)
		<-done
		if err := failed.Load(); err != nil {
			return *err
		}
		return nil
	}
	return emit, wait
}

// Close removes spill files and drops everything held. Safe to call more than once.
func (b *BTreeBuilder[K]) Close() error {
	_ = b.wait()
	b.closed = true
	var errs []error
	for _, f := range b.spills {
		f.Close()
		if err := os.Remove(f.Name()); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	b.spills, b.runs, b.cur, b.held, b.scratch = nil, nil, nil, 0, sortScratch{}
	return errors.Join(errs...)
}
