package testbin

import (
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// PluginLeftovers lists what a go-plugin sidecar and its host can leave under dir: unix sockets
// and steward-plugin-* folders, but the paths in skip.
func PluginLeftovers(t testing.TB, dir string, skip ...string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !slices.Contains(skip, p) && (d.Type()&fs.ModeSocket != 0 || (d.IsDir() && strings.HasPrefix(d.Name(), "steward-plugin-"))) {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
