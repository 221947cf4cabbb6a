package sidecar

// MakeWorkerImage is makeWorkerImage, for benchmarks whose baseline must start the same image
// the sidecar's workers start from.
var MakeWorkerImage = makeWorkerImage
