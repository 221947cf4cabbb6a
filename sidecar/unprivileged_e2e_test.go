package sidecar_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/cba1309c/steward/rpc"
)

// nobody is the unprivileged identity of the tests (uid/gid 65534, as on Debian).
const nobody = 65534

// TestServeWithoutIsolation runs the real `steward serve` where isolation cannot verify: as
// uid 65534 with no delegated cgroup, and as root with an unusable --cgroup-parent. It must
// start, say why in hello, refuse index.mutate with -32003, launch nothing and exit 0 on stdin
// EOF (not crash).
func TestServeWithoutIsolation(t *testing.T) {
	testenv.NeedRoot(t)
	bin := testbin.Steward(t)
	// The binary must be reachable by uid 65534: copy it to a world-readable place.
	self := testsidecar.PublicCopy(t, bin)
	dir := filepath.Dir(self)
	for _, tc := range []struct {
		name   string
		uid    int
		args   []string
		reason string // a part of hello's isolation reason
	}{
		{"uid-65534", nobody, nil, "may not create cgroups"},
		{"root-bad-parent", 0, []string{"--cgroup-parent", "no/../good"}, "must be a clean relative path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := filepath.Join(dir, tc.name)
			if err := os.Mkdir(home, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(home, tc.uid, tc.uid); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(self, append([]string{"serve", "--framing", "ndjson"}, tc.args...)...)
			cmd.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin", "STEWARD_STATE_DIR=" + filepath.Join(home, "state")}
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(tc.uid), Gid: uint32(tc.uid)}}
			var stderr lockedBuffer
			cmd.Stderr = &stderr
			in, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			answers := bufio.NewScanner(out)
			call := func(id int, method string, params any) map[string]json.RawMessage {
				t.Helper()
				req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
				if _, err := fmt.Fprintf(in, "%s\n", req); err != nil {
					t.Fatalf("write %s: %v\nstderr:\n%s", method, err, stderr.String())
				}
				if !answers.Scan() {
					t.Fatalf("no answer to %s (%v)\nstderr:\n%s", method, answers.Err(), stderr.String())
				}
				var msg map[string]json.RawMessage
				if err := json.Unmarshal(answers.Bytes(), &msg); err != nil {
					t.Fatalf("answer %q: %v", answers.Text(), err)
				}
				return msg
			}
			var hello rpc.HelloResult
			if err := json.Unmarshal(call(1, rpc.MethodHello, rpc.HelloParams{ProtocolVersion: rpc.ProtocolVersion})["result"], &hello); err != nil {
				t.Fatal(err)
			}
			iso := hello.Isolation
			if iso == nil || iso.Verified || iso.Mode != "none" || !strings.Contains(iso.Reason, tc.reason) {
				t.Fatalf("hello isolation %+v: want mode none, not verified, reason with %q", iso, tc.reason)
			}
			p := rpc.MutateParams{InvocationID: "inv-1", JobID: "job-1", DeadlineUnixMs: time.Now().Add(time.Minute).UnixMilli(),
				Dataset:       rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file://" + home}, Path: "d"},
				PinnedVersion: 1, Op: rpc.OpCreate, Index: rpc.IndexSpec{Name: "i", Columns: []string{"id"}, Type: rpc.IndexBTree}}
			var werr struct {
				Code int64 `json:"code"`
			}
			if err := json.Unmarshal(call(2, rpc.MethodIndexMutate, p)["error"], &werr); err != nil || werr.Code != int64(rpc.CodeIsolationUnavailable) {
				t.Fatalf("index.mutate: want error -32003, got %+v (%v)", werr, err)
			}
			if msg := call(3, rpc.MethodObjectsStatus, rpc.ObjectsStatusParams{}); msg["result"] == nil {
				t.Fatalf("objects.status without isolation: %s", msg["error"])
			}
			in.Close()
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("exit after stdin EOF: %v\nstderr:\n%s", err, stderr.String())
				}
			case <-time.After(10 * time.Second):
				t.Fatal("still running 10 s after stdin EOF")
			}
			if strings.Contains(stderr.String(), "panic") {
				t.Fatalf("stderr mentions a panic:\n%s", stderr.String())
			}
			for _, h := range hierarchies {
				matches, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", h, "*", fmt.Sprintf("%d-*", hello.Pid)))
				if len(matches) > 0 {
					t.Errorf("cgroups of the unisolated sidecar left: %v", matches)
				}
			}
			t.Logf("hello: mode %s verified %v; index.mutate -32003; exit 0 on stdin EOF", iso.Mode, iso.Verified)
		})
	}
}
