package workerproto

// Fault names, part of the worker protocol: the sidecar passes a fault in the request only when it
// was started with test faults enabled (it checks the name against Faults), and the worker acts
// it out.
const (
	FaultHang              = "hang"                // block forever after reading the request
	FaultIgnoreSIGTERM     = "ignore_sigterm"      // ignore SIGTERM, then hang
	FaultSkipResult        = "skip_result"         // exit 0 without a result
	FaultGarbage           = "garbage"             // write a malformed frame, then hang
	FaultFlood             = "flood"               // write frames and stderr without bound
	FaultCrashAfterBuild   = "crash_after_build"   // die as soon as the build has written index objects
	FaultCrashBeforeCommit = "crash_before_commit" // die after uploading, before the manifest commit
	FaultCrashAfterCommit  = "crash_after_commit"  // die right after the commit, before the result
	FaultOOM               = "oom"                 // allocate without bound
	FaultForkBomb          = "fork_bomb"           // fork without bound
	FaultExitWithChildren  = "exit_with_children"  // exit without a result, leaving children that hold the pipe
	FaultClaimCommit       = "claim_commit"        // answer COMMITTED at pinned+1 without committing (a lying engine)
	FaultHoldBeforeCommit  = "hold_before_commit"  // after uploading, say so in progress and hang before the manifest commit
	FaultHoldAfterCommit   = "hold_after_commit"   // commit, say so in progress and hang before the result
)

// HoldStage is the progress stage a hold fault sends when it reaches its point: "hold:" and the
// fault's name. A test that sees it knows where the worker stands, and races it from there.
func HoldStage(fault string) string { return "hold:" + fault }

// Faults lists every fault name.
var Faults = []string{FaultHang, FaultIgnoreSIGTERM, FaultSkipResult, FaultGarbage, FaultFlood,
	FaultCrashAfterBuild, FaultCrashBeforeCommit, FaultCrashAfterCommit, FaultOOM, FaultForkBomb, FaultExitWithChildren, FaultClaimCommit,
	FaultHoldBeforeCommit, FaultHoldAfterCommit}
