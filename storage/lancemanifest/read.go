package lancemanifest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/cba1309c/steward/storage"
)

// Read reads version v of the Lance dataset at path (store-relative) from st, under either of
// Lance's manifest namings (V2 `<u64max-v:020>.manifest`, V1 `<v>.manifest`).
func Read(ctx context.Context, st storage.Store, path string, v int64) (Manifest, error) {
	if v < 1 {
		return Manifest{}, fmt.Errorf("%w: version %d", ErrNotFound, v)
	}
	base := strings.Trim(path, "/") + "/_versions/"
	for _, name := range []string{fmt.Sprintf("%020d.manifest", uint64(math.MaxUint64)-uint64(v)), fmt.Sprintf("%d.manifest", v)} {
		b, err := storage.ReadAll(ctx, st, base+name, MaxManifestSize)
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			return Manifest{}, fmt.Errorf("read %s: %w", name, err)
		}
		m, err := Decode(b)
		if err != nil {
			return Manifest{}, fmt.Errorf("%s: %w", name, err)
		}
		if m.Version != uint64(v) {
			return Manifest{}, fmt.Errorf("%w: %s holds version %d", ErrCorrupt, name, m.Version)
		}
		return m, nil
	}
	return Manifest{}, fmt.Errorf("%w: version %d of %s", ErrNotFound, v, path)
}
