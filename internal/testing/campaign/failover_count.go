package campaign

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// assignedMessage is the sidecar's log line for a worker handed an invocation (sidecar/invoke.go),
// written before the worker sees the job: the sidecar side of "executed at most once".
const assignedMessage = "worker assigned"

// countAssignments reads every sidecar incarnation's own log (the files their stderr went to, so
// a sidecar SIGKILLed with its host keeps its count) and checks that no invocation was assigned a
// worker more than once across the cluster, nor one that no host sent.
func (r *run) countAssignments() {
	files, err := filepath.Glob(filepath.Join(r.dir, "logs", "*.sidecar.*.log"))
	if err != nil || len(files) == 0 {
		r.violate("sidecar-logs", "", fmt.Sprintf("no sidecar log found (%v)", err))
		return
	}
	sort.Strings(files)
	where := map[string][]string{} // invocation → the logs that assigned it
	for _, f := range files {
		if err := scanAssignments(f, func(inv string) { where[inv] = append(where[inv], filepath.Base(f)) }); err != nil {
			r.violate("sidecar-logs", "", err.Error())
		}
	}
	r.fo.mu.Lock()
	sends := r.fo.sends
	r.fo.mu.Unlock()
	r.mu.Lock()
	r.rep.SidecarLogs = len(files)
	r.mu.Unlock()
	for inv, logs := range where {
		r.mu.Lock()
		r.rep.Assigned++
		r.rep.MaxAssigned = max(r.rep.MaxAssigned, len(logs))
		r.mu.Unlock()
		if len(logs) > 1 {
			r.violate("executed-twice", "", fmt.Sprintf("invocation %s assigned a worker %d times: %v", inv, len(logs), logs))
		}
		if sends[inv] == 0 {
			r.violate("executed-unsent", "", fmt.Sprintf("invocation %s assigned a worker (%v) but no host sent it", inv, logs))
		}
	}
}

// scanAssignments calls fn with the invocation of every "worker assigned" line of a sidecar log.
// Lines that are not hclog JSON (a panic trace) are skipped.
func scanAssignments(path string, fn func(inv string)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var e struct {
			Message    string `json:"@message"`
			Invocation string `json:"invocation"`
		}
		if json.Unmarshal(sc.Bytes(), &e) == nil && e.Message == assignedMessage && e.Invocation != "" {
			fn(e.Invocation)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
