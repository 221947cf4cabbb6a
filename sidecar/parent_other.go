//go:build !linux

package sidecar

import (
	"context"
	"errors"
)

// watchParent is Linux-only (pidfd); elsewhere the sidecar relies on stdin EOF and session loss.
func watchParent(context.Context) (<-chan struct{}, error) {
	return nil, errors.New("parent watch needs Linux pidfds")
}
