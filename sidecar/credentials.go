package sidecar

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/cba1309c/steward/rpc"
)

// The sidecar's own S3 keys are read once at start from a file or an inherited descriptor,
// never from its environment: a long-running process's initial environment stays readable in
// /proc/<pid>/environ for its whole life, whatever it later unsets. docs/PROTOCOL.md §1.1 has
// the format.

// maxCredentialsFile bounds the credentials file or descriptor read.
const maxCredentialsFile = 4 << 10

// ErrCredentials: the sidecar's own credentials could not be read (file missing, owned by
// another uid, readable by group or others, malformed). Messages never quote the file's content.
var ErrCredentials = errors.New("sidecar credentials")

// Sources of the sidecar's own credentials, as hello reports them (rpc.CredentialsReport.Source).
const (
	CredentialsNone = "none"
	CredentialsFile = "file"
	CredentialsFD   = "fd"
)

// ParseCredentials reads the credentials format: lines "access_key = …" and "secret_key = …"
// (both required, each once), blank lines and lines starting with "#" ignored, whitespace
// around the key and the value trimmed. Errors name a line number, never its text.
func ParseCredentials(r io.Reader) (rpc.Credentials, error) {
	var c rpc.Credentials
	seen := map[string]bool{}
	sc := bufio.NewScanner(io.LimitReader(r, maxCredentialsFile+1))
	sc.Buffer(make([]byte, 0, 512), maxCredentialsFile+1)
	n, total := 0, 0
	for sc.Scan() {
		n++
		total += len(sc.Bytes()) + 1
		if total > maxCredentialsFile+1 {
			return rpc.Credentials{}, fmt.Errorf("%w: more than %d bytes", ErrCredentials, maxCredentialsFile)
		}
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case !ok:
			return rpc.Credentials{}, fmt.Errorf("%w: line %d is not key = value", ErrCredentials, n)
		case k != "access_key" && k != "secret_key":
			return rpc.Credentials{}, fmt.Errorf("%w: line %d: unknown field (want access_key or secret_key)", ErrCredentials, n)
		case seen[k]:
			return rpc.Credentials{}, fmt.Errorf("%w: line %d: %s given twice", ErrCredentials, n, k)
		case v == "":
			return rpc.Credentials{}, fmt.Errorf("%w: line %d: %s is empty", ErrCredentials, n, k)
		}
		seen[k] = true
		if k == "access_key" {
			c.AccessKey = v
		} else {
			c.SecretKey = v
		}
	}
	if err := sc.Err(); err != nil {
		return rpc.Credentials{}, fmt.Errorf("%w: %s", ErrCredentials, "unreadable or too long")
	}
	if !seen["access_key"] || !seen["secret_key"] {
		return rpc.Credentials{}, fmt.Errorf("%w: both access_key and secret_key are required", ErrCredentials)
	}
	return c, nil
}

// FormatCredentials renders c in the format ParseCredentials reads (for tools and tests that
// write a credentials file).
func FormatCredentials(c rpc.Credentials) []byte {
	return []byte("access_key = " + c.AccessKey + "\nsecret_key = " + c.SecretKey + "\n")
}

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
	return ParseCredentials(bytes.NewReader(b))
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

// EnvKeyVars are the environment variables a sidecar refuses to start with (steward serve): the
// S3 keys that tools such as `steward dataset` read from their environment.
var EnvKeyVars = []string{"STEWARD_S3_ACCESS_KEY", "STEWARD_S3_SECRET_KEY"}

// WithoutEnvKeys is env (KEY=VALUE) without EnvKeyVars, for a process that starts a sidecar.
func WithoutEnvKeys(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); !slices.Contains(EnvKeyVars, k) {
			out = append(out, kv)
		}
	}
	return out
}
