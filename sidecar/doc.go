// Package sidecar is steward's supervisor process: it composes the wire contract (rpc), worker
// isolation (isolation) and the storage engine (storage) behind one JSON-RPC handler, served on
// stdin/stdout or on a go-plugin broker stream. It owns the sidecar's lifecycle: its epoch, graceful
// shutdown, and dying with its host.
//
// It refuses to run work it cannot contain and to answer anything it cannot classify; mapping of
// its errors to wire codes happens in rpc, never here.
package sidecar
