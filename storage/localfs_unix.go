//go:build unix

package storage

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The local store's file-system layer. Every path below the root is reached relative to a
// directory handle, one that was itself opened without following a symbolic link: a link
// anywhere under the root fails with ErrSymlink instead of leading outside it. The root itself is
// the operator's choice and may be reached through links.

// openMode says what a path beneath the root must be.
type openMode int

const (
	openDirectory openMode = iota // a directory
	openObject                    // a file opened read-only (checked to be regular by the caller)
)

func (m openMode) flags() int {
	if m == openDirectory {
		return unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	}
	// O_NONBLOCK: opening a FIFO must not wait for a writer before it is refused.
	return unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_NOFOLLOW | unix.O_CLOEXEC
}

// errIsDir: the key names a directory, which is no object.
var errIsDir = errors.New("is a directory")

func localSupported() error { return nil }

// openRoot opens the store's root directory.
func openRoot(root string) (*os.File, error) {
	fd, err := retryEINTR(func() (int, error) { return unix.Open(root, openDirectory.flags()&^unix.O_NOFOLLOW, 0) })
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	return os.NewFile(uintptr(fd), root), nil
}

// walkOpen opens rel ("" is the root itself) one element at a time, each with O_NOFOLLOW relative
// to the directory opened before it. With mkdir, missing directories are created on the way.
func walkOpen(root *os.File, rel string, mode openMode, mkdir bool) (*os.File, error) {
	if rel == "" {
		rel, mode = ".", openDirectory
	}
	parts := strings.Split(rel, "/")
	cur := -1 // the directory fd this walk owns; -1 while at the root
	at := func() int {
		if cur < 0 {
			return int(root.Fd())
		}
		return cur
	}
	for i, name := range parts {
		m := openDirectory
		if i == len(parts)-1 {
			m = mode
		}
		fd, err := openAt(at(), name, m)
		if errors.Is(err, unix.ENOENT) && mkdir {
			if err = unix.Mkdirat(at(), name, 0o755); err == nil {
				inheritOwner(at(), name, -1)
			}
			if err == nil || errors.Is(err, unix.EEXIST) {
				fd, err = openAt(at(), name, m)
			}
		}
		if err != nil {
			err = &fs.PathError{Op: "openat", Path: strings.Join(parts[:i+1], "/"), Err: whyAt(at(), name, err)}
			closeFd(cur)
			return nil, err
		}
		closeFd(cur)
		cur = fd
	}
	return os.NewFile(uintptr(cur), path.Join(root.Name(), rel)), nil
}

func openAt(dir int, name string, m openMode) (int, error) {
	return retryEINTR(func() (int, error) { return unix.Openat(dir, name, m.flags(), 0) })
}

// whyAt turns the errno of a refused O_NOFOLLOW open into ErrSymlink when name is a link (Linux
// answers ELOOP, FreeBSD EMLINK, and a link where a directory was asked for may give ENOTDIR).
func whyAt(dir int, name string, err error) error {
	if !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.EMLINK) && !errors.Is(err, unix.ENOTDIR) {
		return err
	}
	var st unix.Stat_t
	if unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && uint32(st.Mode)&unix.S_IFMT == unix.S_IFLNK {
		return ErrSymlink
	}
	return err
}

func closeFd(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}

func retryEINTR(f func() (int, error)) (int, error) {
	for {
		fd, err := f()
		if !errors.Is(err, unix.EINTR) {
			return fd, err
		}
	}
}

// checkObject makes sure an opened file is a regular file and returns its description.
func checkObject(f *os.File) (fs.FileInfo, error) {
	fi, err := f.Stat()
	switch {
	case err != nil:
		return nil, err
	case fi.IsDir():
		return nil, errIsDir
	case !fi.Mode().IsRegular():
		return nil, ErrNotRegular
	}
	// Opened with O_NONBLOCK to refuse a FIFO without waiting; a regular file needs no such flag.
	if err := unix.SetNonblock(int(f.Fd()), false); err != nil {
		return nil, err
	}
	return fi, nil
}

// statAt describes name in dir without following a link. Only a regular file is an object.
func statAt(dir *os.File, name string) (size int64, mtime time.Time, err error) {
	var st unix.Stat_t
	if err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return 0, time.Time{}, err
	}
	switch uint32(st.Mode) & unix.S_IFMT {
	case unix.S_IFREG:
		return st.Size, time.Unix(st.Mtim.Unix()), nil
	case unix.S_IFLNK:
		return 0, time.Time{}, ErrSymlink
	case unix.S_IFDIR:
		return 0, time.Time{}, errIsDir
	}
	return 0, time.Time{}, ErrNotRegular
}

// inheritOwner gives a directory or file this process just created in dir (by name, or the open
// fd when fd ≥ 0) the owner of dir, when this process is root and dir belongs to someone else:
// a store root handed to a contained worker's guest uid stays the guest's all the way down,
// whoever writes into it (see isolation.Policy.Write). A failure is left alone: the object is
// still whole, only its owner is root's.
func inheritOwner(dir int, name string, fd int) {
	if os.Geteuid() != 0 {
		return
	}
	var st unix.Stat_t
	if unix.Fstat(dir, &st) != nil || st.Uid == 0 {
		return
	}
	if fd >= 0 {
		_ = unix.Fchown(fd, int(st.Uid), int(st.Gid))
		return
	}
	_ = unix.Fchownat(dir, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW)
}

// createTempAt creates a new, empty file in dir with a random name.
func createTempAt(dir *os.File) (*os.File, string, error) {
	for {
		var b [8]byte
		_, _ = rand.Read(b[:])
		name := "put-" + hex.EncodeToString(b[:])
		fd, err := retryEINTR(func() (int, error) {
			return unix.Openat(int(dir.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		})
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return nil, "", &fs.PathError{Op: "openat", Path: name, Err: err}
		}
		inheritOwner(int(dir.Fd()), name, fd)
		return os.NewFile(uintptr(fd), path.Join(dir.Name(), name)), name, nil
	}
}

// renameAt moves from/fromName to to/toName (replacing it); neither name is followed if a link.
func renameAt(from *os.File, fromName string, to *os.File, toName string) error {
	return wrapAt("renameat", toName, unix.Renameat(int(from.Fd()), fromName, int(to.Fd()), toName))
}

// linkAt hard-links from/fromName as to/toName; it fails with EEXIST if toName exists in any form.
func linkAt(from *os.File, fromName string, to *os.File, toName string) error {
	return wrapAt("linkat", toName, unix.Linkat(int(from.Fd()), fromName, int(to.Fd()), toName, 0))
}

// unlinkAt removes name from dir (an empty directory with isDir); a link is removed, not followed.
func unlinkAt(dir *os.File, name string, isDir bool) error {
	flags := 0
	if isDir {
		flags = unix.AT_REMOVEDIR
	}
	return wrapAt("unlinkat", name, unix.Unlinkat(int(dir.Fd()), name, flags))
}

func wrapAt(op, name string, err error) error {
	if err == nil {
		return nil
	}
	return &fs.PathError{Op: op, Path: name, Err: err}
}
