package campaign

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/slot"
)

// LanceTools locates the Lance engine installed by scripts/lance.sh.
type LanceTools struct {
	// Python is the venv's interpreter (.tools/lance/bin/python).
	Python string
	// Dir is engines/lance: engine.py (registered in every sidecar) and lancectl.py (the
	// checker's reader, Lance's own library outside steward).
	Dir string
}

// engineCommand is the COMMAND of the sidecars' `--engine lance=COMMAND`.
func (t LanceTools) engineCommand() string {
	return t.Python + " -B -s -E " + filepath.Join(t.Dir, "engine.py")
}

func (t LanceTools) check() error {
	for _, p := range []string{t.Python, filepath.Join(t.Dir, "engine.py"), filepath.Join(t.Dir, "lancectl.py")} {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("%w: Lance tool path %q is not absolute", ErrConfig, p)
		}
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%w: Lance engine not installed (scripts/lance.sh install): %w", ErrConfig, err)
		}
	}
	return nil
}

// lanceDim is the width of the generated datasets' vector column: small, so that an IVF_PQ build
// takes a fraction of a second and the campaign stays about faults, not build time.
const lanceDim = 16

// lanceColumns are the columns of lancectl's generated table the campaign indexes, one index name
// each, with every index family the Lance engine builds: scalar (BTREE, BITMAP), LABEL_LIST,
// INVERTED (full text) and a vector index (IVF_PQ).
var lanceColumns = []column{
	{index: "ix_id", name: "id", typ: rpc.FieldInt64, types: []string{rpc.IndexBTree}},
	{index: "ix_category", name: "category", typ: rpc.FieldString, types: scalarTypes},
	{index: "ix_labels", name: "labels", typ: rpc.FieldListString, types: []string{"LABEL_LIST"}},
	{index: "ix_text", name: "text", typ: rpc.FieldString, types: []string{"INVERTED"}},
	{index: "ix_vec", name: "vec", typ: fmt.Sprintf("vector<float32,%d>", lanceDim), types: []string{"IVF_PQ"},
		params: map[string]string{"num_partitions": "4", "num_sub_vectors": "4"}},
}

// lanceOOMLimit is the per-job worker memory limit of the oom kind on Lance: the Lance engine
// acts out no oom fault, so the kind lowers the job's memory limit (rpc.WorkerLimits) below what
// the engine's domain needs for the campaign's small builds (peaks of 39-43 MiB measured here)
// and the real engine is OOM-killed by the kernel, loading pylance or building.
const lanceOOMLimit = 32 << 20

// lanceFaults are the worker faults the Lance engine acts out (engines/lance/engine.py ENGINE
// "faults"); the sidecar refuses any other for it.
var lanceFaults = []string{KindCrashAfterBuild, KindCrashBeforeCommit, KindCrashAfterCommit}

// LanceKinds lists the fault kinds of a Lance campaign, KindClean first: the engine's own worker
// faults, a real OOM kill under a lowered memory limit, and every fault the campaign injects
// around the send (sidecar SIGKILL, MinIO outage, deadlines).
func LanceKinds() []string {
	out := []string{KindClean}
	out = append(out, lanceFaults...)
	return append(out, KindOOM, KindSidecarKill, KindMinIOOutage, KindDeadlineUnfundable, KindDeadlineTight)
}

// lanceFormat is the Lance engine's side: datasets made and read with Lance's own library
// (lancectl.py through the venv's Python), latest versions from the `_versions/` listing.
type lanceFormat struct {
	tools     LanceTools
	store     storage.Store // the campaign's view of the bucket
	bucket    string
	endpoint  string
	creds     *rpc.Credentials
	rows      int64
	workDir   string           // TMPDIR of lancectl runs
	fragments int              // the fragments create writes
	setup     map[string]int64 // path → versions made by create
}

func (f *lanceFormat) engine() string    { return EngineLance }
func (f *lanceFormat) columns() []column { return lanceColumns }

// ctl runs lancectl.py with the S3 settings in an allow-listed environment and decodes its JSON.
func (f *lanceFormat) ctl(ctx context.Context, out any, args ...string) error {
	return f.python(ctx, out, append([]string{filepath.Join(f.tools.Dir, "lancectl.py")}, args...)...)
}

// script runs the Python program src (with lancectl.py's S3 settings in its environment) on args
// and decodes its JSON.
func (f *lanceFormat) script(ctx context.Context, out any, src string, args ...string) error {
	return f.python(ctx, out, append([]string{"-c", src}, args...)...)
}

func (f *lanceFormat) python(ctx context.Context, out any, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, f.tools.Python, append([]string{"-B", "-s", "-E"}, args...)...)
	what := args[0]
	if what == "-c" {
		what = "script"
	} else if len(args) > 1 {
		what = filepath.Base(what) + " " + args[1]
	}
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "TMPDIR=" + f.workDir, "HOME=" + f.workDir,
		"STEWARD_S3_ENDPOINT=" + f.endpoint, "STEWARD_S3_ACCESS_KEY=" + f.creds.AccessKey, "STEWARD_S3_SECRET_KEY=" + f.creds.SecretKey}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", what, err, lastLines(stderr.String(), 5))
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func (f *lanceFormat) uri(path string) string { return "s3://" + f.bucket + "/" + path }

// create writes f.fragments fragments (one version each) with lancectl, and commits a BITMAP index
// on category the plain pylance way (the next version), so that the first DROPs and REPLACEs find
// an index.
func (f *lanceFormat) create(ctx context.Context, path string, seed uint64) (int64, error) {
	var out struct {
		Version int64 `json:"version"`
	}
	err := f.ctl(ctx, &out, "create", f.uri(path), "--rows", strconv.FormatInt(f.rows, 10), "--seed", strconv.FormatUint(seed, 10),
		"--fragments", strconv.Itoa(f.fragments), "--dim", strconv.Itoa(lanceDim))
	if err == nil {
		col := lanceColumns[1]
		err = f.ctl(ctx, &out, "index", f.uri(path), col.name, rpc.IndexBitmap, col.index)
	}
	if err != nil {
		return 0, err
	}
	return out.Version, nil
}

// latest lists `_versions/`: Lance names version v's manifest `<v>.manifest` (V1 naming) or
// `<MaxUint64 - v, 20 digits>.manifest` (V2 naming, what pylance 14 writes), both read by
// slot.ManifestVersion as the gateway reads them.
func (f *lanceFormat) latest(ctx context.Context, path string) (int64, error) {
	var latest int64
	for o, err := range f.store.List(ctx, path+"/_versions/") {
		if err != nil {
			return 0, err
		}
		if v, ok := slot.ManifestVersion(strings.TrimPrefix(o.Key, path+"/_versions/")); ok && v > latest {
			latest = v
		}
	}
	if latest == 0 {
		return 0, fmt.Errorf("%s: no Lance manifest in _versions/", path)
	}
	return latest, nil
}

// lanceChain is what `lancectl.py chain` prints.
type lanceChain struct {
	Latest   int64 `json:"latest"`
	Versions []struct {
		Version     int64  `json:"version"`
		ReadVersion int64  `json:"read_version"`
		Operation   string `json:"operation"`
		Invocation  string `json:"invocation"`
		Kind        string `json:"kind"`
		Indices     []struct {
			Name string `json:"name"`
			UUID string `json:"uuid"`
		} `json:"indices"`
	} `json:"versions"`
	Files []struct {
		Version int64  `json:"version"`
		Path    string `json:"path"`
		Type    string `json:"type"`
	} `json:"files"`
}

// read reads the chain with Lance's own library.
//
// What a Lance version references (the orphan rule): every file Lance's tracked_files lists for
// some version — its manifest, its transaction file, the data and deletion files of its
// fragments, and every file of every index segment it lists (so a stray file inside a listed
// `_indices/<uuid>/` is an orphan too); and Lance's `_versions/latest_version_hint.json`, which
// the gateway lets a commit rewrite. The commit-slot claims are read beside it for every engine
// (readClaims). Everything else under the dataset must be owned by a ticket: the gateway takes
// custody of each object an engine writes (an index segment's files, a commit's
// `_transactions/<pinned>-<uuid>.txn`).
func (f *lanceFormat) read(ctx context.Context, path string, referenced map[string]bool) (*chain, error) {
	var lc lanceChain
	if err := f.ctl(ctx, &lc, "chain", f.uri(path)); err != nil {
		return nil, err
	}
	c := &chain{path: path, commits: map[string]int64{}}
	for i, lv := range lc.Versions {
		if lv.Version != int64(i)+1 {
			return nil, fmt.Errorf("version %d missing from the chain (found %d)", i+1, lv.Version)
		}
		v := version{Version: lv.Version, ReadVersion: lv.ReadVersion, Op: lv.Operation, Invocation: lv.Invocation}
		if lv.Invocation != "" && (lv.Kind == kindCommit || lv.Kind == kindFence) {
			v.Kind = lv.Kind
		}
		for _, ix := range lv.Indices {
			v.Indices = append(v.Indices, indexRef{Name: ix.Name, UUID: ix.UUID})
		}
		c.versions = append(c.versions, v)
	}
	if int64(len(c.versions)) != lc.Latest {
		return nil, fmt.Errorf("%d versions listed, latest %d", len(c.versions), lc.Latest)
	}
	for _, file := range lc.Files {
		referenced[path+"/"+file.Path] = true
	}
	referenced[path+"/_versions/latest_version_hint.json"] = false // Lance's hint, not named by a manifest
	return c, nil
}

// op: every Lance index mutation of the engine (CREATE, REPLACE, DROP) is one CreateIndex
// operation with new and removed segments.
func (f *lanceFormat) op(string, bool) string { return "CreateIndex" }
