package isolation

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"
)

// Freeze stops every task of the domain where it stands (cgroup.freeze where the domain has a
// cgroup2 group — v2, and the unified group of hybrid — else the v1 freezer) and returns once the
// kernel reports the domain frozen, or ctx's error. A frozen task runs no instruction and makes
// no system call until Thaw; SIGKILL still ends it (Kill and Terminate work on a frozen domain).
func (d *Domain) Freeze(ctx context.Context) error { return d.freeze(ctx, true) }

// Thaw undoes Freeze and returns once the kernel reports the domain thawed.
func (d *Domain) Thaw(ctx context.Context) error { return d.freeze(ctx, false) }

func (d *Domain) freeze(ctx context.Context, on bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || d.final != nil {
		return ErrClosed
	}
	return d.cg.freeze(ctx, on)
}

// errNoFreezer: the domain has neither a cgroup2 group nor a v1 freezer group.
var errNoFreezer = errors.New("no freezer for this domain")

// freeze writes the freezer state and polls until the kernel reports it (frozen: every task has
// reached the refrigerator; the v1 freezer may pass through FREEZING while tasks fork).
func (c *domainCgroups) freeze(ctx context.Context, on bool) error {
	var file, value, want, key string
	switch {
	case c.v2 != nil:
		file, key = filepath.Join(c.v2.dir, "cgroup.freeze"), filepath.Join(c.v2.dir, "cgroup.events")
		value, want = "0", "frozen 0"
		if on {
			value, want = "1", "frozen 1"
		}
	case c.v1 != nil && c.v1.dirs[hFreezer] != "":
		file = filepath.Join(c.v1.dirs[hFreezer], "freezer.state")
		key, value = file, "THAWED"
		if on {
			value = "FROZEN"
		}
		want = value
	default:
		return withMode(opErr("freeze", "", "", nil, errNoFreezer), c.mode)
	}
	op := map[bool]string{true: "freeze", false: "thaw"}[on]
	for pause := 50 * time.Microsecond; ; pause = min(2*pause, 5*time.Millisecond) {
		if err := writeFile(file, value); err != nil { // v1: re-written for tasks forked meanwhile
			return withMode(opErr(op, "", file, nil, err), c.mode)
		}
		b, err := readFile(key)
		if err != nil {
			return withMode(opErr(op, "", key, nil, err), c.mode)
		}
		if hasLine(b, want) {
			return nil
		}
		select {
		case <-ctx.Done():
			return withMode(opErr(op, "", key, nil, fmt.Errorf("not %s: %w", want, ctx.Err())), c.mode)
		case <-time.After(pause):
		}
	}
}

// hasLine reports whether b has the line want.
func hasLine(b []byte, want string) bool {
	for _, l := range bytes.Split(b, []byte("\n")) {
		if string(bytes.TrimSpace(l)) == want {
			return true
		}
	}
	return false
}
