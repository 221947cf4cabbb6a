package worker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cba1309c/steward/isolation"
)

// ExecEngine is `steward engine-exec -- COMMAND ARG…`: the trampoline every engine other than the
// built-in one starts behind. It enters the worker domain exactly as the built-in worker does
// (isolation.EnterWorker: the v1/hybrid placement barrier, no new privileges, no core dumps, the
// nofile limit, the parent check), removes isolation's own variables from the environment, and
// replaces itself with the engine (execve: same pid, same fds 3 and 4, same cgroups). It returns
// only on failure, with the exit code.
//
// execve resets the dumpable flag (fs/exec.c), so an engine that must not be ptrace-attachable by
// its own uid sets PR_SET_DUMPABLE itself; NO_NEW_PRIVS and the rlimits survive the exec.
func ExecEngine(args []string) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if err := isolation.EnterWorker(); err != nil {
		fmt.Fprintln(os.Stderr, "steward engine-exec: refused:", err)
		return isolation.ExitRefused
	}
	// The launch's policy (the engine's installation, the call's store) is known: contain the
	// process before the engine's first instruction; execve keeps every layer.
	if err := isolation.Contain(isolation.Policy{}); err != nil {
		fmt.Fprintln(os.Stderr, "steward engine-exec: refused:", err)
		return isolation.ExitRefused
	}
	if len(args) == 0 || !filepath.IsAbs(args[0]) {
		fmt.Fprintln(os.Stderr, "steward engine-exec: want -- /absolute/command [args…]")
		return 2
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STEWARD_ISOLATION_") {
			env = append(env, kv)
		}
	}
	err := syscall.Exec(args[0], args, env)
	fmt.Fprintln(os.Stderr, "steward engine-exec: exec", args[0]+":", err)
	return 126
}
