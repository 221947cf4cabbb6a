// Package hostile is a hostile engine of engine protocol v1 (docs/ENGINE.md) for steward's CI: an
// engine that, where a real engine would build an index, plays compromised native code and tries
// to break out of its worker domain — read the sidecar's secrets and memory, forge answers, raise
// its own limits, leave processes and cgroups behind, reach the store behind its storage gateway
// or the network, write through the gateway what its invocation may not (other datasets, other
// versions, the sidecar's claims, traversals, overwrites, deletes), exceed its quotas, keep
// writing after its answer, race the fence, and make the syscalls a contained guest must not make
// (issue #13 item 8, issue 44 item 7).
//
// Each attack really makes its syscalls and reports one Finding, decided from the syscall's
// result or from what it observed: Blocked (with the errno or the evidence of the refusal),
// Succeeded (with the evidence), or Pending when only a look from outside the domain after the
// answer can decide (a process that must not survive, a file that must not appear on the host) —
// the test decides those. Findings go to stderr, one line each ("HOSTILE-FINDING " + JSON), so
// they reach the test through the sidecar's log whatever the containment allows; a last line
// ("HOSTILE-DONE " + JSON) says the run finished. No finding carries a secret: what the engine
// reads of one is reported as a SHA-256 prefix the test compares with its own.
//
// The package refuses to pretend: an attack that cannot run (a target the test did not name)
// is Inconclusive, never Blocked.
package hostile

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
)

// Verdict is the outcome of one attack.
type Verdict string

// Verdicts.
const (
	// Blocked: the system refused (an errno, an unreadable target, a refused reservation).
	Blocked Verdict = "blocked"
	// Succeeded: the attack did what it set out to do.
	Succeeded Verdict = "succeeded"
	// Pending: the attack's effect can only be judged from outside after the answer (Left names
	// what to look for).
	Pending Verdict = "pending"
	// Inconclusive: the attack could not be tried (a missing target); a test treats it as a failure.
	Inconclusive Verdict = "inconclusive"
)

// Finding is one attack's result.
type Finding struct {
	// Attack is a stable name, "<area>.<what>".
	Attack string `json:"attack"`
	// Tried says what the attack did, for people.
	Tried string `json:"tried"`
	// Verdict is the outcome.
	Verdict Verdict `json:"verdict"`
	// Errno is the error name of the refusing syscall (EPERM, ENOENT …), empty if none.
	Errno string `json:"errno,omitempty"`
	// Evidence is what the attack observed, for people (never a secret).
	Evidence string `json:"evidence,omitempty"`
	// Left names what the attack left on purpose for the test to look for after the answer: host
	// paths (files, cgroup directories) and process markers ("marker:<argv word>").
	Left []string `json:"left,omitempty"`
	// Digest is the SHA-256 prefix (16 hex) of a secret the attack read, for the test to compare.
	Digest string `json:"digest,omitempty"`
	// AtUnixMs is when the attack did its decisive step (the answer of answer.linger), for a
	// test that judges how long the sidecar took after it.
	AtUnixMs int64 `json:"at_unix_ms,omitempty"`
	// Handoff carries the engine's gateway key to the test, reversed and hex-encoded (no
	// redactor can know every reversible encoding): the test tries it at the real store.
	Handoff string `json:"handoff,omitempty"`
}

// Done is the last report line of a run.
type Done struct {
	Invocation string `json:"invocation"`
	Findings   int    `json:"findings"`
}

// Report line prefixes on the engine's stderr.
const (
	FindingPrefix = "HOSTILE-FINDING "
	DonePrefix    = "HOSTILE-DONE "
)

// MarkerPrefix starts the argv word of every process the engine leaves running on purpose,
// followed by the invocation id: a test finds survivors by it in /proc/*/cmdline.
const MarkerPrefix = "hostile-linger:"

// IndexType is the one index type the hostile engine declares.
const IndexType = "HOSTILE"

// Digest returns the SHA-256 prefix by which findings name a secret.
func Digest(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:8])
}

// Parse extracts a run's findings from log lines (the stderr lines, possibly embedded in the
// sidecar's JSON log lines), and whether the run's Done line was seen.
func Parse(lines []string) (findings []Finding, done bool) {
	for _, l := range lines {
		if i := strings.Index(l, FindingPrefix); i >= 0 {
			var f Finding
			if json.Unmarshal([]byte(l[i+len(FindingPrefix):]), &f) == nil {
				findings = append(findings, f)
			}
		} else if strings.Contains(l, DonePrefix) {
			done = true
		}
	}
	return findings, done
}

// Params names the index.params keys through which the test tells the engine its targets. Every
// key is optional; an attack whose target is missing is Inconclusive.
const (
	ParamSidecarPid   = "sidecar_pid"   // the sidecar's pid as the host sees it
	ParamSidecarStart = "sidecar_start" // its start time (/proc/<pid>/stat field 22)
	ParamSidecarNS    = "sidecar_ns"    // its namespaces, "mnt=4026531841,net=…" (the ns inode numbers)
	ParamVictimPid    = "victim_pid"    // another worker of the same sidecar, mid-mutation
	ParamVictimStart  = "victim_start"
	ParamListen       = "listen"     // a 127.0.0.1 TCP listener of the test
	ParamStateDir     = "state_dir"  // the sidecar's state directory
	ParamCredFile     = "cred_file"  // a credentials file of the sidecar
	ParamHostDir      = "host_dir"   // a directory of the host's /tmp
	ParamOtherDir     = "other_dir"  // another dataset's directory (file:// stores)
	ParamStoreRoot    = "store_root" // the file:// store's root directory
	ParamExisting     = "existing"   // "name=key;name=key": existing objects (reserve and overwrite targets)
	ParamSibling      = "sibling"    // an existing key of a sibling dataset whose name starts with this one's
	ParamOnly         = "only"       // comma-separated attack areas to run (default all)
	ParamMode         = "mode"       // which answer the engine gives (Mode*; default ModeMain)

	ParamTCPTargets  = "tcp_targets"   // comma-separated host:port listeners of the test (127.0.0.2, the host's addresses)
	ParamUDP         = "udp"           // comma-separated host:port UDP listeners of the test
	ParamUnixSockets = "unix_sockets"  // comma-separated pathname unix socket listeners of the test (mode 0777)
	ParamAbstract    = "abstract"      // the name of an abstract unix socket listener of the test
	ParamStoreAddr   = "store_addr"    // the real store's endpoint (MinIO), which the engine must not reach
	ParamWorkerDisk  = "worker_disk"   // the sidecar's --worker-disk: bytes one invocation may write
	ParamTmpBound    = "tmp_bound"     // the domain's memory limit, which its temp dir must not exceed
	ParamObjectQuota = "object_quota"  // the objects one invocation may create (--ledger-quota)
	ParamRate        = "rate"          // the gateway's request rate bound (requests a second)
	ParamBurst       = "burst"         // and its burst
	ParamSlowLoris   = "slowloris"     // "1": trickle a request header to the gateway past its ReadHeaderTimeout
	ParamRaceDelay   = "race_delay_ms" // ModeRace: wait this long after race.ready before the manifest PUT
)

// Modes: what one invocation of the engine does and answers (ParamMode).
const (
	// ModeMain runs the attack areas, then answers COMMITTED at pinned+1 having committed nothing.
	ModeMain = "main"
	// ModeNoop answers IF_EXISTS_NOOP to a request that did not ask for it.
	ModeNoop = "noop"
	// ModeUUID answers with an index_uuid that is a path climbing out of the dataset.
	ModeUUID = "uuid"
	// ModeMessage answers a failure whose message holds control characters, a forged log line
	// and its gateway key in several forms; its progress stages and stderr hold them too.
	ModeMessage = "message"
	// ModeLinger answers, keeps running with its pipes open, and keeps writing through its
	// gateway after the answer (itself and a child).
	ModeLinger = "linger"
	// ModeRace announces race.ready, then PUTs the manifest of pinned+1 (twice at once, with
	// different bytes, on two connections) while the test resolves the invocation.
	ModeRace = "race"
	// ModeAlias commits pinned+1 under a manifest name readers of the dataset never look at.
	ModeAlias = "alias"
	// ModeForge writes a forged COMMITTED answer onto the sidecar's host transport.
	ModeForge = "forge"
)

// UnsafeID is the index_uuid of ModeUUID: a path out of the dataset, with a newline.
const UnsafeID = "../../other/_indices/pwned\nforged"

// ForgedLogMessage is the @message of the log entries ModeMessage writes to its stderr, shaped
// as the sidecar's own: none may appear as an entry of the sidecar's log.
const ForgedLogMessage = "forged by the hostile engine"

// Leak markers wrap the forms of its gateway secret key that ModeMessage writes into its message,
// progress stages and stderr: exact, hex of it, and its characters separated by spaces.
const (
	LeakExact  = "[[exact:"
	LeakHex    = "[[hex:"
	LeakSpaced = "[[spaced:"
	LeakEnd    = "]]"
)
