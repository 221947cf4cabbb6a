package isolation

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
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
// reached the refrigerator; the v1 freezer may pass through FREEZING while tasks fork, so its
// state is written again each round).
func (c *domainCgroups) freeze(ctx context.Context, on bool) error {
	op, v2Value, v1Value := "thaw", "0", "THAWED"
	if on {
		op, v2Value, v1Value = "freeze", "1", "FROZEN"
	}
	var file, value string
	var reached func() (bool, error)
	switch {
	case c.v2 != nil:
		file, value = filepath.Join(c.v2.dir, "cgroup.freeze"), v2Value
		reached = func() (bool, error) {
			v, err := readKey(filepath.Join(c.v2.dir, "cgroup.events"), "frozen")
			return (v == 1) == on, err
		}
	case c.v1 != nil && c.v1.dirs[hFreezer] != "":
		file, value = filepath.Join(c.v1.dirs[hFreezer], "freezer.state"), v1Value
		reached = func() (bool, error) {
			b, err := readFile(file)
			return strings.TrimSpace(string(b)) == value, err
		}
	default:
		return withMode(opErr(op, "", "", nil, errNoFreezer), c.mode)
	}
	for pause := 50 * time.Microsecond; ; pause = min(2*pause, 5*time.Millisecond) {
		if err := writeFile(file, value); err != nil {
			return withMode(opErr(op, "", file, nil, err), c.mode)
		}
		done, err := reached()
		if err != nil {
			return withMode(opErr(op, "", file, nil, err), c.mode)
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return withMode(opErr(op, "", file, nil, ctx.Err()), c.mode)
		case <-time.After(pause):
		}
	}
}
