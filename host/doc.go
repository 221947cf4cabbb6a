// Package host is the database side of steward: it starts a sidecar (through go-plugin, or directly
// with JSON-RPC on the sidecar's stdio) and talks to it only through the rpc contract. Errors come
// back as the rpc sentinels (errors.Is), never as text to parse.
//
// host never imports the sidecar, isolation or storage packages: a database links the client, not
// the supervisor.
package host
