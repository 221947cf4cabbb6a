//go:build !linux

package sidecar

// imageUnhelpful: workers run on Linux only.
func imageUnhelpful(string) string { return "workers run on Linux only" }
