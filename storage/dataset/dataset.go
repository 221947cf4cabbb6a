package dataset

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/cba1309c/steward/storage"
)

// Dataset is one opened (pinned) version of a dataset. It is immutable: writes return a new
// *Dataset for the version they committed. Safe for concurrent use.
type Dataset struct {
	root   storage.Store // the store the caller opened the dataset on
	store  storage.Store // view confined to the dataset prefix
	prefix string
	m      *Manifest

	mu      sync.Mutex
	readers map[string]any // index uuid -> *index.BTreeReader[K] / *index.BitmapReader[K]
}

// Open opens the dataset at prefix of store at version (version <= 0: the latest).
func Open(ctx context.Context, store storage.Store, prefix string, version int64) (*Dataset, error) {
	ds := newDataset(store, prefix)
	if version <= 0 {
		latest, err := ds.latestVersion(ctx)
		if err != nil {
			return nil, err
		}
		version = latest
	}
	m, err := ds.readManifest(ctx, version)
	if err != nil {
		return nil, err
	}
	ds.m = m
	return ds, nil
}

func newDataset(store storage.Store, prefix string) *Dataset {
	prefix = strings.Trim(prefix, "/")
	return &Dataset{root: store, store: storage.WithPrefix(store, prefix), prefix: prefix, readers: map[string]any{}}
}

func (d *Dataset) withManifest(m *Manifest) *Dataset {
	nd := newDataset(d.root, d.prefix)
	nd.m = m
	return nd
}

// Version is the pinned version.
func (d *Dataset) Version() int64 { return d.m.Version }

// Prefix is the dataset's key prefix in its store.
func (d *Dataset) Prefix() string { return d.prefix }

// Manifest returns a copy of the pinned manifest.
func (d *Dataset) Manifest() *Manifest { return d.m.clone() }

// Schema returns the schema.
func (d *Dataset) Schema() Schema { return d.m.clone().Schema }

// Indices returns the indices of the pinned version.
func (d *Dataset) Indices() []IndexMeta { return d.m.clone().Indices }

// Rows is the number of rows.
func (d *Dataset) Rows() int64 { return d.m.Rows() }

// fullKey turns a dataset-relative key into a key of the caller's store.
func (d *Dataset) fullKey(rel string) string {
	if d.prefix == "" {
		return rel
	}
	return d.prefix + "/" + rel
}

// LatestVersion lists _versions/ and returns the highest version present.
func LatestVersion(ctx context.Context, store storage.Store, prefix string) (int64, error) {
	return newDataset(store, prefix).latestVersion(ctx)
}

func (d *Dataset) latestVersion(ctx context.Context) (int64, error) {
	var latest int64
	for info, err := range d.store.List(ctx, versionsDir) {
		if err != nil {
			return 0, err
		}
		if v, ok := parseVersionKey(info.Key); ok && v > latest {
			latest = v
		}
	}
	if latest == 0 {
		return 0, fmt.Errorf("%w: %q", ErrDatasetNotFound, d.prefix)
	}
	return latest, nil
}

// VersionInfo summarizes one version for listings.
type VersionInfo struct {
	Version      int64
	Op           string
	InvocationID string
	Fenced       string // fenced invocation, for a FENCE
	Rows         int64
	Fragments    int
	Indices      int
	CreatedAt    time.Time
}

// Versions reads every manifest under prefix, oldest first.
func Versions(ctx context.Context, store storage.Store, prefix string) ([]VersionInfo, error) {
	var out []VersionInfo
	err := newDataset(store, prefix).eachManifest(ctx, func(m *Manifest) {
		out = append(out, VersionInfo{
			Version: m.Version, Op: m.Transaction.Op, InvocationID: m.Transaction.InvocationID,
			Fenced: m.Transaction.FencedInvocation, Rows: m.Rows(), Fragments: len(m.Fragments),
			Indices: len(m.Indices), CreatedAt: m.CreatedAt,
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (d *Dataset) readManifest(ctx context.Context, v int64) (*Manifest, error) {
	key := VersionKey(v)
	b, err := storage.ReadAll(ctx, d.store, key, MaxManifestSize)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return nil, fmt.Errorf("%w: %d of %q: %w", ErrVersionNotFound, v, d.prefix, err)
	case errors.Is(err, storage.ErrTooLarge):
		return nil, &CorruptError{Key: d.fullKey(key), Reason: "larger than the manifest limit", Err: err}
	case err != nil:
		return nil, err
	}
	m, err := DecodeManifest(b)
	if err != nil {
		var ce *CorruptError
		if errors.As(err, &ce) {
			ce.Key = d.fullKey(key)
		}
		return nil, err
	}
	if m.Version != v {
		return nil, &CorruptError{Key: d.fullKey(key), Reason: fmt.Sprintf("holds version %d", m.Version)}
	}
	return m, nil
}

// commit writes m as version d.Version()+1 with put-if-absent.
func (d *Dataset) commit(ctx context.Context, m *Manifest) (*Dataset, error) {
	m.FormatVersion = FormatVersion
	m.Version = d.m.Version + 1
	m.Transaction.ReadVersion = d.m.Version
	m.CreatedAt = time.Now().UTC()
	if err := putManifest(ctx, d.store, m); err != nil {
		if errors.Is(err, storage.ErrExists) {
			return nil, d.conflict(ctx, m.Version)
		}
		return nil, err
	}
	return d.withManifest(m), nil
}

func (d *Dataset) conflict(ctx context.Context, attempted int64) error {
	latest, err := d.latestVersion(ctx)
	if err != nil || latest < attempted {
		latest = attempted
	}
	return &CommitConflictError{Attempted: attempted, Latest: latest}
}

func putManifest(ctx context.Context, s storage.Store, m *Manifest) error {
	b, err := EncodeManifest(m)
	if err != nil {
		return err
	}
	return s.PutIfAbsent(ctx, VersionKey(m.Version), bytes.NewReader(b), int64(len(b)))
}

// rangeReader adapts one object to index.RangeReader and io.ReaderAt.
type rangeReader struct {
	ctx  context.Context // for ReadAt, which has no context parameter
	s    storage.Store
	key  string
	size int64
}

func (r *rangeReader) Size() int64 { return r.size }

func (r *rangeReader) ReadRange(ctx context.Context, off, n int64) ([]byte, error) {
	buf := make([]byte, n)
	if err := r.readInto(ctx, buf, off); err != nil {
		return nil, err
	}
	return buf, nil
}

func (r *rangeReader) readInto(ctx context.Context, buf []byte, off int64) error {
	n := int64(len(buf))
	if off < 0 || off+n > r.size {
		return &CorruptError{Key: r.key, Reason: fmt.Sprintf("range [%d,+%d) past recorded size %d", off, n, r.size)}
	}
	rc, err := r.s.GetRange(ctx, r.key, off, n)
	if err != nil {
		return err
	}
	defer rc.Close()
	if _, err := io.ReadFull(rc, buf); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return &CorruptError{Key: r.key, Reason: "object shorter than recorded", Err: err}
		}
		return err
	}
	return nil
}

func (r *rangeReader) ReadAt(p []byte, off int64) (int, error) {
	if off >= r.size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), r.size-off)
	if err := r.readInto(r.ctx, p[:n], off); err != nil {
		return 0, err
	}
	if n < int64(len(p)) {
		return int(n), io.EOF
	}
	return int(n), nil
}
