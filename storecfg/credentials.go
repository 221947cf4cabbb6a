package storecfg

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/cba1309c/steward/rpc"
)

// The credentials format is how a sidecar is given its own S3 keys (steward serve
// --s3-credentials-file / --s3-credentials-fd, docs/PROTOCOL.md §1.1.1). It lives here, beside the
// store mapping, so that host-side code (the campaign, the demo) can write it without linking
// the supervisor.

// MaxCredentialsFile bounds a credentials file in bytes.
const MaxCredentialsFile = 4 << 10

// ErrCredentials: credentials could not be read (malformed; for the sidecar also: a file missing,
// owned by another uid, readable by group or others). Messages never quote the content.
var ErrCredentials = errors.New("sidecar credentials")

// ParseCredentials reads the credentials format: lines "access_key = …" and "secret_key = …"
// (both required, each once), blank lines and lines starting with "#" ignored, whitespace
// around the key and the value trimmed. Errors name a line number, never its text.
func ParseCredentials(r io.Reader) (rpc.Credentials, error) {
	var c rpc.Credentials
	seen := map[string]bool{}
	sc := bufio.NewScanner(io.LimitReader(r, MaxCredentialsFile+1))
	sc.Buffer(make([]byte, 0, 512), MaxCredentialsFile+1)
	n, total := 0, 0
	for sc.Scan() {
		n++
		total += len(sc.Bytes()) + 1
		if total > MaxCredentialsFile+1 {
			return rpc.Credentials{}, fmt.Errorf("%w: more than %d bytes", ErrCredentials, MaxCredentialsFile)
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
