package dataset_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/cba1309c/steward/storage/index"
	"github.com/cba1309c/steward/storage/storagetest"
)

// TestBadInput damages one object of a healthy dataset per case and checks the typed error
// (and native code) of the operation that meets it.
func TestBadInput(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) (storage.Store, *dataset.Dataset) {
		s := storagetest.NewLocal(t)
		d := create(t, s, "bad", 1500, 1)
		res := mutate(t, d, dataset.MutateSpec{Op: dataset.MutateCreate, Name: "b", Columns: []string{"price"}, Type: dataset.BTree}, "x")
		d, err := dataset.Open(ctx, s, "bad", res.Version)
		if err != nil {
			t.Fatal(err)
		}
		return s, d
	}
	overwrite := func(t *testing.T, s storage.Store, key string, edit func([]byte) []byte) {
		b, err := storage.ReadAll(ctx, s, key, dataset.MaxManifestSize)
		if err != nil {
			t.Fatal(err)
		}
		b = edit(b)
		if err := s.Put(ctx, key, bytes.NewReader(b), int64(len(b))); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name     string
		damage   func(t *testing.T, s storage.Store, d *dataset.Dataset)
		op       func(s storage.Store) error
		want     error
		wantCode int
	}{
		{
			name: "truncated manifest",
			damage: func(t *testing.T, s storage.Store, d *dataset.Dataset) {
				overwrite(t, s, "bad/"+dataset.VersionKey(2), func(b []byte) []byte { return b[:len(b)/2] })
			},
			op:   func(s storage.Store) error { _, err := dataset.Open(ctx, s, "bad", 0); return err },
			want: storage.ErrCorrupt, wantCode: dataset.CodeIO,
		},
		{
			name: "garbage manifest",
			damage: func(t *testing.T, s storage.Store, d *dataset.Dataset) {
				overwrite(t, s, "bad/"+dataset.VersionKey(2), func([]byte) []byte { return []byte("\x00\xffnot json") })
			},
			op:   func(s storage.Store) error { _, err := dataset.Versions(ctx, s, "bad"); return err },
			want: storage.ErrCorrupt, wantCode: dataset.CodeIO,
		},
		{
			name: "manifest with another version number",
			damage: func(t *testing.T, s storage.Store, d *dataset.Dataset) {
				overwrite(t, s, "bad/"+dataset.VersionKey(2), func(b []byte) []byte {
					return bytes.Replace(b, []byte(`"version": 2`), []byte(`"version": 7`), 1)
				})
			},
			op:   func(s storage.Store) error { _, err := dataset.Open(ctx, s, "bad", 2); return err },
			want: storage.ErrCorrupt, wantCode: dataset.CodeIO,
		},
		{
			name: "newer manifest format",
			damage: func(t *testing.T, s storage.Store, d *dataset.Dataset) {
				overwrite(t, s, "bad/"+dataset.VersionKey(2), func(b []byte) []byte {
					return bytes.Replace(b, []byte(`"format_version": 1`), []byte(`"format_version": 99`), 1)
				})
			},
			op:   func(s storage.Store) error { _, err := dataset.Open(ctx, s, "bad", 0); return err },
			want: dataset.ErrNotSupported, wantCode: dataset.CodeNotSupported,
		},
		{
			name: "missing fragment",
			damage: func(t *testing.T, s storage.Store, d *dataset.Dataset) {
				s.DeleteBatch(ctx, []string{"bad/" + d.Manifest().Fragments[1].Path})
			},
			op: func(s storage.Store) error {
				d, _ := dataset.Open(ctx, s, "bad", 0)
				_, err := d.Scan(ctx, dataset.Eq("id", 1))
				return err
			},
			want: dataset.ErrMissingFragment, wantCode: dataset.CodeIO,
		},
		{
			name: "missing fragment during build",
			damage: func(t *testing.T, s storage.Store, d *dataset.Dataset) {
				s.DeleteBatch(ctx, []string{"bad/" + d.Manifest().Fragments[0].Path})
			},
			op: func(s storage.Store) error {
				d, _ := dataset.Open(ctx, s, "bad", 0)
				_, err := d.Mutate(ctx, dataset.MutateSpec{Op: dataset.MutateCreate, Name: "n", Columns: []string{"name"}, Type: dataset.BTree}, dataset.MutateOptions{})
				return err
			},
			want: dataset.ErrMissingFragment, wantCode: dataset.CodeIO,
		},
		{
			name: "garbage fragment",
			damage: func(t *testing.T, s storage.Store, d *dataset.Dataset) {
				overwrite(t, s, "bad/"+d.Manifest().Fragments[0].Path, func(b []byte) []byte {
					return bytes.Repeat([]byte{0x5a}, len(b))
				})
			},
			op: func(s storage.Store) error {
				d, _ := dataset.Open(ctx, s, "bad", 0)
				_, err := d.Scan(ctx, dataset.Eq("id", 1))
				return err
			},
			want: storage.ErrCorrupt, wantCode: dataset.CodeIO,
		},
		{
			name: "truncated index segment",
			damage: func(t *testing.T, s storage.Store, d *dataset.Dataset) {
				overwrite(t, s, "bad/"+d.Indices()[0].Files[0].Path, func(b []byte) []byte { return b[:len(b)-10] })
			},
			op: func(s storage.Store) error {
				d, _ := dataset.Open(ctx, s, "bad", 0)
				_, err := d.Query(ctx, dataset.Eq("price", 1.0))
				return err
			},
			want: index.ErrCorruptSegment, wantCode: dataset.CodeIndex,
		},
		{
			name: "bit-flipped index page",
			damage: func(t *testing.T, s storage.Store, d *dataset.Dataset) {
				overwrite(t, s, "bad/"+d.Indices()[0].Files[0].Path, func(b []byte) []byte { b[20] ^= 1; return b })
			},
			op: func(s storage.Store) error {
				d, _ := dataset.Open(ctx, s, "bad", 0)
				_, err := d.Query(ctx, dataset.Between("price", nil, nil))
				return err
			},
			want: index.ErrCorruptSegment, wantCode: dataset.CodeIndex,
		},
		{
			name: "fragment column of another type",
			damage: func(t *testing.T, s storage.Store, d *dataset.Dataset) {
				m := d.Manifest()
				for i := range m.Schema.Fields {
					if m.Schema.Fields[i].Name == "price" {
						m.Schema.Fields[i].Type = dataset.Int64
					}
				}
				m.Indices = nil
				m.Version++
				b, _ := dataset.EncodeManifest(m)
				if err := s.PutIfAbsent(ctx, "bad/"+dataset.VersionKey(m.Version), bytes.NewReader(b), int64(len(b))); err != nil {
					t.Fatal(err)
				}
			},
			op: func(s storage.Store) error {
				d, _ := dataset.Open(ctx, s, "bad", 0)
				_, err := d.Scan(ctx, dataset.Eq("price", 1))
				return err
			},
			want: storage.ErrCorrupt, wantCode: dataset.CodeIO,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, d := setup(t)
			tc.damage(t, s, d)
			err := tc.op(s)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if got := dataset.NativeCode(err); got != tc.wantCode {
				t.Fatalf("code %d, want %d for %v", got, tc.wantCode, err)
			}
		})
	}
}

func TestNativeCode(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, dataset.CodeOK},
		{"conflict", &dataset.CommitConflictError{Attempted: 3, Latest: 4}, dataset.CodeCommitConflict},
		{"schema", &dataset.SchemaError{Field: "a", Want: dataset.Int64, Got: dataset.String}, dataset.CodeInvalidArgument},
		{"ambiguous", &dataset.AmbiguousNameError{Name: "a"}, dataset.CodeInvalidArgument},
		{"exists", dataset.ErrIndexExists, dataset.CodeAlreadyExists},
		{"not found", dataset.ErrIndexNotFound, dataset.CodeNotFound},
		{"unavailable", &storage.OpError{Op: "get", Kind: storage.ErrUnavailable}, dataset.CodeIO},
		{"link in a local store", &storage.OpError{Op: "get", Kind: storage.ErrSymlink}, dataset.CodeIO},
		{"special file", &storage.OpError{Op: "get", Kind: storage.ErrNotRegular}, dataset.CodeIO},
		{"too large", &storage.OpError{Op: "get", Kind: storage.ErrTooLarge}, dataset.CodeIO},
		{"corrupt segment", &index.CorruptError{Segment: "btree"}, dataset.CodeIndex},
		{"corrupt manifest", &dataset.CorruptError{Key: "m"}, dataset.CodeIO},
		{"not supported", dataset.ErrNotSupported, dataset.CodeNotSupported},
		{"refused upload", dataset.ErrUploadRefused, dataset.CodeIO},
		{"other", errors.New("boom"), dataset.CodeInternal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := dataset.NativeCode(tc.err); got != tc.want {
				t.Fatalf("NativeCode(%v) = %d, want %d", tc.err, got, tc.want)
			}
		})
	}
}

func FuzzDecodeManifest(f *testing.F) {
	s := storagetest.NewLocal(f)
	ctx := context.Background()
	d, _, err := dataset.Create(ctx, s, "f", dataset.NewGenerator(50, 1), dataset.WriteOptions{RowsPerFragment: 20})
	if err != nil {
		f.Fatal(err)
	}
	res, err := d.Mutate(ctx, dataset.MutateSpec{Op: dataset.MutateCreate, Name: "i", Columns: []string{"id"}, Type: dataset.BTree}, dataset.MutateOptions{InvocationID: "x"})
	if err != nil {
		f.Fatal(err)
	}
	for v := int64(1); v <= res.Version; v++ {
		b, _ := storage.ReadAll(ctx, s, "f/"+dataset.VersionKey(v), dataset.MaxManifestSize)
		f.Add(b)
	}
	f.Add([]byte(`{"format_version":1,"version":1}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(strings.Repeat("[", 100)))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := dataset.DecodeManifest(data)
		if err != nil {
			if !errors.Is(err, storage.ErrCorrupt) && !errors.Is(err, dataset.ErrNotSupported) {
				t.Fatalf("unclassified: %v", err)
			}
			return
		}
		// Whatever decodes must re-encode and decode to the same thing.
		b, err := dataset.EncodeManifest(m)
		if err != nil {
			t.Fatalf("decoded manifest does not re-encode: %v", err)
		}
		if _, err := dataset.DecodeManifest(b); err != nil {
			t.Fatalf("round trip: %v", err)
		}
	})
}
