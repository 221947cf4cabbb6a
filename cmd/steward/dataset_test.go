package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cba1309c/steward/internal/testing/testminio"
	"github.com/cba1309c/steward/storage/storagetest"
)

func runDS(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := runDataset(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestDatasetCLI(t *testing.T) {
	dir := t.TempDir()
	csvFile := filepath.Join(t.TempDir(), "in.csv")
	if err := os.WriteFile(csvFile, []byte("k,v\n1,x\n2,y\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		wantOut  []string
	}{
		{"generate", []string{"create", "--store", dir, "--path", "gen", "--rows", "2500", "--seed", "7", "--fragment-rows", "1000"}, 0, []string{"version 1: 2500 rows in 3 fragments"}},
		{"csv", []string{"create", "--store", dir, "--path", "fromcsv", "--csv", csvFile}, 0, []string{"2 rows"}},
		{"exists", []string{"create", "--store", dir, "--path", "gen", "--rows", "5"}, 1, nil},
		{"describe", []string{"describe", "--store", dir, "--path", "gen"}, 0, []string{"rows         2500", "category  string", "(none)"}},
		{"versions", []string{"versions", "--store", dir, "--path", "fromcsv"}, 0, []string{"VERSION  OP", "1        CREATE"}},
		{"missing dataset", []string{"describe", "--store", dir, "--path", "nope"}, 1, nil},
		{"file url", []string{"describe", "--store", "file://" + dir + "/", "--path", "gen"}, 0, []string{"rows         2500"}},
		{"file url with userinfo", []string{"describe", "--store", "file://u@" + dir, "--path", "gen"}, 2, nil},
		{"file url with query", []string{"describe", "--store", "file://" + dir + "?x=1", "--path", "gen"}, 2, nil},
		{"no source", []string{"create", "--store", dir, "--path", "x"}, 2, nil},
		{"both sources", []string{"create", "--store", dir, "--path", "x", "--rows", "1", "--csv", csvFile}, 2, nil},
		{"unknown command", []string{"frobnicate"}, 2, nil},
		{"no args", nil, 2, nil},
		{"bad flag", []string{"versions", "--bogus"}, 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runDS(t, tc.args...)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.wantCode, out, errOut)
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(out, w) {
					t.Fatalf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestDatasetCLIOnMinIO(t *testing.T) {
	srv := testminio.Dedicated(t) // Dedicated: this package has no TestMain to stop a shared server
	s := storagetest.NewS3(t, srv.Endpoint, srv.AccessKey, srv.SecretKey)
	t.Setenv(envS3Endpoint, srv.Endpoint)
	t.Setenv(envS3AccessKey, srv.AccessKey)
	t.Setenv(envS3SecretKey, srv.SecretKey)
	store := "s3://" + s.Bucket() + "/team"
	if code, out, errOut := runDS(t, "create", "--store", store, "--path", "ds", "--rows", "1000"); code != 0 {
		t.Fatalf("create: %d %s %s", code, out, errOut)
	}
	code, out, errOut := runDS(t, "versions", "--store", store, "--path", "ds")
	if code != 0 || !strings.Contains(out, "CREATE") {
		t.Fatalf("versions: %d %s %s", code, out, errOut)
	}
	if strings.Contains(out+errOut, srv.SecretKey) {
		t.Fatal("secret printed")
	}
}
