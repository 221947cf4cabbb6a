package dataset

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/cba1309c/steward/storage/index"
	"github.com/cba1309c/steward/storage/index/build"
)

// MutateOp is an index mutation.
type MutateOp string

// Index mutations.
const (
	MutateCreate  MutateOp = "CREATE"
	MutateReplace MutateOp = "REPLACE" // create, or rebuild and swap an existing index of that name
	MutateDrop    MutateOp = "DROP"
)

// MutateSpec describes one index mutation.
type MutateSpec struct {
	Op      MutateOp
	Name    string    // index name; looked up case-folded, stored as given
	Columns []string  // exactly one column (CREATE/REPLACE)
	Type    IndexType // BTREE or BITMAP (CREATE/REPLACE)
	// Params: BTREE "page_entries" (default 1024); BITMAP "max_keys" (default 1048576).
	Params      map[string]string
	IfNotExists bool // CREATE of an existing name is a no-op instead of ErrIndexExists
	IfExists    bool // DROP of a missing name is a no-op instead of ErrIndexNotFound
}

// MutateOptions carries the per-invocation context of a mutation.
type MutateOptions struct {
	// InvocationID is recorded in the committed transaction; ResolveSlot matches on it.
	InvocationID string
	// BeforeUpload is the custody hook, called before every index segment upload. The
	// manifest itself is not reported: it is the commit slot, owned by whoever wins it, and a
	// ledger that deleted it on abandon could delete another writer's commit.
	BeforeUpload BeforeUploadFunc
	// Progress, if set, receives rows read so far and the total (the load_data stage).
	Progress func(done, total int64)
	// Stage, if set, is told of the phases after loading: "write" (the sorted runs merged, the
	// segment encoded and stored, overlapping; 0 of its rows at the start, all once stored) and
	// "commit" (0 of 1 before the manifest is put, 1 of 1 once it is).
	Stage func(stage string, done, total int64)
	// TempDir holds BTREE sort spills. Default: os.TempDir().
	TempDir string
	// MemoryBudget bounds the bytes a BTREE build keeps in memory before spilling sorted
	// runs to TempDir. Default: build.DefaultMemoryBudget (256 MiB).
	MemoryBudget int64
	// RunEntries is the number of pairs a BTREE build sorts as one run. Default:
	// build.DefaultRunEntries (build.DefaultStringRunEntries for a string column).
	RunEntries int
}

// MutateResult reports a mutation.
type MutateResult struct {
	// Version is the committed version, or the pinned one for a no-op.
	Version int64
	// NoOp is set when IF NOT EXISTS / IF EXISTS made the mutation do nothing.
	NoOp bool
	// IndexUUID is the index created (CREATE/REPLACE) or dropped (DROP).
	IndexUUID string
	// IndexName is the stored spelling of the index affected.
	IndexName string
	// Manifest is the key of the committed manifest ("" for a no-op).
	Manifest string
	// Created lists every object written (keys relative to the store), also when the
	// mutation failed after uploading: the caller owns their cleanup.
	Created []string
}

// Plan is the outcome of Precheck.
type Plan struct {
	NoOp     bool
	Existing *IndexMeta // the stored index the name resolves to, if any
	Field    Field      // the indexed column (CREATE/REPLACE)
}

// FindIndex resolves name case-folded to exactly one stored index.
func (d *Dataset) FindIndex(name string) (IndexMeta, error) {
	var found []IndexMeta
	for _, ix := range d.m.Indices {
		if strings.EqualFold(ix.Name, name) {
			found = append(found, ix)
		}
	}
	switch len(found) {
	case 0:
		return IndexMeta{}, fmt.Errorf("%w: %q", ErrIndexNotFound, name)
	case 1:
		return found[0], nil
	}
	ae := &AmbiguousNameError{Name: name}
	for _, ix := range found {
		ae.Matches = append(ae.Matches, ix.Name)
	}
	return IndexMeta{}, ae
}

// CheckSchema verifies the schema contract on the pinned version (see Schema.CheckSchema).
func (d *Dataset) CheckSchema(contract map[string]FieldType) error {
	return d.m.Schema.CheckSchema(contract)
}

// Precheck validates spec against the pinned version and decides IF [NOT] EXISTS no-ops. It
// is authoritative: Mutate runs it again on the same snapshot.
func (d *Dataset) Precheck(spec MutateSpec) (Plan, error) {
	if spec.Name == "" || len(spec.Name) > 256 || !utf8.ValidString(spec.Name) {
		return Plan{}, invalidf("index name %q", spec.Name)
	}
	existing, err := d.FindIndex(spec.Name)
	found := err == nil
	if err != nil && !errors.Is(err, ErrIndexNotFound) {
		return Plan{}, err // ambiguous
	}
	var plan Plan
	if found {
		plan.Existing = &existing
	}
	switch spec.Op {
	case MutateDrop:
		if !found {
			if spec.IfExists {
				return Plan{NoOp: true}, nil
			}
			return Plan{}, err
		}
		return plan, nil
	case MutateCreate, MutateReplace:
	default:
		return Plan{}, invalidf("unknown mutation %q", spec.Op)
	}
	if found && spec.Op == MutateCreate {
		if spec.IfNotExists {
			plan.NoOp = true
			return plan, nil
		}
		return Plan{}, fmt.Errorf("%w: %q (stored as %q)", ErrIndexExists, spec.Name, existing.Name)
	}
	switch {
	case len(spec.Columns) == 0:
		return Plan{}, invalidf("index %q names no column", spec.Name)
	case len(spec.Columns) > 1:
		return Plan{}, fmt.Errorf("%w: multi-column index %q", ErrNotSupported, spec.Name)
	}
	f, ok := d.m.Schema.Field(spec.Columns[0])
	if !ok {
		return Plan{}, &SchemaError{Field: spec.Columns[0]}
	}
	plan.Field = f
	typ := IndexType(strings.ToUpper(string(spec.Type)))
	if typ != BTree && typ != Bitmap {
		return Plan{}, invalidf("index type %q (want BTREE or BITMAP)", spec.Type)
	}
	if _, err := parseParams(typ, spec.Params); err != nil {
		return Plan{}, err
	}
	return plan, nil
}

type buildParams struct {
	pageEntries int
	maxKeys     int
}

func parseParams(t IndexType, params map[string]string) (buildParams, error) {
	var p buildParams
	for k, v := range params {
		n, err := strconv.Atoi(v)
		switch {
		case t == BTree && k == "page_entries" && err == nil && n > 0 && n <= 1<<20:
			p.pageEntries = n
		case t == Bitmap && k == "max_keys" && err == nil && n > 0:
			p.maxKeys = n
		default:
			return p, invalidf("%s index parameter %s=%q", t, k, v)
		}
	}
	return p, nil
}

// Mutate runs one index mutation on the pinned version and commits it at Version()+1. It
// builds and uploads segments first (each after opts.BeforeUpload accepts its key), then
// publishes them with one put-if-absent manifest commit. Losing the slot is a
// *CommitConflictError; MutateResult.Created is filled even on failure.
func (d *Dataset) Mutate(ctx context.Context, spec MutateSpec, opts MutateOptions) (MutateResult, error) {
	plan, err := d.Precheck(spec)
	if err != nil {
		return MutateResult{Version: d.Version()}, err
	}
	res := MutateResult{Version: d.Version(), NoOp: plan.NoOp}
	if plan.Existing != nil {
		res.IndexUUID, res.IndexName = plan.Existing.UUID, plan.Existing.Name
	}
	if plan.NoOp {
		return res, nil
	}
	m := d.m.clone()
	m.Transaction = Transaction{InvocationID: opts.InvocationID}
	if plan.Existing != nil {
		m.Indices = deleteIndex(m.Indices, plan.Existing.UUID)
	}
	switch spec.Op {
	case MutateDrop:
		m.Transaction.Op, m.Transaction.Index = OpDropIndex, plan.Existing.Name
	default:
		m.Transaction.Op = OpCreateIndex
		if plan.Existing != nil {
			m.Transaction.Op = OpReplaceIndex
		}
		meta, created, err := d.buildIndex(ctx, spec, plan.Field, opts)
		res.Created = created
		if err != nil {
			return res, err
		}
		m.Indices = append(m.Indices, meta)
		m.Transaction.Index = meta.Name
		res.IndexUUID, res.IndexName = meta.UUID, meta.Name
	}
	opts.stage("commit", 0, 1)
	nd, err := d.commit(ctx, m)
	if err != nil {
		return res, err
	}
	opts.stage("commit", 1, 1)
	res.Version, res.Manifest = nd.Version(), d.fullKey(VersionKey(nd.Version()))
	return res, nil
}

func (o MutateOptions) stage(name string, done, total int64) {
	if o.Stage != nil {
		o.Stage(name, done, total)
	}
}

func deleteIndex(ixs []IndexMeta, uuid string) []IndexMeta {
	out := ixs[:0]
	for _, ix := range ixs {
		if ix.UUID != uuid {
			out = append(out, ix)
		}
	}
	return out
}

// buildIndex reads the column of every fragment into a builder, then streams the segment
// straight into the store (no staging file). It returns the new index's metadata and the
// keys it wrote.
func (d *Dataset) buildIndex(ctx context.Context, spec MutateSpec, f Field, opts MutateOptions) (IndexMeta, []string, error) {
	typ := IndexType(strings.ToUpper(string(spec.Type)))
	params, _ := parseParams(typ, spec.Params)
	id := uuid.NewString()
	rel := fmt.Sprintf("%s%s/%s.seg", indicesDir, id, strings.ToLower(string(typ)))
	var b segmentBuilder
	var err error
	switch f.Type {
	case Int64:
		b, err = buildSegment[int64](ctx, d, f, typ, params, opts)
	case Float64:
		b, err = buildSegment[float64](ctx, d, f, typ, params, opts)
	default:
		b, err = buildSegment[string](ctx, d, f, typ, params, opts)
	}
	if b != nil {
		defer b.Close()
	}
	if err != nil {
		return IndexMeta{}, nil, err
	}
	// Numeric pages encode faster than the store takes them: up to 4 MiB ahead, encoding and
	// storing overlap. A string build's merge is its slowest part and keeps a core to itself
	// while its encoder waits for the store, so it hands over one chunk at a time, as through
	// io.Pipe (docs/PERFORMANCE.md §1.4).
	inFlight := 4
	if f.Type == String {
		inFlight = 1
	}
	opts.stage("write", 0, d.Rows())
	key, size, rows, err := d.uploadSegment(ctx, rel, b, opts.BeforeUpload, inFlight)
	var created []string
	if key != "" {
		created = []string{key}
	}
	if err != nil {
		return IndexMeta{}, created, err
	}
	opts.stage("write", int64(rows), d.Rows())
	meta := IndexMeta{
		UUID: id, Name: spec.Name, FieldIDs: []int32{f.ID}, Type: typ, Params: spec.Params,
		Files: []IndexFile{{Path: rel, Size: size}}, DatasetVersion: d.Version(), Rows: rows,
	}
	for _, fr := range d.m.Fragments {
		meta.FragmentIDs = append(meta.FragmentIDs, fr.ID)
	}
	return meta, created, nil
}

// segmentBuilder is what both index builders offer once fed.
type segmentBuilder interface {
	Finish(w io.Writer) (uint64, error)
	Close() error
}

// buildSegment feeds every fragment's column to a new builder. The builder is returned (to
// be closed) even on error.
func buildSegment[K index.Key](ctx context.Context, d *Dataset, f Field, typ IndexType, p buildParams, opts MutateOptions) (segmentBuilder, error) {
	var add func(keys []K, first uint64) error
	var addRaw func(data []byte, offs []uint32, first uint64) error // strings: no string per row
	var b segmentBuilder
	if typ == BTree {
		bt := build.NewBTreeBuilder[K](build.BuildOptions{
			MemoryBudget: opts.MemoryBudget, RunEntries: opts.RunEntries, TempDir: opts.TempDir, PageEntries: p.pageEntries,
		})
		add, b = bt.Add, bt
		if f.Type == String {
			addRaw = bt.AddStrings
		}
	} else {
		bm := build.NewBitmapBuilder[K]()
		bm.MaxKeys = p.maxKeys
		add, b = bm.Add, bm
		if f.Type == String {
			addRaw = bm.AddStrings
		}
	}
	total, done := d.Rows(), int64(0)
	fed := func(n int, err error) error {
		if err != nil {
			return fmt.Errorf("%w: %w", ErrIndexBuild, err)
		}
		done += int64(n)
		if opts.Progress != nil {
			opts.Progress(done, total)
		}
		return nil
	}
	var raw rawStrings
	if addRaw != nil {
		raw = func(data []byte, offs []uint32, first uint64) error {
			return fed(len(offs)-1, addRaw(data, offs, first))
		}
	}
	for _, fr := range d.m.Fragments {
		err := scanColumn(ctx, d, fr, f, func(keys []K, first uint64) error { return fed(len(keys), add(keys, first)) }, raw)
		if err != nil {
			return b, err
		}
	}
	return b, nil
}

// uploadSegment asks the custody hook, then writes the segment through a pipe into Put while
// the builder produces it: sorting, encoding and upload overlap, and nothing is staged on
// disk. A build error closes the pipe with that error, so Put fails and publishes nothing.
// It returns the full key once the hook has accepted it, the segment's size and row count.
// inFlight is how many 1 MiB chunks the builder may write ahead of the store (chunkPipe).
func (d *Dataset) uploadSegment(ctx context.Context, rel string, b segmentBuilder, hook BeforeUploadFunc, inFlight int) (key string, size int64, rows uint64, err error) {
	key = d.fullKey(rel)
	if hook != nil {
		if err := hook(ctx, key); err != nil {
			return "", 0, 0, fmt.Errorf("%w: %s: %w", ErrUploadRefused, key, err)
		}
	}
	pipe := newChunkPipe(inFlight)
	put := make(chan error, 1)
	go func() {
		err := d.store.Put(ctx, rel, pipe, -1)
		pipe.CloseReader(cmp.Or(err, io.ErrClosedPipe)) // unblock the builder if Put gave up early
		put <- err
	}()
	cw := &countWriter{w: pipe}
	rows, err = b.Finish(cw)
	if err != nil {
		err = fmt.Errorf("dataset: write segment: %w", err)
	}
	pipe.CloseWriter(err) // nil: Put sees EOF
	perr := <-put
	switch {
	case err != nil && (perr == nil || !errors.Is(err, perr)):
		return key, 0, 0, err // the build failed; Put failed only because of it
	case perr != nil:
		return key, 0, 0, perr
	}
	return key, cw.n, rows, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
