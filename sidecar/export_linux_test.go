package sidecar

// MakeWorkerImage is makeWorkerImage of the executable at path, for benchmarks whose baseline
// must start the same image the sidecar's workers start from.
func MakeWorkerImage(dir, path string) (string, error) {
	return makeWorkerImage(dir, workerSource{path: path})
}
