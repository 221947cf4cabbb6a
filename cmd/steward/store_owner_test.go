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
