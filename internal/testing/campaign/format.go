package campaign

import (
	"context"
	"fmt"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
)

// Engines a campaign runs its mutations on.
const (
	EngineBuiltin = "builtin" // the built-in engine and its own manifest format (the default)
	EngineLance   = "lance"   // the Lance engine (engines/lance) on real Lance datasets
)

// format is one engine's side of a campaign: how its datasets are made, which columns its
// mutations index, and how its version chain is read back for the checker.
type format interface {
	// engine is the engine name every job carries ("" for the built-in one).
	engine() string
	// columns are the indexable columns of the datasets create makes.
	columns() []column
	// create makes the dataset at path, seeded by seed, and returns its latest version.
	create(ctx context.Context, path string, seed uint64) (int64, error)
	// latest is the dataset's latest version, the version a job is pinned at.
	latest(ctx context.Context, path string) (int64, error)
	// read reads the dataset's whole version chain (chain.setup left for the caller), and adds to referenced every key a version
	// of it references (true: it must exist) or that may exist beside them (false: Lance's own
	// hint file). The slot claims are read beside it for every format (readClaims).
	read(ctx context.Context, path string, referenced map[string]bool) (*chain, error)
	// op is the operation a commit of a job's op records (before: the index was present at the
	// pinned version).
	op(jobOp string, before bool) string
}

var (
	_ format = builtinFormat{}
	_ format = (*lanceFormat)(nil)
)

// builtinFormat is the built-in engine's dataset format (storage/dataset).
type builtinFormat struct {
	store storage.Store
	rows  int64
}

func (builtinFormat) engine() string    { return "" }
func (builtinFormat) columns() []column { return builtinColumns }

// create writes version 1 with two fragments.
func (f builtinFormat) create(ctx context.Context, path string, seed uint64) (int64, error) {
	src := dataset.NewGenerator(f.rows, seed)
	opts := dataset.WriteOptions{RowsPerFragment: int(f.rows/2 + 1)}
	if _, _, err := dataset.Create(ctx, f.store, path, src, opts); err != nil {
		return 0, err
	}
	return 1, nil
}

func (f builtinFormat) latest(ctx context.Context, path string) (int64, error) {
	return dataset.LatestVersion(ctx, f.store, path)
}

// read opens every manifest; a version references its manifest and what Manifest.References
// names (data files and index files).
func (f builtinFormat) read(ctx context.Context, path string, referenced map[string]bool) (*chain, error) {
	latest, err := dataset.LatestVersion(ctx, f.store, path)
	if err != nil {
		return nil, err
	}
	c := &chain{path: path, commits: map[string]int64{}}
	for v := int64(1); v <= latest; v++ {
		d, err := dataset.Open(ctx, f.store, path, v)
		if err != nil {
			return nil, fmt.Errorf("version %d: %w", v, err)
		}
		m := d.Manifest()
		referenced[path+"/"+dataset.VersionKey(v)] = true
		for _, p := range m.References() {
			referenced[path+"/"+p] = true
		}
		ver := version{Version: m.Version, ReadVersion: m.Transaction.ReadVersion, Op: m.Transaction.Op,
			Invocation: m.Transaction.InvocationID}
		switch {
		case m.IsFence():
			ver.Kind = kindFence
		case ver.Invocation != "":
			ver.Kind = kindCommit
		}
		for _, ix := range m.Indices {
			ver.Indices = append(ver.Indices, indexRef{Name: ix.Name, UUID: ix.UUID})
		}
		c.versions = append(c.versions, ver)
	}
	return c, nil
}

// op: a REPLACE of an absent index is recorded as a CREATE.
func (builtinFormat) op(jobOp string, before bool) string {
	if jobOp == rpc.OpReplace && !before {
		return dataset.OpCreateIndex
	}
	return map[string]string{rpc.OpCreate: dataset.OpCreateIndex, rpc.OpReplace: dataset.OpReplaceIndex, rpc.OpDrop: dataset.OpDropIndex}[jobOp]
}
