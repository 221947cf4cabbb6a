package sidecar_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar"
	"github.com/cba1309c/steward/storecfg"
)

const secretCanary = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYCANARYKEY"

// TestLoadCredentialsFile: only a regular file of the process's uid, with no bit for group or
// others, is read; a symlink is not followed.
func TestLoadCredentialsFile(t *testing.T) {
	dir := t.TempDir()
	good := rpc.Credentials{AccessKey: "AK", SecretKey: secretCanary}
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, storecfg.FormatCredentials(good), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if got, err := sidecar.LoadCredentialsFile(write("ok-0400", 0o400)); err != nil || got != good {
		t.Fatalf("0400 file: %+v, %v", got, err)
	}
	if got, err := sidecar.LoadCredentialsFile(write("ok-0600", 0o600)); err != nil || got != good {
		t.Fatalf("0600 file: %+v, %v", got, err)
	}
	for _, mode := range []os.FileMode{0o640, 0o604, 0o644, 0o610} {
		if _, err := sidecar.LoadCredentialsFile(write("bad", mode)); !errors.Is(err, sidecar.ErrCredentials) || !strings.Contains(err.Error(), "group and others") {
			t.Errorf("mode %04o: %v; want a refusal", mode, err)
		}
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(write("target", 0o400), link); err != nil {
		t.Fatal(err)
	}
	if _, err := sidecar.LoadCredentialsFile(link); !errors.Is(err, sidecar.ErrCredentials) {
		t.Errorf("symlink: %v; want a refusal", err)
	}
	if _, err := sidecar.LoadCredentialsFile(dir); !errors.Is(err, sidecar.ErrCredentials) {
		t.Errorf("directory: %v; want a refusal", err)
	}
	if os.Geteuid() == 0 {
		p := write("other-owner", 0o400)
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := sidecar.LoadCredentialsFile(p); !errors.Is(err, sidecar.ErrCredentials) || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Errorf("file of another uid: %v; want a refusal", err)
		}
	}
}

// TestLoadCredentialsFD reads a pipe once and closes it.
func TestLoadCredentialsFD(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	good := rpc.Credentials{AccessKey: "AK", SecretKey: secretCanary}
	if _, err := w.Write(storecfg.FormatCredentials(good)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	// A descriptor of its own, as an inherited one is: r keeps (and closes) its own.
	fd, err := syscall.Dup(int(r.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	link := fmt.Sprintf("/proc/self/fd/%d", fd)
	pipe, err := os.Readlink(link)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := sidecar.LoadCredentialsFD(fd); err != nil || got != good {
		t.Fatalf("fd %d: %+v, %v", fd, got, err)
	}
	if now, err := os.Readlink(link); err == nil && now == pipe {
		t.Fatalf("fd %d (%s) is still open after the read", fd, pipe)
	}
	if _, err := sidecar.LoadCredentialsFD(1); !errors.Is(err, sidecar.ErrCredentials) {
		t.Fatalf("fd 1: %v; want a refusal", err)
	}
}

func TestAllowStores(t *testing.T) {
	own := &rpc.Credentials{AccessKey: "AK", SecretKey: secretCanary}
	allow := []string{"s3://warehouse/team@minio.internal:9000;secure", "s3://scratch@127.0.0.1:9000"}
	for _, tc := range []struct {
		name    string
		spec    rpc.StoreSpec
		allowed bool
	}{
		{"entry", rpc.StoreSpec{URL: "s3://warehouse/team", Endpoint: "MINIO.internal:9000", Secure: true}, true},
		{"below the prefix", rpc.StoreSpec{URL: "s3://warehouse/team/a/b", Endpoint: "minio.internal:9000", Secure: true}, true},
		{"whole bucket entry", rpc.StoreSpec{URL: "s3://scratch/x", Endpoint: "127.0.0.1:9000"}, true},
		{"sibling prefix", rpc.StoreSpec{URL: "s3://warehouse/teamb", Endpoint: "minio.internal:9000", Secure: true}, false},
		{"bucket above the prefix", rpc.StoreSpec{URL: "s3://warehouse", Endpoint: "minio.internal:9000", Secure: true}, false},
		{"plain http", rpc.StoreSpec{URL: "s3://warehouse/team", Endpoint: "minio.internal:9000"}, false},
		{"another endpoint", rpc.StoreSpec{URL: "s3://scratch", Endpoint: "attacker.example:9000"}, false},
		{"a region", rpc.StoreSpec{URL: "s3://scratch", Endpoint: "127.0.0.1:9000", Region: "eu"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sidecar.OwnCredentialsFor(tc.spec, own, allow)
			if tc.allowed {
				if err != nil || got != own {
					t.Fatalf("got %v, %v; want the sidecar's keys", got, err)
				}
				return
			}
			var na *sidecar.StoreNotAllowedError
			if got != nil || !errors.Is(err, sidecar.ErrStoreNotAllowed) || !errors.As(err, &na) || strings.Contains(err.Error(), secretCanary) {
				t.Fatalf("got %v, %v; want StoreNotAllowedError", got, err)
			}
		})
	}
	if got, err := sidecar.OwnCredentialsFor(rpc.StoreSpec{URL: "file:///data"}, own, allow); got != nil || err != nil {
		t.Fatalf("file store: %v, %v; want no keys and no refusal", got, err)
	}
	for _, bad := range []string{"file:///data", "s3://bucket", "s3://b@h:1;bogus"} {
		if _, err := sidecar.ParseAllowStores([]string{bad}); !errors.Is(err, rpc.ErrInvalidStore) {
			t.Errorf("allow-store %q: %v; want ErrInvalidStore", bad, err)
		}
	}
}
