package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cba1309c/steward/internal/testenv"
	"github.com/cba1309c/steward/isolation"
)

// TestPrepareHandover: what is handed over, and to whom, before Lance writes.
func TestPrepareHandover(t *testing.T) {
	testenv.NeedRoot(t)
	guest, own := testenv.GuestDir(t), t.TempDir()
	if err := os.Mkdir(filepath.Join(guest, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, root, dir string
		wantTop         string // "" = nothing handed over
		wantErr         bool
	}{
		{"root-owned store root", own, filepath.Join(own, "a", "ds"), "", false},
		{"missing store root", filepath.Join(own, "none"), filepath.Join(own, "none", "ds"), "", false},
		{"existing folder keeps its owner", guest, filepath.Join(guest, "a", "b", "ds"), filepath.Join(guest, "a", "b"), false},
		{"dataset folder itself", guest, filepath.Join(guest, "a"), filepath.Join(guest, "a"), false},
		{"outside the root", guest, filepath.Join(own, "ds"), "", true},
		{"the root itself", guest, guest, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := prepareHandover(tc.root, tc.dir)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, want error %v", err, tc.wantErr)
			}
			switch {
			case tc.wantTop == "" && h != nil:
				t.Fatalf("handover %+v, want none", h)
			case tc.wantTop != "" && (h == nil || h.top != tc.wantTop || h.uid != isolation.DefaultGuestID):
				t.Fatalf("handover %+v, want top %s to uid %d", h, tc.wantTop, isolation.DefaultGuestID)
			}
		})
	}
}

// TestHandoverFollowsNoSymlink: the guest owns the store root and may plant symlinks in it; the
// handover gives the links themselves away, never what they point at.
func TestHandoverFollowsNoSymlink(t *testing.T) {
	testenv.NeedRoot(t)
	guest, outside := testenv.GuestDir(t), t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	ds := filepath.Join(guest, "lake", "ds")
	h, err := prepareHandover(guest, ds)
	if err != nil || h == nil {
		t.Fatalf("prepare: %+v %v", h, err)
	}
	if err := os.MkdirAll(filepath.Join(ds, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"data/file-link": secret, "dir-link": outside} {
		if err := os.Symlink(target, filepath.Join(ds, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.done(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{secret, outside} {
		if uid := ownerOf(t, p); uid != 0 {
			t.Errorf("%s was handed over through a symlink (uid %d)", p, uid)
		}
	}
	for _, p := range []string{filepath.Join(guest, "lake"), ds, filepath.Join(ds, "data"), filepath.Join(ds, "data", "file-link"), filepath.Join(ds, "dir-link")} {
		if uid := ownerOf(t, p); uid != isolation.DefaultGuestID {
			t.Errorf("%s: uid %d, want %d", p, uid, isolation.DefaultGuestID)
		}
	}
}
