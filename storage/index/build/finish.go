package build

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"errors"
	"math/bits"
	"runtime"
	"strings"
	"sync"

	"github.com/cba1309c/steward/storage/index"
)

// A build held in memory is finished one key range (strings) or bucket (numbers) of all runs
// at a time. Every run of a build was cut by the same function (the first run's stringRanges
// or bucketFunc), so range j of one run and range j of another hold the same interval of
// keys: the segment is range 0 of all runs in order, then range 1, and so on. A string range
// of all runs (a few thousand pairs for ten million hex keys; each run packed its part as the
// keys came, see memRun.pack) is decoded into one buffer and radix-sorted on its 8-byte
// prefixes in cache; a range too large for that, or held sorted by one run alone, is merged
// from the runs' pieces. Numeric buckets are sorted as bucket.go describes.
//
// The segment is cut into chunks of whole pages, each sorted and encoded into pages by one of
// a few workers (one a core), and written in order by the caller: pages, their lookup entries
// (offsets shifted to where the chunk lands) and the trailer come out byte for byte as the
// serial writer makes them of the same pairs.

// maxGather bounds the pairs of one range decoded and sorted at once (about 40 bytes each
// while sorted); a larger range is merged from its runs' sorted pieces instead.
const maxGather = 1 << 18

// finishChunks is how many chunks a build is cut into (chunks are never below 64 pages), and
// maxFinishWorkers how many are encoded at once.
const (
	finishChunks     = 64
	maxFinishWorkers = 4
)

// errChunkFull stops a merge once a chunk has all its pairs.
var errChunkFull = errors.New("index: chunk full")

// segChunk is one unit of a chunked Finish: the pairs at positions [start, end) of the
// segment, which lie in ranges (or buckets) lo..hi; the first skip pairs of range lo belong
// to the chunk before. A worker fills the output fields, then closes done.
type segChunk struct {
	start, end, skip uint64
	lo, hi           int

	out  *index.Chunk
	err  error
	done chan struct{}
}

// finishStrings writes the pairs of runs (every one packed by ranges of one function, nranges
// of them) as bw's pages, and returns their number. chunkEntries sizes the chunks (0: the
// default).
func finishStrings[K index.Key](bw *index.BTreeWriter[K], runs []*memRun, nranges, chunkEntries int) (uint64, error) {
	cum, chunks, workers := planFinish(nranges, bw.PageEntries(), chunkEntries, func(j int) (n uint64) {
		for _, r := range runs {
			n += uint64(r.rangeAt[j+1] - r.rangeAt[j])
		}
		return n
	})
	// Every buffer is sized once, for the largest chunk and range: regrowing them as larger
	// ones come would leave garbage the size of the buffers behind each time.
	var chunkBytes, rangePairs, rangeBytes int
	for _, c := range chunks {
		size := 0
		for _, r := range runs {
			size += int(r.rangeOff[c.hi+1] - r.rangeOff[c.lo])
		}
		chunkBytes = max(chunkBytes, size+size/8)
	}
	for j := range nranges {
		if n := int(cum[j+1] - cum[j]); n <= maxGather {
			size := 0
			for _, r := range runs {
				size += int(r.rangeOff[j+1] - r.rangeOff[j])
			}
			rangePairs, rangeBytes = max(rangePairs, n), max(rangeBytes, 2*size)
		}
	}

	return writeChunks(bw, chunks, chunkBytes, workers, func() chunkEncoder {
		g := newRangeGather(rangePairs, rangeBytes)
		cw := index.NewChunkWriter[string](bw.PageEntries(), nil)
		return func(c *segChunk, cb *index.Chunk, quit <-chan struct{}) { c.encode(runs, cw, cb, g, quit) }
	})
}

// chunkEncoder encodes chunk c into cb, a worker's own (see writeChunks).
type chunkEncoder func(c *segChunk, cb *index.Chunk, quit <-chan struct{})

// writeChunks has workers encode the chunks, each with an encoder of its own from
// newEncoder, and writes them to bw in order as they come; chunkBytes sizes the buffers.
func writeChunks[K index.Key](bw *index.BTreeWriter[K], chunks []*segChunk, chunkBytes, workers int, newEncoder func() chunkEncoder) (uint64, error) {
	// A worker takes a buffer before it takes a chunk and the writer hands it back once the
	// chunk is written: at most workers+1 chunks are encoded and unwritten at once, and the
	// lowest unwritten chunk always has its buffer.
	free := make(chan *index.Chunk, workers+1)
	for range workers + 1 {
		free <- index.NewChunk(chunkBytes)
	}
	jobs := make(chan *segChunk, len(chunks))
	for _, c := range chunks {
		jobs <- c
	}
	close(jobs)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		encode := newEncoder()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				var cb *index.Chunk
				select {
				case cb = <-free:
				case <-quit:
					return
				}
				c, ok := <-jobs
				if !ok {
					return
				}
				encode(c, cb, quit)
				close(c.done)
			}
		}()
	}
	defer func() {
		close(quit)
		wg.Wait()
	}()
	var n uint64
	for _, c := range chunks {
		<-c.done
		if c.err != nil {
			return 0, c.err
		}
		cb := c.out
		if err := bw.AppendChunk(cb); err != nil {
			return 0, err
		}
		n += cb.Entries()
		c.out = nil
		free <- cb
	}
	return n, nil
}

// planFinish cuts the pairs of units (ranges or buckets) 0..units-1, pairs(j) in unit j, into
// the chunks of a Finish (chunkEntries pairs each, 0: the default) and picks how many workers
// encode them. cum[j] is the number of pairs in units before j.
func planFinish(units, perPage, chunkEntries int, pairs func(j int) uint64) (cum []uint64, chunks []*segChunk, workers int) {
	cum = make([]uint64, units+1)
	for j := range units {
		cum[j+1] = cum[j] + pairs(j)
	}
	page := uint64(perPage)
	target := uint64(chunkEntries)
	if target == 0 {
		target = max(cum[units]/finishChunks, 64*page)
	}
	chunks = planChunks(cum, page, target)
	return cum, chunks, min(runtime.GOMAXPROCS(0), maxFinishWorkers, len(chunks))
}

// planChunks cuts positions [0, cum[last]) into chunks of about target pairs. Every chunk but
// the last ends on a page boundary, the first one at or after the end of a range, so a chunk
// shares at most one page's worth of a range with the next.
func planChunks(cum []uint64, page, target uint64) []*segChunk {
	total := cum[len(cum)-1]
	var out []*segChunk
	lo := 0
	for start := uint64(0); start < total; {
		for cum[lo+1] <= start {
			lo++
		}
		end := min(total, start+max(target, 1))
		if end < total {
			k := lo
			for cum[k+1] < end {
				k++
			}
			end = min(total, (cum[k+1]+page-1)/page*page)
		}
		hi := lo
		for cum[hi+1] < end {
			hi++
		}
		out = append(out, &segChunk{start: start, end: end, skip: start - cum[lo], lo: lo, hi: hi, done: make(chan struct{})})
		start = end
	}
	return out
}

// encode sorts the chunk's pairs and encodes them with cw (a writer without pages pending)
// into cb.
func (c *segChunk) encode(runs []*memRun, cw *index.BTreeWriter[string], cb *index.Chunk, g *rangeGather, quit <-chan struct{}) {
	cw.StartChunk(cb)
	sink := pairSink{bw: cw, skip: c.skip, left: c.end - c.start}
	for j := c.lo; j <= c.hi && sink.left > 0; j++ {
		select {
		case <-quit:
			c.err = errChunkFull // the writer gave up: nobody reads this chunk
			return
		default:
		}
		if c.err = g.emitRange(runs, j, &sink); c.err != nil {
			return
		}
	}
	if c.err = cw.EndChunk(); c.err != nil {
		return
	}
	c.out = cb
}

// pairWriter takes sorted pairs; skipRange reports whether it drops all of the next n;
// detach is called before the buffers holding the keys added so far are reused.
type pairWriter interface {
	// add takes the next pair; shared, when not negative, is the length of the prefix s
	// shares with the key before it (the caller knows it from the keys' sort prefixes).
	add(s []byte, id uint64, shared int) error
	skipRange(n int) bool
	detach()
}

// pairSink feeds sorted pairs to a chunk's page writer: it drops the first skip, then takes
// left more.
type pairSink struct {
	bw         *index.BTreeWriter[string]
	skip, left uint64
}

func (ps *pairSink) skipRange(n int) bool {
	if uint64(n) > ps.skip {
		return false
	}
	ps.skip -= uint64(n)
	return true
}

func (ps *pairSink) add(s []byte, id uint64, shared int) error {
	switch {
	case ps.skip > 0:
		ps.skip--
		return nil
	case ps.left == 0:
		return errChunkFull
	}
	ps.left--
	return ps.bw.AddSortedString(s, id, shared)
}

// detach copies the last key, whose buffer the caller is about to reuse.
func (ps *pairSink) detach() { ps.bw.Detach() }

// rangeGather is a worker's scratch for one range of all runs: key e is
// data[offs[e]:offs[e+1]] at row id ids[e].
type rangeGather struct {
	data     []byte
	offs     []uint32
	ids      []uint64
	keys, tk []uint64
	es, te   []uint32
	counts   [257]uint32
	next     [256]uint32
	// the keys, offsets and row ids moved piece by piece (see sortPrefixes)
	mdata []byte
	moffs []uint32
	mids  []uint64
}

// sortPrefixes sorts keys (the 8-byte prefixes of g's keys, in g's order) ascending and sets
// es to the positions of g's keys in that order, possibly after moving them (g's arrays are
// then exchanged for the moved ones). A range's prefixes share their leading bytes: one
// stable scatter on the first byte where they differ cuts them into pieces of a few
// thousand, and the keys' bytes and row ids move with them, piece after piece; a radix sort
// then finishes each piece in cache, and the pairs of a piece are read back from a few
// kilobytes. Sorting the whole range at once took one radix pass a varying byte over a range
// too large for the cache, and then read its keys back in random order from a megabyte.
func (g *rangeGather) sortPrefixes(keys []uint64, es []uint32) {
	n := len(keys)
	var x uint64
	for _, k := range keys {
		x |= k ^ keys[0]
	}
	for i := range es {
		es[i] = uint32(i)
	}
	if x == 0 || n < 2 {
		return // one prefix: the order is all ties'
	}
	if n <= inCache {
		radixSort(keys, es, g.tk[:n], g.te[:n])
		return
	}
	shift := 56 - uint(bits.LeadingZeros64(x))/8*8
	var size [256]uint32
	counts := g.counts[:257]
	clear(counts)
	for i, k := range keys {
		d := byte(k >> shift)
		counts[int(d)+1]++
		size[d] += g.offs[i+1] - g.offs[i]
	}
	var at [256]uint32 // where the next key of each piece goes: its position, its bytes
	for d := range 256 {
		counts[d+1] += counts[d]
		if d > 0 {
			at[d] = at[d-1] + size[d-1]
		}
	}
	next := g.next[:256]
	copy(next, counts[:256])
	tk := g.tk[:n]
	data, offs, ids := grow8(&g.mdata, len(g.data)), grow32(&g.moffs, n+1), grow64(&g.mids, n)
	for i, k := range keys {
		d := byte(k >> shift)
		p := next[d]
		next[d]++
		tk[p], offs[p], ids[p] = k, at[d], g.ids[i]
		at[d] += uint32(copy(data[at[d]:], g.data[g.offs[i]:g.offs[i+1]]))
	}
	offs[n] = uint32(len(g.data))
	g.data, g.mdata = data, g.data
	g.offs, g.moffs = offs, g.offs
	g.ids, g.mids = ids, g.ids
	te := g.te[:n]
	copy(te, es)
	for d := range 256 {
		if lo, hi := counts[d], counts[d+1]; hi-lo > 1 {
			radixSort(tk[lo:hi], te[lo:hi], keys[lo:hi], es[lo:hi])
		}
	}
	copy(keys, tk)
	copy(es, te)
}

// inCache: a range of at most this many pairs is radix-sorted as it is (its keys, a few
// hundred kilobytes, stay in cache).
const inCache = 1 << 13

func grow8(s *[]byte, n int) []byte {
	if cap(*s) < n {
		*s = make([]byte, n)
	}
	return (*s)[:n]
}

func grow32(s *[]uint32, n int) []uint32 {
	if cap(*s) < n {
		*s = make([]uint32, n)
	}
	return (*s)[:n]
}

func newRangeGather(pairs, size int) *rangeGather {
	return &rangeGather{
		data: make([]byte, 0, size), offs: make([]uint32, 0, pairs+1), ids: make([]uint64, 0, pairs),
		keys: make([]uint64, pairs), tk: make([]uint64, pairs), es: make([]uint32, pairs), te: make([]uint32, pairs),
		mdata: make([]byte, 0, size), moffs: make([]uint32, 0, pairs+1), mids: make([]uint64, 0, pairs),
	}
}

// sortedPiece returns range j of r, which was packed unsorted, as a sorted source of its own.
func (g *rangeGather) sortedPiece(r *memRun, j int) source {
	g.data, g.offs, g.ids = g.data[:0], append(g.offs[:0], 0), g.ids[:0]
	g.decode(r, j)
	n := len(g.ids)
	es := g.sorted()
	// Repacked with the ids in place of entry numbers: a run whose ids are its entry numbers.
	pk := packer{}
	ids := make([]uint64, n)
	for x, e := range es {
		pk.add(g.data[g.offs[e]:g.offs[e+1]], uint32(x))
		ids[x] = g.ids[e]
	}
	piece := &memRun{n: n, ids: ids}
	return &runSource{r: piece, p: pk.p, end: n}
}

// sorted returns the positions of the keys decoded into g in (key, row id) order (g's arrays
// may be exchanged for moved ones: see sortPrefixes).
func (g *rangeGather) sorted() []uint32 {
	n := len(g.ids)
	if cap(g.keys) < n {
		g.keys, g.tk = make([]uint64, n), make([]uint64, n)
		g.es, g.te = make([]uint32, n), make([]uint32, n)
	}
	keys, es := g.keys[:n], g.es[:n]
	for e := range uint32(n) {
		keys[e] = stringPrefix(g.str(e))
	}
	g.sortPrefixes(keys, es)
	sortTies(keys, es, g.byStringThenID)
	return es
}

func (g *rangeGather) byStringThenID(a, b uint32) int {
	if c := strings.Compare(g.str(a), g.str(b)); c != 0 {
		return c
	}
	return cmp.Compare(g.ids[a], g.ids[b])
}

func (g *rangeGather) str(e uint32) string { return arenaString(g.data[g.offs[e]:g.offs[e+1]]) }

// emitRange sends range j of every run to ps in (key, row id) order.
func (g *rangeGather) emitRange(runs []*memRun, j int, ps pairWriter) error {
	n, held, sorted := 0, 0, true
	for _, r := range runs {
		if k := int(r.rangeAt[j+1] - r.rangeAt[j]); k > 0 {
			n, held, sorted = n+k, held+1, sorted && r.rangeSorted[j]
		}
	}
	if n == 0 || ps.skipRange(n) {
		return nil
	}
	if held == 1 && sorted || n > maxGather {
		return mergeRange(runs, j, ps)
	}
	g.data, g.offs, g.ids = g.data[:0], append(g.offs[:0], 0), g.ids[:0]
	for _, r := range runs {
		g.decode(r, j)
	}
	es := g.sorted()
	defer ps.detach()        // the next range is decoded into g
	keys := g.keys[:len(es)] // the sort prefixes, in es's order
	var prev []byte
	for i, e := range es {
		s, shared := g.data[g.offs[e]:g.offs[e+1]], -1
		if i > 0 {
			shared = sharedByPrefix(keys[i-1], keys[i], prev, s)
		}
		prev = s
		if err := ps.add(s, g.ids[e], shared); err != nil {
			if err == errChunkFull {
				return nil
			}
			return err
		}
	}
	return nil
}

// sharedByPrefix is index.CommonPrefix(a, b) for keys a and b whose sort prefixes (stringPrefix) are
// pa and pb: where the prefixes differ, the first differing byte is the first differing byte of
// the keys, unless one key ends before it (a short key's prefix is padded with zeros); only
// equal prefixes of keys longer than 8 bytes need the bytes after them.
func sharedByPrefix(pa, pb uint64, a, b []byte) int {
	n := min(len(a), len(b))
	if x := pa ^ pb; x != 0 {
		return min(bits.LeadingZeros64(x)/8, n)
	}
	if n < 8 {
		return n
	}
	return 8 + index.CommonPrefix(a[8:], b[8:])
}

// decode appends range j of run r (its first key coded whole, see pack), with the entries'
// row ids.
func (g *rangeGather) decode(r *memRun, j int) {
	p := r.packed[r.rangeOff[j]:r.rangeOff[j+1]]
	prev, delta, last := len(g.data), !r.rangeSorted[j], uint64(0)
	for range r.rangeAt[j+1] - r.rangeAt[j] {
		shared, m := binary.Uvarint(p)
		p = p[m:]
		l, m := binary.Uvarint(p)
		p = p[m:]
		at := len(g.data)
		g.data = append(g.data, g.data[prev:prev+int(shared)]...)
		g.data = append(g.data, p[:l]...)
		p = p[l:]
		i, m := binary.Uvarint(p)
		p = p[m:]
		if delta {
			i += last
			last = i
		}
		g.offs = append(g.offs, uint32(len(g.data)))
		g.ids = append(g.ids, r.id(uint32(i)))
		prev = at
	}
}

// mergeRange sends range j of every run to ps through a k-way merge of the runs' pieces of
// it, sorting those that were packed unsorted (at most sortAbove pairs each) first.
func mergeRange(runs []*memRun, j int, ps pairWriter) error {
	var srcs []source
	var g *rangeGather
	for _, r := range runs {
		if r.rangeAt[j] == r.rangeAt[j+1] {
			continue
		}
		if r.rangeSorted[j] {
			srcs = append(srcs, &runSource{r: r, p: r.packed, pos: int(r.rangeAt[j]), end: int(r.rangeAt[j+1]), off: int(r.rangeOff[j])})
			continue
		}
		if g == nil {
			g = newRangeGather(sortAbove, 0)
		}
		srcs = append(srcs, g.sortedPiece(r, j))
	}
	err := merge(srcs, mergeBlock, func(es []entry) error {
		for i := range es {
			if err := ps.add(stringBytes(es[i].s), es[i].id, -1); err != nil {
				ps.detach()
				return err
			}
		}
		ps.detach() // the merge refills the buffers es points into
		return nil
	})
	if err == errChunkFull {
		return nil
	}
	return err
}

// spillSink writes sorted pairs in the spill file format (see fileSource).
type spillSink struct {
	w   *bufio.Writer
	rec []byte
}

func (ss *spillSink) skipRange(int) bool { return false }

func (ss *spillSink) detach() {}

func (ss *spillSink) add(s []byte, id uint64, _ int) error {
	ss.rec = binary.AppendUvarint(ss.rec[:0], uint64(len(s)))
	ss.rec = append(ss.rec, s...)
	ss.rec = binary.LittleEndian.AppendUint64(ss.rec, id)
	_, err := ss.w.Write(ss.rec)
	return err
}

// spillStrings writes the pairs of runs (packed by nranges ranges of one function) to w in
// (key, row id) order, one range at a time.
func spillStrings(w *bufio.Writer, runs []*memRun, nranges int) error {
	pairs, size := 0, 0
	for j := range nranges {
		n, b := 0, 0
		for _, r := range runs {
			n += int(r.rangeAt[j+1] - r.rangeAt[j])
			b += int(r.rangeOff[j+1] - r.rangeOff[j])
		}
		if n <= maxGather {
			pairs, size = max(pairs, n), max(size, 2*b)
		}
	}
	g, sink := newRangeGather(pairs, size), &spillSink{w: w}
	for j := range nranges {
		if err := g.emitRange(runs, j, sink); err != nil {
			return err
		}
	}
	return nil
}

// finishBuckets writes the pairs of partitioned numeric runs (see bucket.go) as bw's pages,
// one bucket of all runs at a time, in chunks on every core (see writeChunks), and returns
// their number.
func finishBuckets[K index.Key](bw *index.BTreeWriter[K], code *index.KeyCode, runs []*memRun, f bucketFunc, ascending bool, chunkEntries int) (uint64, error) {
	_, chunks, workers := planFinish(bucketCount, bw.PageEntries(), chunkEntries, func(j int) (n uint64) {
		for _, r := range runs {
			n += uint64(r.bounds[j+1] - r.bounds[j])
		}
		return n
	})
	// A price in cents packs to ~3.4 bytes a pair; coded string keys to about their code's
	// bytes and a row id (16 hex digits: ~9). A buffer grown by appends copies itself several
	// times over: ~24 ms of CPU of a 10M-key name build, in growslice.
	perPair := 4
	if code != nil {
		perPair += code.MaxBytes()
	}
	chunkBytes := 0
	for _, c := range chunks {
		chunkBytes = max(chunkBytes, int(c.end-c.start)*perPair)
	}
	return writeChunks(bw, chunks, chunkBytes, workers, func() chunkEncoder {
		sorter := &bucketSorter{runs: runs, f: f, ascending: ascending}
		blk := &numBlock{}
		cw := index.NewChunkWriter[K](bw.PageEntries(), code)
		return func(c *segChunk, cb *index.Chunk, quit <-chan struct{}) { encodeBuckets(c, sorter, blk, cw, cb, quit) }
	})
}

// encodeBuckets sorts chunk c's buckets and encodes their pairs with cw (a chunk writer) into
// cb.
func encodeBuckets[K index.Key](c *segChunk, s *bucketSorter, blk *numBlock, cw *index.BTreeWriter[K], cb *index.Chunk, quit <-chan struct{}) {
	cw.StartChunk(cb)
	skip, left := c.skip, c.end-c.start
	var sk, ids []uint64
	for j := c.lo; j <= c.hi && left > 0; j++ {
		select {
		case <-quit:
			c.err = errChunkFull // the writer gave up: nobody reads this chunk
			return
		default:
		}
		s.sort(j, blk)
		if n := uint64(blk.len()); n <= skip {
			skip -= n
			continue
		}
		at := int(skip)
		skip = 0
		for at < blk.len() && left > 0 {
			to := min(blk.len(), at+cw.Room(), at+int(left))
			sk, ids = blk.appendPairs(sk[:0], ids[:0], at, to)
			if c.err = cw.AddEncoded(sk, ids); c.err != nil {
				return
			}
			left -= uint64(to - at)
			at = to
		}
	}
	if c.err = cw.EndChunk(); c.err != nil {
		return
	}
	c.out = cb
}
