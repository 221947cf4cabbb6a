//go:build !unix

package sidecar

import (
	"errors"
	"os"
)

// lockFile is unsupported off Unix: the ledger journal cannot be guarded against a second sidecar.
func lockFile(string) (*os.File, error) {
	return nil, errors.New("sidecar: ledger lock files are not supported on this platform")
}
