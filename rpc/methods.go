package rpc

// ProtocolVersion is the wire protocol version spoken by this build. A host states the version it
// speaks in steward.hello; a sidecar refuses a version it does not speak with ErrUnsupportedProtocol.
const ProtocolVersion = 1

// Method names. Every method is a request unless marked as a notification.
const (
	MethodHello    = "steward.hello"    // handshake: versions, epoch, isolation report
	MethodShutdown = "steward.shutdown" // graceful: stop accepting, finish in-flight calls, exit 0
	MethodMetrics  = "metrics.get"      // Prometheus text exposition

	MethodIndexMutate  = "index.mutate"  // run one index mutation in an isolated worker
	MethodIndexResolve = "index.resolve" // settle an indeterminate mutation by fencing its slot
	MethodIndexCancel  = "index.cancel"  // end a queued or running mutation; answered after its answer

	MethodObjectsReserve  = "objects.reserve"     // take custody of object names before upload
	MethodObjectsAccept   = "objects.accept"      // names were published: release them
	MethodObjectsAbandon  = "objects.abandon"     // names were not published: delete them
	MethodObjectsTransfer = "objects.transfer"    // move names between owners with receipts
	MethodObjectsAck      = "objects.acknowledge" // receiver's contiguous receipt: the offers move
	MethodObjectsStatus   = "objects.status"      // ledger figures and an owner's names
	MethodObjectsSweep    = "objects.sweep"       // delete a dataset's historical orphans

	NotifyProgress = "$/progress" // notification, sidecar → host: progress of a running mutation
)

// Capabilities advertised in steward.hello so hosts can feature-test without version arithmetic.
const (
	CapMetrics  = "metrics"
	CapShutdown = "shutdown"
	CapMutate   = "index.mutate"
	CapResolve  = "index.resolve"
	CapCancel   = "index.cancel"
	CapObjects  = "objects"
	CapSweep    = "objects.sweep"
	CapEngines  = "engines" // steward.hello lists engines; index.mutate and index.resolve take engine
	CapProgress = "progress"
)
