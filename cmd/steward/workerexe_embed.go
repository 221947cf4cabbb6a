//go:build linux && leanworker

package main

import _ "embed"

// workerExecutable is cmd/steward-worker, built for this platform just before this binary and
// embedded by the build (`make build` and internal/testing/testbin map this file to it with -overlay),
// so that a sidecar's workers can never be of another build than the sidecar itself. The
// sidecar writes it to its worker image (sidecar.Config.WorkerExecutable).
//
//go:embed steward-worker
var workerExecutable []byte
