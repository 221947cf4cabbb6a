package sidecar

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"

	"github.com/cba1309c/steward/isolation"
)

// A sidecar keeps its worker domains' private temp dirs inside one directory of its own,
// <TempDir>/steward-<pid>-<start>/ (isolation.OwnerName, as its cgroup owner directories are
// named), removed when it closes. A SIGKILLed sidecar cannot remove it; the next sidecar on the
// same TempDir removes it at its start once that owner no longer runs (the liveness rule of the
// cgroup leftovers: the pid is gone or its start time differs).

// ownerTempRE is the only name the sweep ever removes: "steward-<pid>-<start>". Domain dirs of the
// older flat layout ("steward-<invocation>-<nanos>-<random>") and the ledger's "steward-<uid>"
// never match.
var ownerTempRE = regexp.MustCompile(`^steward-[0-9]+-[0-9]+$`)

// ownerTemps counts the Servers of this process using each owner temp dir (tests run several in
// one process): the first one sweeps and makes it, the last one to close removes it.
// The first that asks for the dir's worker image makes it (workerimage.go); the others share it.
var ownerTemps = struct {
	sync.Mutex
	users  map[string]int
	images map[string]ownerImage
}{users: map[string]int{}, images: map[string]ownerImage{}}

// ownerImage is the outcome of making an owner temp dir's worker image: its path, or why not.
type ownerImage struct {
	path string
	err  error
}

// workerImageIn returns the worker image of the owner temp dir dir (written from src and checked
// by verify the first time it is asked for), or "" and why there is none.
func workerImageIn(dir string, src workerSource, verify func(path string) error) (string, error) {
	ownerTemps.Lock()
	defer ownerTemps.Unlock()
	im, ok := ownerTemps.images[dir]
	if !ok {
		im.path, im.err = makeWorkerImage(dir, src)
		if im.err == nil {
			if im.err = verify(im.path); im.err != nil {
				_ = os.Remove(im.path)
				im.path = ""
			}
		}
		ownerTemps.images[dir] = im
	}
	return im.path, im.err
}

// openOwnerTemp sweeps the owner temp dirs of dead sidecars out of base, then makes (or joins)
// this process's: mode 0711, so a contained worker's guest uid can reach its own domain dir
// below it (the domain dir is handed to the guest by isolation) but list nothing. It returns the
// directory and the dead owners' directories it removed.
func openOwnerTemp(base string) (dir string, swept []string, err error) {
	owner, err := isolation.OwnerName(os.Getpid())
	if err != nil {
		return "", nil, fmt.Errorf("temp dir owner: %w", err)
	}
	dir = filepath.Join(base, "steward-"+owner)
	ownerTemps.Lock()
	defer ownerTemps.Unlock()
	if ownerTemps.users[dir] > 0 {
		ownerTemps.users[dir]++
		return dir, nil, nil
	}
	swept, err = sweepOwnerTemps(base)
	if err != nil {
		return "", swept, err
	}
	if err := os.Mkdir(dir, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", swept, fmt.Errorf("temp dir: %w", err)
	}
	// An existing one must be ours: a real directory owned by this uid (nobody else can plant one
	// for us to write into, nor a symlink that leads the domains elsewhere).
	if err := ownDir(dir); err != nil {
		return "", swept, fmt.Errorf("temp dir: %w", err)
	}
	if err := os.Chmod(dir, 0o711); err != nil { // whatever the umask made of it
		return "", swept, fmt.Errorf("temp dir: %w", err)
	}
	ownerTemps.users[dir]++
	return dir, swept, nil
}

// closeOwnerTemp releases dir; the process's last user removes it with whatever is left inside
// (every domain is reaped by then).
func closeOwnerTemp(dir string) error {
	ownerTemps.Lock()
	defer ownerTemps.Unlock()
	if ownerTemps.users[dir]--; ownerTemps.users[dir] > 0 {
		return nil
	}
	delete(ownerTemps.users, dir)
	delete(ownerTemps.images, dir)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	return nil
}

// sweepOwnerTemps removes the owner temp dirs in base whose sidecar no longer runs. It touches
// only real directories (never a symlink, and os.RemoveAll follows none below) named exactly
// steward-<pid>-<start> and owned by this uid; a live owner's is left alone.
func sweepOwnerTemps(base string) ([]string, error) {
	ents, err := os.ReadDir(base)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("temp dir sweep: %w", err)
	}
	var swept []string
	var errs []error
	for _, e := range ents {
		name := e.Name()
		if e.Type() != fs.ModeDir || !ownerTempRE.MatchString(name) || isolation.OwnerAlive(strings.TrimPrefix(name, "steward-")) {
			continue
		}
		path := filepath.Join(base, name)
		if ownDir(path) != nil {
			continue
		}
		if err := os.RemoveAll(path); err != nil {
			errs = append(errs, fmt.Errorf("temp dir sweep: %w", err))
			continue
		}
		swept = append(swept, path)
	}
	return swept, errors.Join(errs...)
}

// ownDir checks that path is a directory, not a symlink, owned by this process's uid.
func ownDir(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s is owned by uid %d, not %d", path, st.Uid, os.Geteuid())
	}
	return nil
}
