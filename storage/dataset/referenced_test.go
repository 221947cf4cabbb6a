package dataset_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/cba1309c/steward/storage/storagetest"
)

// Referenced answers with every data and index file of every version, and only for a readable
// manifest chain.
func TestReferenced(t *testing.T) {
	ctx := context.Background()
	s := storagetest.NewLocal(t)
	d := create(t, s, "db/t", 1500, 1)
	mutate(t, d, dataset.MutateSpec{Op: dataset.MutateCreate, Name: "b", Columns: []string{"price"}, Type: dataset.BTree}, "inv-1")
	if _, err := dataset.ResolveSlot(ctx, s, "db/t", 2, "inv-dead"); err != nil { // a fence at 3
		t.Fatal(err)
	}
	all, err := storage.ListAll(ctx, s, "db/t/")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	manifests := 0
	for _, o := range all {
		rel := strings.TrimPrefix(o.Key, "db/t/")
		if dataset.IsManifestKey(rel) {
			manifests++
			continue
		}
		if !slices.ContainsFunc(dataset.Folders(), func(f string) bool { return strings.HasPrefix(rel, f) }) {
			t.Fatalf("%s lies outside the dataset's folders", o.Key)
		}
		want[o.Key] = true
	}
	if manifests != 3 || len(want) < 3 {
		t.Fatalf("%d manifests, %d other objects", manifests, len(want))
	}
	got, err := dataset.Referenced(ctx, s, "db/t")
	if err != nil || !maps.Equal(got, want) {
		t.Fatalf("Referenced = %v, %v; want %v", slices.Sorted(maps.Keys(got)), err, slices.Sorted(maps.Keys(want)))
	}

	// Not a dataset: nothing under _versions/, or a manifest that does not decode.
	if _, err := dataset.Referenced(ctx, s, "db"); !errors.Is(err, dataset.ErrDatasetNotFound) {
		t.Errorf("a prefix above the dataset: %v", err)
	}
	if err := s.Put(ctx, "db/t/"+dataset.VersionKey(4), strings.NewReader("{"), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := dataset.Referenced(ctx, s, "db/t"); !errors.Is(err, storage.ErrCorrupt) {
		t.Errorf("a corrupt manifest in the chain: %v", err)
	}
}

func TestIsManifestKey(t *testing.T) {
	for key, want := range map[string]bool{
		dataset.VersionKey(1):                             true,
		dataset.VersionKey(1 << 40):                       true,
		"_versions/1.manifest":                            false,
		"_versions/00000000000000000000.manifest":         false,
		"_versions/" + strings.Repeat("0", 19) + "1.json": false,
		"data/" + strings.Repeat("0", 19) + "1.manifest":  false,
		"x/" + dataset.VersionKey(1):                      false,
	} {
		if got := dataset.IsManifestKey(key); got != want {
			t.Errorf("IsManifestKey(%q) = %v, want %v", key, got, want)
		}
	}
}
