package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cba1309c/steward/host/dispatch"
	"github.com/cba1309c/steward/rpc"
	"github.com/hashicorp/go-hclog"
)

// lostSidecar answers every mutation with a lost connection, which leaves the job UNKNOWN with
// its slot held: the stuck job an operator force-releases.
type lostSidecar struct{ done chan struct{} }

func (lostSidecar) Epoch() string             { return "cli-test-epoch" }
func (s lostSidecar) Exited() <-chan struct{} { return s.done }
func (lostSidecar) Mutate(context.Context, rpc.MutateParams) (rpc.MutateResult, error) {
	return rpc.MutateResult{}, rpc.ErrConnectionLost
}
func (lostSidecar) Resolve(context.Context, rpc.ResolveParams) (rpc.ResolveResult, error) {
	return rpc.ResolveResult{}, rpc.ErrStorageUnavailable
}

// jobsStore writes a store with one UNKNOWN job and one PENDING job and returns its path and ids.
func jobsStore(t *testing.T) (path, unknown, pending string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "jobs.db")
	s, err := dispatch.OpenBolt(path, dispatch.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dispatch.New(dispatch.Config{Store: s, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	req := func(name string) dispatch.Request {
		return dispatch.Request{
			Dataset:         rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file:///data"}, Path: "warehouse/events"},
			AdmittedVersion: 3, Op: rpc.OpCreate,
			Index: rpc.IndexSpec{Name: name, Columns: []string{"id"}, Type: rpc.IndexBTree},
		}
	}
	ctx := context.Background()
	j, err := d.Submit(ctx, req("events_id"))
	if err != nil {
		t.Fatal(err)
	}
	d.AddSidecar("node-1", lostSidecar{done: make(chan struct{})})
	for j.Result == nil {
		if _, err := d.Round(ctx); err != nil {
			t.Fatal(err)
		}
		if j, err = d.Get(j.ID); err != nil {
			t.Fatal(err)
		}
	}
	d.RemoveSidecar("node-1")
	p, err := d.Submit(ctx, req("events_name"))
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	s.Close()
	return path, j.ID, p.ID
}

func runJ(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runJobs(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestJobsCLI(t *testing.T) {
	path, unknown, pending := jobsStore(t)
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		wantOut  []string
		wantErr  string
	}{
		{"list", []string{"list", "--store", path}, 0, []string{unknown + "  UNKNOWN", pending + "  PENDING", "2 job(s)", "warehouse/events"}, ""},
		{"list by state", []string{"list", "--store", path, "--state", "unknown"}, 0, []string{unknown, "1 job(s)"}, ""},
		{"list bad state", []string{"list", "--store", path, "--state", "DONE"}, 2, nil, "unknown state"},
		{"show", []string{"show", unknown, "--store", path}, 0, []string{"state             UNKNOWN", "slot              held", "node-1 epoch cli-test-epoch", "dispatch", "answer"}, ""},
		{"show missing", []string{"show", "--store", path, "nope"}, 1, nil, "not found"},
		{"release without reason", []string{"release", "--store", path, "--by", "alice", unknown}, 2, nil, "--reason"},
		{"release pending", []string{"release", "--store", path, "--by", "alice", "--reason", "x", pending}, 1, nil, "only an UNKNOWN job"},
		{"release", []string{"release", "--store", path, "--by", "alice", "--reason", "storage gone (OPS-7)", unknown}, 0, []string{"released job " + unknown}, ""},
		{"show released", []string{"show", "--store", path, unknown}, 0, []string{"force-released", "alice", "storage gone (OPS-7)"}, ""},
		{"release twice", []string{"release", "--store", path, "--by", "bob", "--reason", "again", unknown}, 1, nil, "only an UNKNOWN job"},
		{"no store", []string{"list"}, 2, nil, "--store is required"},
		{"missing store file", []string{"list", "--store", filepath.Join(t.TempDir(), "none.db")}, 1, nil, "open store"},
		{"two ids", []string{"show", "--store", path, "a", "b"}, 2, nil, "want 1 job id"},
		{"unknown command", []string{"purge"}, 2, nil, "unknown jobs command"},
		{"no args", nil, 2, nil, "usage:"},
		{"help", []string{"--help"}, 0, nil, "usage:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runJ(t, tc.args...)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.wantCode, out, errOut)
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(out, w) {
					t.Fatalf("output lacks %q:\n%s", w, out)
				}
			}
			if !strings.Contains(errOut, tc.wantErr) {
				t.Fatalf("stderr lacks %q:\n%s", tc.wantErr, errOut)
			}
		})
	}
}

// TestJobsListAligned checks that the table's columns line up.
func TestJobsListAligned(t *testing.T) {
	path, _, _ := jobsStore(t)
	_, out, _ := runJ(t, "list", "--store", path)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	col := func(line, word string) int { return strings.Index(line, word) }
	header := lines[0]
	for _, l := range lines[1:3] {
		for _, w := range []string{"STATE", "OP", "DATASET"} {
			fields := regexp.MustCompile(`\S+`).FindAllStringIndex(l, -1)
			found := false
			for _, f := range fields {
				found = found || f[0] == col(header, w)
			}
			if !found {
				t.Fatalf("column %s not aligned:\n%s", w, out)
			}
		}
	}
}

// TestJobsStoreLocked shows the CLI refusing, with a clear error, a store a dispatcher holds.
func TestJobsStoreLocked(t *testing.T) {
	path, _, _ := jobsStore(t)
	s, err := dispatch.OpenBolt(path, dispatch.BoltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	code, _, errOut := runJ(t, "list", "--store", path)
	if code != 1 || !strings.Contains(errOut, "locked") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}
