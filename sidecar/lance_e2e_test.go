package sidecar_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/internal/testing/testminio"
	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/cba1309c/steward/rpc"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Real Lance through the real sidecar: `steward serve --engine lance=<venv python> -B -s -E
// engines/lance/engine.py`, as docs/ENGINE.md registers it. Every test reads the dataset back
// with Lance's own library (lancectl.py), checks that custody settled (no ticket left, nothing
// under the dataset's _indices/ that Lance does not list) and that every domain's private TMPDIR
// was removed.

type lanceSidecar struct {
	*sidecarEnv
	python, dir string
	tmp         string   // the sidecar's TMPDIR: every domain's private temp dir is made here
	s3          []string // STEWARD_S3_* for lancectl on MinIO
	mc          *minio.Client
	bucket      string
	store       rpc.StoreSpec
	creds       *rpc.Credentials
}

func lancePython(t testing.TB) (python, dir string) {
	t.Helper()
	py, dir, err := testbin.LanceTools()
	if err != nil {
		testenv.Unavailable(t, "Lance engine not installed: "+err.Error())
	}
	return py, dir
}

// newLanceSidecar starts a sidecar with the Lance engine registered, on a local store or MinIO.
func newLanceSidecar(t testing.TB, onMinIO bool, extra ...string) *lanceSidecar {
	t.Helper()
	py, dir := lancePython(t)
	l := &lanceSidecar{python: py, dir: dir, tmp: testenv.GuestDir(t)}
	// Registered before the sidecar starts, so it runs after the sidecar is closed (spares too).
	noTempDirsLeft(t, l.tmp)
	env := append(os.Environ(), "TMPDIR="+l.tmp)
	if onMinIO {
		srv := testminio.Shared(t)
		mc, err := minio.New(srv.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, "")})
		if err != nil {
			t.Fatal(err)
		}
		l.mc, l.bucket = mc, testbin.RandID("lance-")
		if err := mc.MakeBucket(context.Background(), l.bucket, minio.MakeBucketOptions{}); err != nil {
			t.Fatal(err)
		}
		l.s3 = []string{"STEWARD_S3_ENDPOINT=" + srv.Endpoint, "STEWARD_S3_ACCESS_KEY=" + srv.AccessKey, "STEWARD_S3_SECRET_KEY=" + srv.SecretKey}
		l.store = rpc.StoreSpec{URL: "s3://" + l.bucket, Endpoint: srv.Endpoint}
		l.creds = &rpc.Credentials{AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}
		// The sidecar's own credentials (the gateway's upstream, custody's cleanup, resolve), from
		// a file and for this bucket only, as in production.
		extra = append(extra, "--s3-credentials-file", testsidecar.CredentialsFile(t, *l.creds, 0),
			"--allow-store", "s3://"+l.bucket+"@"+srv.Endpoint)
	}
	args := append([]string{"--engine", "lance=" + py + " -B -s -E " + filepath.Join(dir, "engine.py")}, extra...)
	l.sidecarEnv = newSidecarWithEnv(t, env, args...)
	if !onMinIO {
		l.store = rpc.StoreSpec{URL: "file://" + l.root}
	}
	return l
}

func (l *lanceSidecar) uri(path string) string {
	if l.mc != nil {
		return "s3://" + l.bucket + "/" + path
	}
	return filepath.Join(l.root, path)
}

// ctl runs lancectl.py (Lance's own library, outside steward) and decodes its answer into out.
func (l *lanceSidecar) ctl(out any, args ...string) {
	l.t.Helper()
	cmd := exec.Command(l.python, append([]string{"-B", filepath.Join(l.dir, "lancectl.py")}, args...)...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "TMPDIR=" + l.t.TempDir()}, l.s3...)
	b, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		l.t.Fatalf("lancectl %v: %v\n%s", args, err, stderr)
	}
	if l.mc == nil {
		testenv.GuestOwn(l.t, l.root) // pylance wrote as root; the engine's guest writes next
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			l.t.Fatalf("lancectl %v: %v: %s", args, err, b)
		}
	}
}

func (l *lanceSidecar) create(path string, rows int) int64 {
	var created struct {
		Version int64 `json:"version"`
	}
	l.ctl(&created, "create", l.uri(path), "--rows", fmt.Sprint(rows))
	return created.Version
}

func (l *lanceSidecar) lanceParams(inv, path string, pinned int64, op, name, column, typ string, params map[string]string) rpc.MutateParams {
	p := l.params(inv, path, pinned, op, name, column, typ)
	p.Dataset.Store, p.Credentials, p.Engine, p.Index.Params = l.store, l.creds, "lance", params
	p.DeadlineUnixMs = time.Now().Add(3 * time.Minute).UnixMilli()
	return p
}

func (l *lanceSidecar) resolveLance(inv, path string, pinned int64) rpc.ResolveResult {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := l.c.Resolve(ctx, rpc.ResolveParams{InvocationID: inv, PinnedVersion: pinned, Engine: "lance",
		Dataset: rpc.DatasetRef{Store: l.store, Path: path}, Credentials: l.creds})
	if err != nil {
		l.t.Fatalf("resolve %s: %v", inv, err)
	}
	return res
}

// settled waits until the ledger holds no ticket and nothing awaits deletion.
func (l *lanceSidecar) settled() {
	l.t.Helper()
	var st rpc.ObjectsStatusResult
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if err := l.c.Call(context.Background(), rpc.MethodObjectsStatus, rpc.ObjectsStatusParams{}, &st); err != nil {
			l.t.Fatal(err)
		}
		if st.Ledger.Used == 0 && st.Ledger.PendingDelete == 0 {
			return
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("custody did not settle: %+v", st.Ledger)
		}
	}
}

// status is the ledger's counters.
func (l *lanceSidecar) status() rpc.LedgerFigures {
	l.t.Helper()
	var st rpc.ObjectsStatusResult
	if err := l.c.Call(context.Background(), rpc.MethodObjectsStatus, rpc.ObjectsStatusParams{}, &st); err != nil {
		l.t.Fatal(err)
	}
	return st.Ledger
}

// objects lists the object keys under path (store-relative).
func (l *lanceSidecar) objects(path string) []string {
	l.t.Helper()
	var out []string
	if l.mc != nil {
		for o := range l.mc.ListObjects(context.Background(), l.bucket, minio.ListObjectsOptions{Prefix: path + "/", Recursive: true}) {
			if o.Err != nil {
				l.t.Fatal(o.Err)
			}
			out = append(out, o.Key)
		}
	} else {
		_ = filepath.WalkDir(filepath.Join(l.root, path), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				rel, _ := filepath.Rel(l.root, p)
				out = append(out, rel)
			}
			return nil
		})
	}
	sort.Strings(out)
	return out
}

// noOrphanIndex fails the test if the dataset's _indices/ holds a folder Lance does not list.
func (l *lanceSidecar) noOrphanIndex(path string) {
	l.t.Helper()
	var d struct {
		Indices []struct {
			UUID string `json:"uuid"`
		} `json:"indices"`
	}
	l.ctl(&d, "describe", l.uri(path))
	listed := map[string]bool{}
	for _, i := range d.Indices {
		listed[i.UUID] = true
	}
	for _, k := range l.objects(path) {
		rest, ok := strings.CutPrefix(k, path+"/_indices/")
		if ok && !listed[strings.Split(rest, "/")[0]] {
			l.t.Errorf("orphan index object %s (Lance lists %v)", k, listed)
		}
	}
}

type lanceCheck struct {
	Listed    bool    `json:"listed"`
	UsesIndex bool    `json:"uses_index"`
	Equal     bool    `json:"equal"`
	Rows      int     `json:"rows"`
	Recall    float64 `json:"recall"`
	SelfHit   bool    `json:"self_hit"`
	Plan      string  `json:"plan"`
	IndexMs   float64 `json:"index_ms"`
	ScanMs    float64 `json:"scan_ms"`
	Last      struct {
		Version    int64  `json:"version"`
		Invocation string `json:"invocation"`
		Kind       string `json:"kind"`
	} `json:"last"`
}

func lanceStores(t *testing.T, fn func(t *testing.T, onMinIO bool)) {
	t.Run("local", func(t *testing.T) { fn(t, false) })
	t.Run("minio", func(t *testing.T) { fn(t, true) })
}

// TestLanceBuildsThroughSidecar: hello lists the Lance engine and its guarantee; BTREE and IVF_PQ
// builds are COMMITTED at pinned+1 (confirmed from the gateway's record and storage before the
// answer), visible to Lance's own reader (listed, used by the plan, equal to a scan), custody
// accepted, no temp dir left.
func TestLanceBuildsThroughSidecar(t *testing.T) {
	lanceStores(t, func(t *testing.T, onMinIO bool) {
		l := newLanceSidecar(t, onMinIO)
		var lance *rpc.EngineInfo
		for _, e := range l.c.Info().Engines {
			if e.Name == "lance" {
				lance = &e
			}
		}
		if lance == nil || lance.Settle != rpc.SettleFence || !strings.Contains(strings.Join(lance.IndexTypes, ","), "IVF_PQ") {
			t.Fatalf("hello engines %+v", l.c.Info().Engines)
		}
		const path = "events"
		pinned := l.create(path, 5000)
		for _, tc := range []struct {
			typ, column string
			params      map[string]string
		}{
			{"BTREE", "id", nil},
			{"IVF_PQ", "vec", map[string]string{"num_partitions": "4", "num_sub_vectors": "16"}},
		} {
			t.Run(tc.typ, func(t *testing.T) {
				l.t = t
				name, inv := "idx_"+strings.ToLower(tc.typ), randID("inv-")
				start := time.Now()
				res := l.mutate(l.lanceParams(inv, path, pinned, rpc.OpCreate, name, tc.column, tc.typ, tc.params))
				if res.Phase != rpc.PhaseNativeReturn || res.Code != 0 || res.CommittedVersion != pinned+1 || res.CompletionReason != rpc.CompletionCommitted {
					t.Fatalf("result %+v", res)
				}
				var chk lanceCheck
				l.ctl(&chk, "check", l.uri(path), name, tc.column, tc.typ)
				// A vector index is approximate: its nearest neighbours are held to recall, not equality.
				exact := chk.Equal || (strings.HasPrefix(tc.typ, "IVF") && chk.Recall >= 0.8)
				if !chk.Listed || !chk.UsesIndex || !exact || chk.Last.Version != pinned+1 || chk.Last.Invocation != inv || chk.Last.Kind != "commit" {
					t.Fatalf("Lance's reader: %+v", chk)
				}
				t.Logf("%s through the sidecar: %v round trip (%d ms in the domain, peak %d MiB); Lance lists it, its plan uses it, equal to a scan (recall %.1f, %.2f ms by index vs %.2f ms scan)",
					tc.typ, time.Since(start).Round(time.Millisecond), res.WallMs, res.PeakMemoryBytes>>20, chk.Recall, chk.IndexMs, chk.ScanMs)
				pinned++
				l.settled()
				l.noOrphanIndex(path)
				if r := l.resolveLance(inv, path, pinned-1); r.Outcome != rpc.OutcomeCommitted || r.Fenced {
					t.Errorf("resolve of a committed build: %+v", r)
				}
			})
		}
		// The no-ops the request asked for commit nothing and name the latest version.
		t.Run("noops", func(t *testing.T) {
			l.t = t
			create := l.lanceParams(randID("inv-"), path, pinned, rpc.OpCreate, "idx_btree", "id", "BTREE", nil)
			create.IfNotExists = true
			drop := l.lanceParams(randID("inv-"), path, pinned, rpc.OpDrop, "idx_none", "", "", nil)
			drop.IfExists = true
			for p, want := range map[*rpc.MutateParams]string{&create: rpc.CompletionIfNotExistsNoop, &drop: rpc.CompletionIfExistsNoop} {
				res := l.mutate(*p)
				if res.Phase != rpc.PhaseNativeReturn || res.Code != 0 || res.CompletionReason != want || res.ObservedLatestVersion != pinned || res.CommittedVersion != 0 {
					t.Errorf("%s: result %+v, want %s observing version %d", p.Op, res, want, pinned)
				}
			}
			l.settled()
		})
	})
}

// TestLanceKilledBuildIsResolved: a build that dies mid-way (a crash right after Lance wrote the
// segment, one right before its commit, an OOM kill under a small memory limit) is
// INDETERMINATE; index.resolve through the engine answers NOT_COMMITTED (the slot is fenced), and
// custody deletes everything the build wrote: no orphan (a staging folder included), no ticket,
// no temp dir. BTREE and LABEL_LIST are the types whose segment folder Lance names itself: before
// the staging folder, a kill right after their build left the segment under no ticket.
func TestLanceKilledBuildIsResolved(t *testing.T) {
	lanceStores(t, func(t *testing.T, onMinIO bool) {
		l := newLanceSidecar(t, onMinIO)
		const path = "events"
		pinned := l.create(path, 20000)
		ivf := map[string]string{"num_partitions": "16", "num_sub_vectors": "16"}
		for _, tc := range []struct {
			name        string
			fault       string
			memory      int64
			column, typ string
			params      map[string]string
		}{
			{"BTREE crash after build", "crash_after_build", 0, "id", "BTREE", nil},
			{"LABEL_LIST crash after build", "crash_after_build", 0, "labels", "LABEL_LIST", nil},
			{"BTREE crash before commit", "crash_before_commit", 0, "id", "BTREE", nil},
			{"IVF_PQ crash before commit", "crash_before_commit", 0, "vec", "IVF_PQ", ivf},
			{"IVF_PQ oom", "", 80 << 20, "vec", "IVF_PQ", ivf},
		} {
			t.Run(tc.name, func(t *testing.T) {
				l.t = t
				inv := randID("inv-")
				p := l.lanceParams(inv, path, pinned, rpc.OpCreate, "idx_"+tc.column, tc.column, tc.typ, tc.params)
				p.Fault = tc.fault
				if tc.memory > 0 {
					p.Limits = &rpc.WorkerLimits{MemoryBytes: tc.memory}
				}
				deletedBefore := l.status().Deleted
				t0 := time.Now()
				res := l.mutate(p)
				mutated := time.Since(t0)
				if res.Phase != rpc.PhaseIndeterminate || res.Code != rpc.ReasonWorkerLost || (tc.memory > 0 && !res.OOMKilled) {
					t.Fatalf("result %+v", res)
				}
				t1 := time.Now()
				r := l.resolveLance(inv, path, pinned)
				t.Logf("%s: %s/%d after %v, oom_killed=%v signal=%s peak %d MiB (limit %d MiB, 0 = default); resolved %s fenced=%v in %v",
					tc.name, res.Phase, res.Code, mutated.Round(time.Millisecond), res.OOMKilled, res.Signal, res.PeakMemoryBytes>>20,
					tc.memory>>20, r.Outcome, r.Fenced, time.Since(t1).Round(time.Millisecond))
				if r.Outcome != rpc.OutcomeNotCommitted || !r.Fenced || r.Version != pinned+1 {
					t.Fatalf("resolve: %+v", r)
				}
				// The fence closes pinned+1 to this invocation alone: the next case pins the same
				// version.
				l.settled()
				l.noOrphanIndex(path)
				// A crash fault dies after Lance wrote the segment: cleanup must have deleted it.
				if d := l.status().Deleted - deletedBefore; tc.fault != "" && d == 0 {
					t.Fatalf("cleanup deleted nothing: the build wrote nothing before %s?", tc.fault)
				}
			})
		}
	})
}

// TestLanceConcurrentCommitIsConflict: another writer commits (plain pylance) after the host
// pinned its version: the engine's commit at pinned+1 is refused, COMMIT_CONFLICT 8 with the
// observed latest version; what it built is abandoned and deleted.
func TestLanceConcurrentCommitIsConflict(t *testing.T) {
	l := newLanceSidecar(t, false)
	const path = "events"
	pinned := l.create(path, 3000)
	l.ctl(nil, "index", l.uri(path), "id", "BTREE", "idx_other")
	inv := randID("inv-")
	res := l.mutate(l.lanceParams(inv, path, pinned, rpc.OpCreate, "idx_cat", "category", "BITMAP", nil))
	if res.Phase != rpc.PhaseNativeReturn || res.Code != rpc.NativeCommitConflict || res.ObservedLatestVersion != pinned+1 || res.CommittedVersion != 0 {
		t.Fatalf("result %+v", res)
	}
	if r := l.resolveLance(inv, path, pinned); r.Outcome != rpc.OutcomeNotCommitted {
		t.Errorf("resolve: %+v", r)
	}
	l.settled()
	l.noOrphanIndex(path)
	// A fault the Lance engine does not act out is refused, never run as an unfaulted mutation.
	p := l.lanceParams(randID("inv-"), path, pinned+1, rpc.OpCreate, "idx_cat", "category", "BITMAP", nil)
	p.Fault = "hang"
	if _, err := l.c.Mutate(context.Background(), p); !errors.Is(err, rpc.ErrInvalidParams) {
		t.Errorf("a fault the engine does not declare: %v", err)
	}
}
