package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/internal/testing/testminio"
	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/cba1309c/steward/rpc"
)

const nobody = 65534

// TestDoctor runs the real `steward doctor` as root, as uid 65534 without a delegated cgroup
// and as uid 65534 started in cgroups delegated to it: its verdict must be the sidecar's
// (ready, refused, ready) and each line must say what it found.
func TestDoctor(t *testing.T) {
	testenv.NeedRoot(t)
	bin := testbin.Steward(t)
	srv := testminio.Dedicated(t)
	state, err := os.MkdirTemp("", "steward-doctor-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(state) })
	if err := os.Chmod(state, 0o777); err != nil {
		t.Fatal(err)
	}
	parent := testbin.RandID("steward-doctor-")
	keys := testsidecar.CredentialsFile(t, rpc.Credentials{AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}, 0)
	for _, tc := range []struct {
		name  string
		uid   int
		enter bool
		args  []string
		code  int
		want  []string
	}{
		{"root", 0, false, []string{"--store", "s3://doctor-bucket", "--s3-credentials-file", keys, "--allow-store", "s3://doctor-bucket@" + srv.Endpoint}, 0,
			[]string{"ok  isolation", "ok  own credentials from file, sent only to [s3://doctor-bucket@", "ok  conditional writes", "verdict: ready"}},
		{"root-store-not-allowed", 0, false, []string{"--store", "s3://doctor-bucket", "--s3-credentials-file", keys, "--allow-store", "s3://other-bucket@" + srv.Endpoint}, 1,
			[]string{"MISSING  store reachable", "store not on the sidecar's allow-list: s3://doctor-bucket@", "verdict: index.mutate would be refused"}},
		{"uid-65534-undelegated", nobody, false, nil, 1,
			[]string{"MISSING  delegation memory", "is not delegated to uid 65534", "fix: ", "verdict: index.mutate would be refused"}},
		{"uid-65534-delegated", nobody, true, nil, 0,
			[]string{"ok  delegation memory", "moved itself into the leaf", "ok  pdeathsig", "verdict: ready (isolation hybrid)",
				"ok  cgroups restored", "moved back into memory:/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var enter []string
			if tc.enter {
				enter = testsidecar.Delegate(t, parent, nobody)
			}
			cmd := exec.Command(testsidecar.Launcher(t, bin, tc.uid, enter),
				append([]string{"doctor", "--state-dir", filepath.Join(state, tc.name)}, tc.args...)...)
			cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "STEWARD_S3_ENDPOINT=" + srv.Endpoint}
			out, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			t.Logf("steward doctor %s (exit %d):\n%s", tc.name, code, out)
			if code != tc.code {
				t.Fatalf("exit %d, want %d", code, tc.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(collapse(string(out)), w) {
					t.Errorf("output lacks %q", w)
				}
			}
			if tc.enter {
				testsidecar.CheckLeftovers(t, parent)
			}
		})
	}
}

// collapse squeezes the tabwriter's padding to two spaces so tests match words, not widths.
func collapse(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && (f[0] == "ok" || f[0] == "MISSING" || f[0] == "warn") {
			line = f[0] + "  " + strings.Join(f[1:], " ")
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}
