package dataset_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
)

// TestStringScanMatchesRows: a full scan of a string column finds exactly the rows whose values
// satisfy the predicate — counted here from the rows themselves, not from another read path —
// whether the fragment's pages are plain (compared in the page buffers, without a Go string per
// row) or dictionary-encoded, as other writers produce them (converted value by value). The
// values share prefixes, are empty or are not UTF-8.
func TestStringScanMatchesRows(t *testing.T) {
	words := []string{"", "\x00", "\xff", "\xff\xfe", "\xc3\x28", "a", "a\x00", "abcdefgh", "abcdefgh\x00",
		"abcdefghi", "abcdefgh" + strings.Repeat("z", 300), "https://example.com/a", "https://example.com/a/", "zzzzzzzz"}
	const rows = 3000
	source := func() *wordSource { return &wordSource{words: words, rows: rows, r: rand.New(rand.NewPCG(5, 6))} }
	var values []string // row id i holds values[i]
	src := source()
	for {
		b, err := src.Next(context.Background())
		if err != nil {
			break
		}
		values = append(values, b.Columns[1].String...)
	}
	probes := append([]string{"abcdefgh\x01", "\x01", "https://example.com/aa", "b"}, words...)
	var preds []dataset.Predicate
	for i, w := range probes {
		preds = append(preds, dataset.Eq("name", w), dataset.Between("name", w, nil), dataset.Between("name", nil, w),
			dataset.Predicate{Column: "name", Op: dataset.OpRange, Lo: w, Hi: probes[(i+3)%len(probes)]},
			dataset.In("name", w, probes[(i+1)%len(probes)]))
	}
	check := func(t *testing.T, d *dataset.Dataset) {
		t.Helper()
		for _, p := range preds {
			got, err := d.Scan(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			var want []uint64
			for id, v := range values {
				if matches(p, v) {
					want = append(want, uint64(id))
				}
			}
			if !slices.Equal(got.RowIDs, want) {
				at := 0
				for at < min(len(got.RowIDs), len(want)) && got.RowIDs[at] == want[at] {
					at++
				}
				t.Fatalf("%#v: scan found %d rows, the rows hold %d; first difference at match %d", p, len(got.RowIDs), len(want), at)
			}
		}
	}
	eachStore(t, func(t *testing.T, s storage.Store) {
		ctx := context.Background()
		d, _, err := dataset.Create(ctx, s, "words", source(), dataset.WriteOptions{RowsPerFragment: 1000, TempDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Run("plain", func(t *testing.T) { check(t, d) })
		t.Run("dictionary", func(t *testing.T) {
			rewriteWithDictionary(t, s, "words", d, 1, values)
			d, err := dataset.Open(ctx, s, "words", 0)
			if err != nil {
				t.Fatal(err)
			}
			check(t, d)
		})
	})
}

// matches evaluates a string predicate on one value, the way its definition reads.
func matches(p dataset.Predicate, v string) bool {
	switch p.Op {
	case dataset.OpEq:
		return v == p.Value.(string)
	case dataset.OpIn:
		for _, w := range p.Values {
			if v == w.(string) {
				return true
			}
		}
		return false
	}
	if p.Lo != nil && (v < p.Lo.(string) || (v == p.Lo.(string) && !p.LoInclusive)) {
		return false
	}
	if p.Hi != nil && (v > p.Hi.(string) || (v == p.Hi.(string) && !p.HiInclusive)) {
		return false
	}
	return true
}

// rewriteWithDictionary replaces fragment i of the dataset's latest version with the same rows
// written with a dictionary-encoded name column, and the manifest's size for it.
func rewriteWithDictionary(t *testing.T, s storage.Store, prefix string, d *dataset.Dataset, i int, values []string) {
	t.Helper()
	ctx := context.Background()
	frag := d.Manifest().Fragments[i]
	type row struct {
		ID   int64  `parquet:"id"`
		Name string `parquet:"name,dict"`
	}
	var buf bytes.Buffer
	w := parquet.NewGenericWriter[row](&buf, parquet.PageBufferSize(4<<10))
	for id := frag.FirstRowID; id < frag.FirstRowID+uint64(frag.Rows); id++ {
		if _, err := w.Write([]row{{ID: int64(id), Name: values[id]}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := parquet.OpenFile(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := f.Schema().Lookup("name")
	pages := f.RowGroups()[0].ColumnChunks()[leaf.ColumnIndex].Pages()
	p, err := pages.ReadPage()
	if err != nil || p.Dictionary() == nil {
		t.Fatalf("the rewritten fragment's first name page has no dictionary (%v)", err)
	}
	pages.Close()
	if err := s.Put(ctx, prefix+"/"+frag.Path, bytes.NewReader(buf.Bytes()), int64(buf.Len())); err != nil {
		t.Fatal(err)
	}
	key := prefix + "/" + dataset.VersionKey(d.Version())
	b, err := storage.ReadAll(ctx, s, key, dataset.MaxManifestSize)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["fragments"].([]any)[i].(map[string]any)["size"] = buf.Len()
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, key, bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatal(err)
	}
}
