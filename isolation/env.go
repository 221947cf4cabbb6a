package isolation

import (
	"fmt"
	"strings"
)

// Environment variables Start adds to the worker's environment, read by EnterWorker.
const (
	// EnvParent holds the supervisor's pid; EnterWorker refuses to run under another parent.
	EnvParent = "STEWARD_ISOLATION_PARENT"
	// EnvBarrierFD holds the fd number of the barrier pipe's read end, when there is one.
	EnvBarrierFD = "STEWARD_ISOLATION_BARRIER_FD"
	// EnvNoFile holds the RLIMIT_NOFILE value EnterWorker applies.
	EnvNoFile = "STEWARD_ISOLATION_NOFILE"
	// EnvProbe is set to "1" for the preflight probe child: EnterWorker exits 0 after its checks.
	EnvProbe = "STEWARD_ISOLATION_PROBE"
	// EnvContain is set to "1" when the worker was born in its own namespaces: EnterWorker
	// builds its mount namespace, Contain applies Landlock and seccomp.
	EnvContain = "STEWARD_ISOLATION_CONTAIN"
	// EnvTmp holds the host path of the domain's private temp dir, where EnterWorker mounts a
	// tmpfs of its own (mounts_linux.go).
	EnvTmp = "STEWARD_ISOLATION_TMP"
	// EnvTmpBytes holds the size of that tmpfs in bytes (Spec.TempDirBytes, resolved).
	EnvTmpBytes = "STEWARD_ISOLATION_TMP_BYTES"
	// EnvExecFD holds the descriptor a contained worker was executed through; EnterWorker
	// closes it.
	EnvExecFD = "STEWARD_ISOLATION_EXEC_FD"
	// EnvPolicy holds the launch's Policy (JSON), merged by Contain with the worker's own.
	EnvPolicy = "STEWARD_ISOLATION_POLICY"
	// EnvCPUs holds the supervisor's CPUs ("0,1") for a worker started on fewer (Spec.CPUs):
	// what WidenCPUs gives it.
	EnvCPUs = "STEWARD_ISOLATION_CPUS"
	// EnvGatewayFD holds the descriptor of the worker's end of the gateway hand-off pair
	// (Spec.Gateway): EnterWorker sends the listener on it and closes it.
	EnvGatewayFD = "STEWARD_ISOLATION_GATEWAY_FD"
	// EnvGatewayPort holds Spec.Gateway, the port EnterWorker listens on in the domain.
	EnvGatewayPort = "STEWARD_ISOLATION_GATEWAY_PORT"
)

// FirstExtraFD is the worker's fd number of Spec.ExtraFiles[0].
const FirstExtraFD = 3

// ExitRefused is the exit code the worker should use when EnterWorker fails; the probe treats
// it as a failed entry check.
const ExitRefused = 125

// ExtraFD returns the worker's fd number of Spec.ExtraFiles[i].
func ExtraFD(i int) int { return FirstExtraFD + i }

// checkEnv rejects malformed entries and names that belong to isolation or go-plugin: a worker
// must never see the plugin handshake variables of the process that launched the sidecar.
func checkEnv(env []string) error {
	for _, kv := range env {
		k, _, found := strings.Cut(kv, "=")
		switch {
		case !found || k == "":
			return fmt.Errorf("%w: malformed env entry (no KEY=)", ErrInvalidSpec)
		case strings.HasPrefix(k, "STEWARD_ISOLATION_"):
			return fmt.Errorf("%w: env %s is reserved for isolation", ErrInvalidSpec, k)
		case strings.HasPrefix(k, "PLUGIN_"):
			return fmt.Errorf("%w: go-plugin variable %s must not reach a worker", ErrInvalidSpec, k)
		}
	}
	return nil
}

// validName accepts cgroup directory names that cannot escape their parent.
func validName(s string) bool {
	if s == "" || len(s) > 64 || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}
