// Package examples holds runnable hosts that use steward the way a database would: gohost (Go,
// go-plugin + the durable dispatcher), gohello (the smallest Go host: hello and metrics), and pyhost
// (Python, standard library only, JSON-RPC over the sidecar's stdio). The tests in this package run each
// example against a freshly built steward binary, so the examples cannot rot.
package examples
