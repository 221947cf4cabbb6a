package dataset

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// FormatVersion is the manifest format this package writes and the newest it reads.
const FormatVersion = 1

// MaxManifestSize bounds a manifest (64 MiB): a larger object under _versions/ is corrupt, and
// no reader loads more than one byte past it.
const MaxManifestSize = 64 << 20

// Transaction operations.
const (
	OpCreate       = "CREATE"
	OpAppend       = "APPEND"
	OpCreateIndex  = "CREATE_INDEX"
	OpReplaceIndex = "REPLACE_INDEX"
	OpDropIndex    = "DROP_INDEX"
	OpFence        = "FENCE"
)

// IndexType names an index kind.
type IndexType string

// Index kinds.
const (
	BTree  IndexType = "BTREE"
	Bitmap IndexType = "BITMAP"
)

// Manifest is one version of a dataset.
type Manifest struct {
	FormatVersion  int         `json:"format_version"`
	Version        int64       `json:"version"`
	Schema         Schema      `json:"schema"`
	Fragments      []Fragment  `json:"fragments"`
	Indices        []IndexMeta `json:"indices"`
	NextFragmentID uint64      `json:"next_fragment_id"`
	NextRowID      uint64      `json:"next_row_id"`
	Transaction    Transaction `json:"transaction"`
	CreatedAt      time.Time   `json:"created_at"`
}

// Fragment is one Parquet file. Its rows have ids FirstRowID .. FirstRowID+Rows-1.
type Fragment struct {
	ID         uint64 `json:"id"`
	Path       string `json:"path"` // relative to the dataset, under data/
	Rows       int64  `json:"rows"`
	FirstRowID uint64 `json:"first_row_id"`
	Size       int64  `json:"size"`
}

// IndexMeta describes one index.
type IndexMeta struct {
	UUID     string            `json:"uuid"`
	Name     string            `json:"name"` // stored as given; looked up case-folded
	FieldIDs []int32           `json:"field_ids"`
	Type     IndexType         `json:"type"`
	Params   map[string]string `json:"params,omitempty"`
	Files    []IndexFile       `json:"files"`
	// DatasetVersion is the version the index was built on; FragmentIDs the fragments it covers.
	// Rows of later fragments are found by scanning them.
	DatasetVersion int64    `json:"dataset_version"`
	FragmentIDs    []uint64 `json:"fragment_ids"`
	Rows           uint64   `json:"rows"`
}

// IndexFile is one segment object.
type IndexFile struct {
	Path string `json:"path"` // relative to the dataset, under _indices/<uuid>/
	Size int64  `json:"size"`
}

// Transaction records what produced a version.
type Transaction struct {
	Op           string `json:"op"`
	InvocationID string `json:"invocation_id,omitempty"`
	ReadVersion  int64  `json:"read_version"`
	// Index is the stored name of the index a CREATE/REPLACE/DROP touched.
	Index string `json:"index,omitempty"`
	// FencedInvocation is set on a FENCE: the invocation that can no longer commit here.
	FencedInvocation string `json:"fenced_invocation,omitempty"`
}

// IsFence reports whether m is a fence (a no-op version).
func (m *Manifest) IsFence() bool { return m.Transaction.Op == OpFence }

// Rows is the total row count.
func (m *Manifest) Rows() int64 {
	var n int64
	for _, f := range m.Fragments {
		n += f.Rows
	}
	return n
}

const versionsDir = "_versions/"

// VersionKey is the manifest key of version v, relative to the dataset.
func VersionKey(v int64) string { return fmt.Sprintf("%s%020d.manifest", versionsDir, v) }

// parseVersionKey extracts v from a VersionKey, or returns false for other names.
func parseVersionKey(key string) (int64, bool) {
	name, ok := strings.CutPrefix(key, versionsDir)
	if !ok {
		return 0, false
	}
	digits, ok := strings.CutSuffix(name, ".manifest")
	if !ok || len(digits) != 20 {
		return 0, false
	}
	v, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || v < 1 {
		return 0, false
	}
	return v, true
}

// EncodeManifest renders m as indented JSON.
func EncodeManifest(m *Manifest) ([]byte, error) {
	if err := m.validate(); err != nil {
		return nil, invalidf("manifest: %v", err)
	}
	return json.MarshalIndent(m, "", "  ")
}

// DecodeManifest parses and validates a manifest. Malformed input is a *CorruptError; a newer
// format is ErrNotSupported. It never panics.
func DecodeManifest(b []byte) (*Manifest, error) {
	if len(b) > MaxManifestSize {
		return nil, &CorruptError{Key: "manifest", Reason: fmt.Sprintf("%d bytes exceeds the manifest limit", len(b))}
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&m); err != nil {
		return nil, &CorruptError{Key: "manifest", Reason: "invalid JSON", Err: err}
	}
	if dec.More() {
		return nil, &CorruptError{Key: "manifest", Reason: "trailing data after JSON"}
	}
	if m.FormatVersion > FormatVersion {
		return nil, fmt.Errorf("%w: manifest format %d (this build reads up to %d)", ErrNotSupported, m.FormatVersion, FormatVersion)
	}
	if err := m.validate(); err != nil {
		return nil, &CorruptError{Key: "manifest", Reason: err.Error()}
	}
	return &m, nil
}

func (m *Manifest) validate() error {
	if m.FormatVersion < 1 {
		return fmt.Errorf("format version %d", m.FormatVersion)
	}
	if m.Version < 1 {
		return fmt.Errorf("version %d", m.Version)
	}
	if err := m.Schema.validate(); err != nil {
		return err
	}
	frags := map[uint64]bool{}
	var nextRow uint64
	for _, f := range m.Fragments {
		switch {
		case frags[f.ID] || f.ID >= m.NextFragmentID:
			return fmt.Errorf("fragment id %d duplicated or not below next_fragment_id", f.ID)
		case !strings.HasPrefix(f.Path, dataDir) || !cleanPath(f.Path):
			return fmt.Errorf("fragment %d path %q", f.ID, f.Path)
		case f.Rows < 0 || f.Size < 0 || f.FirstRowID < nextRow:
			return fmt.Errorf("fragment %d rows/size/first_row_id out of order", f.ID)
		}
		frags[f.ID] = true
		nextRow = f.FirstRowID + uint64(f.Rows)
	}
	if nextRow > m.NextRowID {
		return fmt.Errorf("next_row_id %d below rows in fragments", m.NextRowID)
	}
	uuids := map[string]bool{}
	for _, ix := range m.Indices {
		if err := ix.validate(m, frags); err != nil {
			return fmt.Errorf("index %q: %w", ix.Name, err)
		}
		if uuids[ix.UUID] {
			return fmt.Errorf("duplicate index uuid %s", ix.UUID)
		}
		uuids[ix.UUID] = true
	}
	if m.Transaction.Op == "" {
		return fmt.Errorf("transaction without op")
	}
	return nil
}

func (ix *IndexMeta) validate(m *Manifest, frags map[uint64]bool) error {
	if _, err := uuid.Parse(ix.UUID); err != nil {
		return fmt.Errorf("uuid: %w", err)
	}
	if ix.Name == "" || ix.Type != BTree && ix.Type != Bitmap || len(ix.FieldIDs) != 1 || len(ix.Files) == 0 {
		return fmt.Errorf("bad name, type, fields or files")
	}
	if _, ok := m.Schema.FieldByID(ix.FieldIDs[0]); !ok {
		return fmt.Errorf("field id %d not in schema", ix.FieldIDs[0])
	}
	if ix.DatasetVersion < 1 || ix.DatasetVersion >= m.Version+1 {
		return fmt.Errorf("dataset_version %d", ix.DatasetVersion)
	}
	for _, id := range ix.FragmentIDs {
		if !frags[id] {
			return fmt.Errorf("covers unknown fragment %d", id)
		}
	}
	dir := indicesDir + ix.UUID + "/"
	for _, f := range ix.Files {
		if !strings.HasPrefix(f.Path, dir) || !cleanPath(f.Path) || f.Size < 0 {
			return fmt.Errorf("file %q outside %s", f.Path, dir)
		}
	}
	return nil
}

func cleanPath(p string) bool { return path.Clean(p) == p && !strings.Contains(p, "..") }

// clone deep-copies m so a new version can be derived without touching the pinned one.
func (m *Manifest) clone() *Manifest {
	c := *m
	c.Schema.Fields = append([]Field(nil), m.Schema.Fields...)
	c.Fragments = append([]Fragment(nil), m.Fragments...)
	c.Indices = make([]IndexMeta, len(m.Indices))
	for i, ix := range m.Indices {
		ix.FieldIDs = append([]int32(nil), ix.FieldIDs...)
		ix.Files = append([]IndexFile(nil), ix.Files...)
		ix.FragmentIDs = append([]uint64(nil), ix.FragmentIDs...)
		if ix.Params != nil {
			p := make(map[string]string, len(ix.Params))
			for k, v := range ix.Params {
				p[k] = v
			}
			ix.Params = p
		}
		c.Indices[i] = ix
	}
	return &c
}

func nowUTC() time.Time { return time.Now().UTC() }
