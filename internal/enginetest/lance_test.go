package enginetest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/enginetest"
	"github.com/cba1309c/steward/internal/testbin"
	"github.com/cba1309c/steward/internal/testenv"
	"github.com/cba1309c/steward/internal/testminio"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testminio.Cleanup()
	os.Exit(code)
}

// lanceEnv is the installed Lance engine: the venv's python and the engine's folder.
type lanceEnv struct {
	python, dir string
	s3          []string // STEWARD_S3_* for lancectl on MinIO
}

func needLance(t testing.TB) *lanceEnv {
	t.Helper()
	root, err := testbin.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tools := os.Getenv("STEWARD_TOOLS")
	if tools == "" {
		tools = filepath.Join(root, ".tools")
	}
	py := filepath.Join(tools, "lance", "bin", "python")
	if _, err := os.Stat(py); err != nil {
		testenv.Unavailable(t, "Lance engine not installed (run scripts/lance.sh install): "+err.Error())
	}
	return &lanceEnv{python: py, dir: filepath.Join(root, "engines", "lance")}
}

func (l *lanceEnv) engine() enginetest.Engine {
	return enginetest.Engine{Argv: []string{l.python, "-B", "-s", "-E", filepath.Join(l.dir, "engine.py")}}
}

// ctl runs lancectl.py and decodes its JSON answer into out.
func (l *lanceEnv) ctl(t testing.TB, out any, args ...string) {
	t.Helper()
	cmd := exec.Command(l.python, append([]string{"-B", filepath.Join(l.dir, "lancectl.py")}, args...)...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "TMPDIR=" + t.TempDir()}, l.s3...)
	b, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("lancectl %v: %v\n%s", args, err, stderr)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("lancectl %v: %v: %s", args, err, b)
		}
	}
}

// store is where a test dataset lives: a directory, or a MinIO bucket.
type store struct {
	url, endpoint string
	creds         map[string]string
	mc            *minio.Client
	bucket, root  string
}

func (s *store) uri(path string) string {
	if s.mc != nil {
		return "s3://" + s.bucket + "/" + path
	}
	return filepath.Join(s.root, path)
}

func (s *store) dataset(path string) map[string]any {
	st := map[string]any{"url": s.url}
	if s.endpoint != "" {
		st["endpoint"] = s.endpoint
	}
	return map[string]any{"store": st, "path": path}
}

// objects lists every object key (store-relative) under path.
func (s *store) objects(t *testing.T, path string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	if s.mc != nil {
		for o := range s.mc.ListObjects(context.Background(), s.bucket, minio.ListObjectsOptions{Prefix: path + "/", Recursive: true}) {
			if o.Err != nil {
				t.Fatal(o.Err)
			}
			out[o.Key] = true
		}
		return out
	}
	_ = filepath.WalkDir(filepath.Join(s.root, path), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(s.root, p)
			out[rel] = true
		}
		return nil
	})
	return out
}

func localStore(t testing.TB) *store {
	dir := t.TempDir()
	return &store{url: "file://" + dir, root: dir}
}

func minioStore(t *testing.T, l *lanceEnv) *store {
	srv := testminio.Shared(t)
	mc, err := minio.New(srv.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	bucket := fmt.Sprintf("lance-%d", time.Now().UnixNano())
	if err := mc.MakeBucket(context.Background(), bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	l.s3 = []string{"STEWARD_S3_ENDPOINT=" + srv.Endpoint, "STEWARD_S3_ACCESS_KEY=" + srv.AccessKey, "STEWARD_S3_SECRET_KEY=" + srv.SecretKey}
	return &store{url: "s3://" + bucket, endpoint: srv.Endpoint, mc: mc, bucket: bucket,
		creds: map[string]string{"access_key": srv.AccessKey, "secret_key": srv.SecretKey}}
}

type indexCase struct {
	typ, column string
	params      map[string]string
}

var indexCases = []indexCase{
	{"BTREE", "id", nil},
	{"BITMAP", "category", nil},
	{"LABEL_LIST", "labels", nil},
	{"INVERTED", "text", nil},
	{"IVF_PQ", "vec", map[string]string{"num_partitions": "4", "num_sub_vectors": "16"}},
	{"IVF_HNSW_SQ", "vec", map[string]string{"num_partitions": "2"}},
}

func mutateReq(s *store, path, inv string, pinned int64, op string, c indexCase, name string) map[string]any {
	req := map[string]any{
		"invocation_id": inv, "deadline_unix_ms": time.Now().Add(time.Hour).UnixMilli(),
		"dataset": s.dataset(path), "pinned_version": pinned, "op": op,
		"index": map[string]any{"name": name, "columns": []string{c.column}, "type": c.typ, "params": c.params},
	}
	if s.creds != nil {
		req["credentials"] = s.creds
	}
	return req
}

func settleReq(s *store, path, inv string, pinned int64, reaped bool) map[string]any {
	req := map[string]any{"invocation_id": inv, "dataset": s.dataset(path), "pinned_version": pinned, "domain_reaped": reaped}
	if s.creds != nil {
		req["credentials"] = s.creds
	}
	return req
}

func latest(t *testing.T, l *lanceEnv, s *store, path string) int64 {
	var d struct {
		Version int64 `json:"version"`
	}
	l.ctl(t, &d, "describe", s.uri(path))
	return d.Version
}

type version struct {
	Version    int64  `json:"version"`
	Operation  string `json:"operation"`
	Invocation string `json:"invocation"`
	Kind       string `json:"kind"`
}

func versions(t *testing.T, l *lanceEnv, s *store, path string) []version {
	var vs []version
	l.ctl(t, &vs, "versions", s.uri(path))
	return vs
}

// custody fails t if an object that appeared during the run is neither under a reserved prefix,
// nor a reserved key, nor Lance's version chain, nor a steward slot claim.
func custody(t *testing.T, before, after map[string]bool, reserves []enginetest.Reserve, path string) {
	t.Helper()
	var stray []string
	for k := range after {
		if before[k] || strings.HasPrefix(k, path+"/_versions/") || strings.HasPrefix(k, path+"/_steward/slots/") {
			continue
		}
		ok := false
		for _, r := range reserves {
			for _, p := range r.Prefixes {
				ok = ok || strings.HasPrefix(k, p)
			}
			for _, key := range r.Keys {
				ok = ok || k == key
			}
		}
		if !ok {
			stray = append(stray, k)
		}
	}
	sort.Strings(stray)
	if len(stray) > 0 {
		t.Errorf("objects written outside custody: %v (reserved %+v)", stray, reserves)
	}
}

func run(t testing.TB, l *lanceEnv, kind string, req map[string]any, opt enginetest.Options) *enginetest.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := enginetest.Run(ctx, l.engine(), kind, req, opt)
	if err != nil {
		msg := ""
		if s != nil {
			msg = s.Stderr.String()
		}
		t.Fatalf("engine: %v\n%s", err, msg)
	}
	return s
}

func buildEveryType(t *testing.T, l *lanceEnv, s *store) {
	const path = "events"
	var created struct {
		Version int64 `json:"version"`
	}
	l.ctl(t, &created, "create", s.uri(path), "--rows", "3000")
	pinned := created.Version
	for _, c := range indexCases {
		t.Run(c.typ, func(t *testing.T) {
			before := s.objects(t, path)
			name := "idx_" + strings.ToLower(c.typ)
			inv := "inv-" + strings.ToLower(c.typ)
			sess := run(t, l, "mutate", mutateReq(s, path, inv, pinned, "CREATE", c, name), enginetest.Options{})
			r := sess.Result
			if r == nil || r.Phase != "NATIVE_RETURN" || r.Code != 0 || r.CommittedVersion != pinned+1 || r.IndexUUID == "" {
				t.Fatalf("result %+v\n%s", r, sess.Stderr.String())
			}
			if sess.Hello.Engine.Name != "lance" || sess.Hello.Engine.Settle != "claim-fence" {
				t.Errorf("hello %+v", sess.Hello)
			}
			custody(t, before, s.objects(t, path), sess.Reserves, path)
			if len(sess.TempLeft) > 0 {
				t.Logf("%s left in its private TMPDIR (removed with it): %v", c.typ, sess.TempLeft)
			}
			var chk struct {
				Listed    bool    `json:"listed"`
				UsesIndex bool    `json:"uses_index"`
				Equal     bool    `json:"equal"`
				Rows      int     `json:"rows"`
				Plan      string  `json:"plan"`
				Recall    float64 `json:"recall"`
				Last      version `json:"last"`
			}
			l.ctl(t, &chk, "check", s.uri(path), name, c.column, c.typ)
			if strings.HasPrefix(c.typ, "IVF") && !strings.Contains(chk.Plan, "name="+name+",") {
				t.Errorf("the plan does not use %s:\n%s", name, chk.Plan)
			}
			// A vector index is approximate: its top 10 (all partitions probed, 500 candidates
			// re-ranked exactly) missed one true neighbour in one fresh-clone run, the PQ
			// codebook being trained from a random start. It must find 9 of the 10; a scalar
			// index must answer exactly as the scan.
			exact := chk.Equal
			if strings.HasPrefix(c.typ, "IVF") {
				exact = chk.Rows == 10 && chk.Recall >= 0.9
				if !chk.Equal {
					t.Logf("%s: recall %.1f of the exact top 10", c.typ, chk.Recall)
				}
			}
			if !chk.Listed || !chk.UsesIndex || !exact {
				t.Errorf("Lance's reader: listed=%v uses_index=%v equal=%v rows=%d recall=%v\n%s", chk.Listed, chk.UsesIndex, chk.Equal, chk.Rows, chk.Recall, chk.Plan)
			}
			last := chk.Last
			pinned = r.CommittedVersion
			if last.Version != r.CommittedVersion || last.Invocation != inv || last.Kind != "commit" {
				t.Errorf("version chain ends with %+v, want %d by %s", last, r.CommittedVersion, inv)
			}
			if c.typ == "IVF_PQ" { // one vector index per column answers a query: drop it before the next
				drop := run(t, l, "mutate", mutateReq(s, path, inv+"-drop", pinned, "DROP", c, name), enginetest.Options{})
				if r := drop.Result; r == nil || r.Code != 0 || r.CommittedVersion != pinned+1 {
					t.Fatalf("drop: %+v\n%s", r, drop.Stderr.String())
				}
				pinned++
			}
		})
	}
}

func TestLanceEveryIndexTypeLocal(t *testing.T) {
	l := needLance(t)
	buildEveryType(t, l, localStore(t))
}

func TestLanceEveryIndexTypeMinIO(t *testing.T) {
	l := needLance(t)
	buildEveryType(t, l, minioStore(t, l))
}
