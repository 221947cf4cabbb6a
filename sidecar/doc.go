// Package sidecar is steward's supervisor process: it composes the wire contract (rpc), worker
// isolation (isolation) and the storage engine (storage) behind one JSON-RPC handler, served on
// stdin/stdout or on a go-plugin broker stream. It owns the sidecar's lifecycle: its epoch, graceful
// shutdown, and dying with its host.
//
// It refuses to run work it cannot contain and to answer anything it cannot classify. Its domain
// errors (ledger, storage, context) get their wire class in one place, wireErr in errors.go,
// which every handler returns through; rpc.ToWire turns classes into codes.
package sidecar
