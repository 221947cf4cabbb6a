//go:build !linux || !leanworker

package main

// workerExecutable is nil without the leanworker build tag (a plain `go build` or `go install`):
// workers then start from this binary's own worker mode (`steward worker`), as they did before
// cmd/steward-worker existed, only later and heavier (see that command's doc).
var workerExecutable []byte
