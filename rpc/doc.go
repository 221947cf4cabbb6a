// Package rpc owns steward's wire contract: method names, versioned parameter and result types,
// the error-code table, the one mapping between domain sentinels and JSON-RPC error codes, and
// bounded JSON-RPC 2.0 streams over any io.ReadWriteCloser (Content-Length framing by default,
// newline-delimited JSON as an option).
//
// rpc is a leaf: it imports no other steward package. The sidecar registers handlers on a
// Router; Go hosts use Client, whose errors come back as the sentinels of errors.go so callers
// classify with errors.Is and never by reading message text. docs/PROTOCOL.md is the same
// contract written for people implementing a host in another language.
package rpc
