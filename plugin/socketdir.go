package plugin

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync/atomic"
	"syscall"

	goplugin "github.com/hashicorp/go-plugin"
)

// go-plugin's server listens on a unix socket it makes with os.CreateTemp(dir, "plugin"), dir
// being $PLUGIN_UNIX_SOCKET_DIR or the temp dir, and removes it only when its Serve returns: a
// sidecar that goes down another way (its host died, a signal, a SIGKILL) would leave
// <dir>/plugin<N> behind, and a host killed before its sidecar exited leaves its socket folder.
// So every steward process that makes a socket folder (the host package per sidecar, the sidecar
// for its own listener) names it after itself, steward-plugin-<pid>-<start>-<n>, removes it
// on its way down, and sweeps out of the same parent the folders of owners that no longer run
// (the liveness rule of the sidecar's owner temp dirs: the pid is gone or its start time
// differs). Nothing else is ever removed: not a bare plugin<N> socket (another go-plugin
// program's, for all we know), not a folder of another uid or of a live owner.

// socketDirPrefix begins every socket folder's name.
const socketDirPrefix = "steward-plugin-"

// socketDirSeq numbers this process's socket folders.
var socketDirSeq atomic.Uint64

// socketDirRE is the only name the sweep removes; its group is the owner, "<pid>-<start>".
var socketDirRE = regexp.MustCompile(`^steward-plugin-([0-9]+-[0-9]+)-[0-9]+$`)

// MakeSocketDir sweeps the socket folders of dead owners out of base, then makes one for this
// process there, mode 0700 (0711 when $PLUGIN_UNIX_SOCKET_GROUP asks go-plugin to open the socket
// to a group, which must then reach it). A sweep error is returned with the folder made.
func MakeSocketDir(base string) (string, error) {
	sweepErr := SweepSocketDirs(base)
	owner, err := ownerName(os.Getpid())
	if err != nil {
		return "", fmt.Errorf("plugin socket dir: %w", err)
	}
	var dir string
	for {
		// A counter, not MkdirTemp's random suffix: a unix socket's path is at most 107 bytes.
		dir = filepath.Join(base, socketDirPrefix+owner+"-"+strconv.FormatUint(socketDirSeq.Add(1), 10))
		err := os.Mkdir(dir, 0o700)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("plugin socket dir: %w", err)
		}
	}
	if os.Getenv(goplugin.EnvUnixSocketGroup) != "" {
		if err := os.Chmod(dir, 0o711); err != nil {
			os.Remove(dir)
			return "", fmt.Errorf("plugin socket dir: %w", err)
		}
	}
	return dir, sweepErr
}

// SweepSocketDirs removes the socket folders in base whose owner no longer runs: real directories
// (never a symlink; os.RemoveAll follows none below) named as MakeSocketDir names them and owned
// by this uid.
func SweepSocketDirs(base string) error {
	ents, err := os.ReadDir(base)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("plugin socket dir sweep: %w", err)
	}
	var errs []error
	for _, e := range ents {
		m := socketDirRE.FindStringSubmatch(e.Name())
		if e.Type() != fs.ModeDir || m == nil || ownerAlive(m[1]) {
			continue
		}
		path := filepath.Join(base, e.Name())
		fi, err := os.Lstat(path)
		if err != nil || !fi.IsDir() {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
			continue
		}
		if err := os.RemoveAll(path); err != nil {
			errs = append(errs, fmt.Errorf("plugin socket dir sweep: %w", err))
		}
	}
	return errors.Join(errs...)
}

// ServeSocketDir gives this process's go-plugin server a socket folder of its own and returns
// what removes it, with the socket in it, on every way down. The folder is
// $PLUGIN_UNIX_SOCKET_DIR itself when that is a socket folder (a steward host makes one per
// sidecar), else a new one made there (or in the temp dir), which go-plugin is pointed at. Call
// it before Serve.
func ServeSocketDir() (remove func() error, err error) {
	base := os.Getenv(goplugin.EnvUnixSocketDir)
	if socketDirRE.MatchString(filepath.Base(base)) {
		return func() error { return os.RemoveAll(base) }, nil
	}
	if base == "" {
		base = os.TempDir()
	}
	dir, err := MakeSocketDir(base)
	if dir == "" {
		return nil, err
	}
	if serr := os.Setenv(goplugin.EnvUnixSocketDir, dir); serr != nil {
		os.Remove(dir)
		return nil, fmt.Errorf("plugin socket dir: %w", serr)
	}
	return func() error { return os.RemoveAll(dir) }, err
}
