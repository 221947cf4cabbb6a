package campaign

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
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
	tools    LanceTools
	store    storage.Store // the campaign's view of the bucket
	bucket   string
	endpoint string
	creds    *rpc.Credentials
	rows     int64
	workDir  string           // TMPDIR of lancectl runs
	setup    map[string]int64 // path → versions made by create
}

func (f *lanceFormat) engine() string    { return EngineLance }
func (f *lanceFormat) columns() []column { return lanceColumns }

// ctl runs lancectl.py with the S3 settings in an allow-listed environment and decodes its JSON.
func (f *lanceFormat) ctl(ctx context.Context, out any, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, f.tools.Python, append([]string{"-B", "-s", "-E", filepath.Join(f.tools.Dir, "lancectl.py")}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "TMPDIR=" + f.workDir, "HOME=" + f.workDir,
		"STEWARD_S3_ENDPOINT=" + f.endpoint, "STEWARD_S3_ACCESS_KEY=" + f.creds.AccessKey, "STEWARD_S3_SECRET_KEY=" + f.creds.SecretKey}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("lancectl %s: %w: %s", args[0], err, lastLines(stderr.String(), 5))
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		return fmt.Errorf("lancectl %s: %w", args[0], err)
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func (f *lanceFormat) uri(path string) string { return "s3://" + f.bucket + "/" + path }

// create writes two fragments (versions 1 and 2) with lancectl, and commits a BITMAP index on
// category the plain pylance way (version 3), so that the first DROPs and REPLACEs find an index.
func (f *lanceFormat) create(ctx context.Context, path string, seed uint64) (int64, error) {
	var out struct {
		Version int64 `json:"version"`
	}
	err := f.ctl(ctx, &out, "create", f.uri(path), "--rows", strconv.FormatInt(f.rows, 10), "--seed", strconv.FormatUint(seed, 10),
		"--fragments", "2", "--dim", strconv.Itoa(lanceDim))
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
// `<MaxUint64 - v, 20 digits>.manifest` (V2 naming, what pylance 14 writes).
func (f *lanceFormat) latest(ctx context.Context, path string) (int64, error) {
	var latest int64
	for o, err := range f.store.List(ctx, path+"/_versions/") {
		if err != nil {
			return 0, err
		}
		if v, ok := lanceManifestVersion(strings.TrimPrefix(o.Key, path+"/_versions/")); ok && v > latest {
			latest = v
		}
	}
	if latest == 0 {
		return 0, fmt.Errorf("%s: no Lance manifest in _versions/", path)
	}
	return latest, nil
}

func lanceManifestVersion(name string) (int64, bool) {
	n, ok := strings.CutSuffix(name, ".manifest")
	if !ok || strings.Contains(n, "/") {
		return 0, false
	}
	u, err := strconv.ParseUint(n, 10, 64)
	if err != nil {
		return 0, false
	}
	if u > math.MaxInt64 {
		u = math.MaxUint64 - u
	}
	return int64(u), u > 0
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

// lanceClaim is a commit-slot claim, `_steward/slots/<v:020>.json` (engines/lance/slots.py).
type lanceClaim struct {
	Invocation string `json:"invocation"`
	Kind       string `json:"kind"`
}

// claimsFolder holds the Lance engine's commit-slot claims under a dataset.
const claimsFolder = "_steward/slots/"

// read reads the chain with Lance's own library, and the slot claims from the bucket.
//
// What a Lance version references (the orphan rule): every file Lance's tracked_files lists for
// some version — its manifest, its transaction file, the data and deletion files of its
// fragments, and every file of every index segment it lists (so a stray file inside a listed
// `_indices/<uuid>/` is an orphan too); Lance's `_versions/latest_version_hint.json`, which it
// rewrites at every commit; and `_steward/slots/<v>.json` of every version v in the chain (the
// claim the version's writer took). Everything else under the dataset must be owned by a ticket:
// a build's `_indices/<uuid>/` prefix, a commit's `_transactions/<pinned>-<uuid>.txn`.
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
	claims, err := f.claims(ctx, path)
	if err != nil {
		return nil, err
	}
	for v := range c.versions {
		referenced[path+"/"+claimKey(int64(v)+1)] = false // checkClaims requires the claims of steward's versions
	}
	c.claims = claims
	return c, nil
}

func claimKey(v int64) string { return fmt.Sprintf("%s%020d.json", claimsFolder, v) }

// claims reads every slot claim of the dataset at path.
func (f *lanceFormat) claims(ctx context.Context, path string) (map[int64]lanceClaim, error) {
	out := map[int64]lanceClaim{}
	for o, err := range f.store.List(ctx, path+"/"+claimsFolder) {
		if err != nil {
			return nil, err
		}
		name, _ := strings.CutSuffix(strings.TrimPrefix(o.Key, path+"/"+claimsFolder), ".json")
		v, err := strconv.ParseInt(name, 10, 64)
		if err != nil {
			continue // not a claim: the orphan check reports it
		}
		b, err := storage.ReadAll(ctx, f.store, o.Key, 4<<10)
		if err != nil {
			return nil, fmt.Errorf("claim %s: %w", o.Key, err)
		}
		var cl lanceClaim
		if err := json.Unmarshal(b, &cl); err != nil {
			return nil, fmt.Errorf("claim %s: %w", o.Key, err)
		}
		out[v] = cl
	}
	return out, nil
}

// op: every Lance index mutation of the engine (CREATE, REPLACE, DROP) is one CreateIndex
// operation with new and removed segments.
func (f *lanceFormat) op(string, bool) string { return "CreateIndex" }

// checkClaims checks the Lance engine's slot claims against the chain: every version a steward
// writer made past the setup was claimed first by that writer (a fence may fill the slot a dead
// invocation claimed for its commit), and no claim is left past the latest version (that slot
// would be closed to every steward writer, with no version filling it).
func (r *run) checkClaims(c *chain) {
	if c.claims == nil {
		return
	}
	for _, v := range c.versions {
		if v.Version <= c.setup || v.Kind == "" {
			continue
		}
		cl, ok := c.claims[v.Version]
		switch {
		case !ok:
			r.violate("unclaimed-version", "", fmt.Sprintf("%s version %d (%s of %s) was written without a slot claim", c.path, v.Version, v.Kind, v.Invocation))
		case cl.Invocation != v.Invocation || (cl.Kind != v.Kind && !(cl.Kind == kindCommit && v.Kind == kindFence)):
			r.violate("claim-mismatch", "", fmt.Sprintf("%s version %d is a %s of %s, its slot claim a %s of %s", c.path, v.Version, v.Kind, v.Invocation, cl.Kind, cl.Invocation))
		}
	}
	for v, cl := range c.claims {
		if v > int64(len(c.versions)) {
			r.violate("dangling-claim", "", fmt.Sprintf("%s slot %d is claimed by the %s of %s and holds no version (latest %d): closed to every steward writer",
				c.path, v, cl.Kind, cl.Invocation, len(c.versions)))
		}
	}
}
