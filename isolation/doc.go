// Package isolation runs one worker process under verified cgroup limits, supervises it by pidfd,
// and brings its whole process tree down and reaped on demand.
//
// It owns: detecting and verifying the cgroup layout (unified v2 with delegated memory+pids,
// hybrid v1-limits-plus-unified-placement, or v1 only), creating one cgroup set per worker
// ("domain") and reading every limit back, launching the worker inside it (born there: through
// CLONE_INTO_CGROUP in a unified hierarchy, and in v1 ones by forking from a launcher thread that
// moved itself into them for the fork; held behind a barrier pipe until its placement is verified,
// and attached by pid where the thread cannot move), contained workers in the hybrid and v1 modes
// forked by a small launcher process as the supervisor's own children (launcher_linux.go),
// so that the supervisor's address space is never copied into a fork,
// the worker-side entry checks (EnterWorker), a contained domain's mount namespace (the host's
// trees hidden but the system's and the engine's, a size-limited noexec tmpfs for its temp dir,
// mounts_linux.go), a contained domain's gateway listener (a TCP socket
// the domain makes in its own network namespace and hands to the supervisor before its engine
// runs, gateway_linux.go), the kill ladder (SIGTERM → grace → cgroup kill →
// reap), reaping of re-parented descendants as a child subreaper, OOM and peak-memory facts read
// after reaping, and removal of cgroups left behind by a dead sidecar.
//
// It refuses: launching anything when no mode verifies (ErrIsolationUnavailable), inheriting the
// caller's environment or descriptors, identifying a process by a bare pid number when signalling
// or reaping it, and reaping a child it cannot prove belongs to one of its domains (so the exit
// status of other children of the process is never stolen). It imports no other steward package
// and knows nothing about the protocol spoken on the worker's pipes.
//
// Cgroup layout: <hierarchy>/<Parent>/<owner>/<domain>, where owner is "<pid>-<starttime>" of the
// supervising process. A later supervisor removes only owner directories whose process is gone,
// so several live sidecars can share one Parent. With Parent "auto" the parent is, per hierarchy,
// the process's own delegated cgroup (it moves itself into the leaf "supervisor" beside its owner
// directory when alone there); it never writes a cgroup above the one delegated to it.
package isolation
