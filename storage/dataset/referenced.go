package dataset

import (
	"context"
	"fmt"

	"github.com/cba1309c/steward/storage"
)

// The folders of a dataset whose objects manifests reference. DecodeManifest refuses a fragment
// path outside dataDir and an index file outside indicesDir/<uuid>/.
const (
	dataDir    = "data/"
	indicesDir = "_indices/"
)

// Folders returns the folders, relative to a dataset and ending in "/", that hold the objects
// manifests reference: data fragments and index segments. Nothing a manifest may reference lies
// outside them; manifests themselves live under _versions/.
func Folders() []string { return []string{dataDir, indicesDir} }

// IsManifestKey reports whether key, relative to a dataset, is the key of a manifest version.
func IsManifestKey(key string) bool {
	_, ok := parseVersionKey(key)
	return ok
}

// References returns the keys, relative to the dataset, of the fragments and index files m
// references.
func (m *Manifest) References() []string {
	var out []string
	for _, f := range m.Fragments {
		out = append(out, f.Path)
	}
	for _, ix := range m.Indices {
		for _, f := range ix.Files {
			out = append(out, f.Path)
		}
	}
	return out
}

// Referenced reads every manifest version of the dataset at prefix of store (fences included)
// and returns the keys, relative to store, of every object one of them references. It answers
// only for a readable manifest chain: a prefix without a manifest fails with
// ErrDatasetNotFound, and a manifest that cannot be read or decoded fails the call with its
// error. Whoever deletes what is not referenced must not guess.
func Referenced(ctx context.Context, store storage.Store, prefix string) (map[string]bool, error) {
	d := newDataset(store, prefix)
	refs := map[string]bool{}
	err := d.eachManifest(ctx, func(m *Manifest) {
		for _, p := range m.References() {
			refs[d.fullKey(p)] = true
		}
	})
	if err != nil {
		return nil, err
	}
	return refs, nil
}

// eachManifest reads every manifest under _versions/, oldest first, and hands it to fn. A prefix
// without any is ErrDatasetNotFound.
func (d *Dataset) eachManifest(ctx context.Context, fn func(*Manifest)) error {
	n := 0
	for info, err := range d.store.List(ctx, versionsDir) {
		if err != nil {
			return err
		}
		v, ok := parseVersionKey(info.Key)
		if !ok {
			continue
		}
		m, err := d.readManifest(ctx, v)
		if err != nil {
			return err
		}
		fn(m)
		n++
	}
	if n == 0 {
		return fmt.Errorf("%w: %q", ErrDatasetNotFound, d.prefix)
	}
	return nil
}
