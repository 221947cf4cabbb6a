package testsidecar

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storecfg"
)

// CredentialsFile writes c in the sidecar's credentials format to a fresh file of mode 0400
// owned by uid (removed at cleanup) in a directory uid may enter, and returns its path.
func CredentialsFile(t testing.TB, c rpc.Credentials, uid int) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "steward-creds-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "s3")
	err = os.WriteFile(path, storecfg.FormatCredentials(c), 0o400)
	if err == nil && uid != os.Geteuid() {
		if err = os.Chown(path, uid, uid); err == nil {
			err = os.Chmod(dir, 0o711)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}
