//go:build !linux

package main

import "os"

// protocolStdout returns stdout itself off Linux (where the sidecar cannot isolate workers and
// serves only the transport).
func protocolStdout() (*os.File, error) { return os.Stdout, nil }
