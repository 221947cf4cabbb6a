package sidecar

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storecfg"
)

// The sidecar's own S3 keys are read once at start from a file or an inherited descriptor,
// never from its environment: a long-running process's initial environment stays readable in
// /proc/<pid>/environ for its whole life, whatever it later unsets. docs/PROTOCOL.md §1.1 has
// the format (storecfg.ParseCredentials reads it).

// maxCredentialsFile bounds the credentials file or descriptor read.
const maxCredentialsFile = storecfg.MaxCredentialsFile

// ErrCredentials: the sidecar's own credentials could not be read (file missing, owned by
// another uid, readable by group or others, malformed). Messages never quote the file's content.
var ErrCredentials = storecfg.ErrCredentials

// Sources of the sidecar's own credentials, as hello reports them (rpc.CredentialsReport.Source).
const (
	CredentialsNone = "none"
	CredentialsFile = "file"
	CredentialsFD   = "fd"
)

// LoadCredentialsFile reads the credentials file at path. It is refused unless it is a regular
// file owned by this process's effective uid with no permission bit for group or others (mode
// 0400 or 0600): the check is made on the opened file, so it is the file that is read.
func LoadCredentialsFile(path string) (rpc.Credentials, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return rpc.Credentials{}, fmt.Errorf("%w: %w", ErrCredentials, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return rpc.Credentials{}, fmt.Errorf("%w: %w", ErrCredentials, err)
	}
	if err := checkCredentialsFile(path, fi); err != nil {
		return rpc.Credentials{}, err
	}
	return readCredentials(f)
}

// LoadCredentialsFD reads the credentials once from the inherited descriptor fd (a pipe or a
// file), to its end, and closes it.
func LoadCredentialsFD(fd int) (rpc.Credentials, error) {
	if fd < 3 {
		return rpc.Credentials{}, fmt.Errorf("%w: descriptor %d is stdin, stdout or stderr", ErrCredentials, fd)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return rpc.Credentials{}, fmt.Errorf("%w: descriptor %d: %w", ErrCredentials, fd, err)
	}
	f := os.NewFile(uintptr(fd), fmt.Sprintf("credentials-fd-%d", fd))
	defer f.Close()
	return readCredentials(f)
}

func readCredentials(r io.Reader) (rpc.Credentials, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxCredentialsFile+1))
	if err != nil {
		return rpc.Credentials{}, fmt.Errorf("%w: read: %w", ErrCredentials, err)
	}
	defer clear(b)
	return storecfg.ParseCredentials(bytes.NewReader(b))
}

func checkCredentialsFile(path string, fi os.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%w: %s is not a regular file", ErrCredentials, path)
	case !ok:
		return fmt.Errorf("%w: %s: no owner to check", ErrCredentials, path)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%w: %s is owned by uid %d, not by the sidecar's uid %d", ErrCredentials, path, st.Uid, os.Geteuid())
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("%w: %s has mode %04o: group and others must have no access (chmod 0400)", ErrCredentials, path, fi.Mode().Perm())
	}
	return nil
}
