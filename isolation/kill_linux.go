package isolation

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// Terminate runs the kill ladder: SIGTERM to every process of the domain, up to TermGrace for
// them to exit, then SIGKILL the domain (cgroup.kill, or freeze → SIGKILL each → thaw on v1)
// until the cgroup is empty and every descendant is reaped, within ReapBound. Cancelling ctx
// cuts the grace short and skips to SIGKILL; the kill and reap stage then still runs to
// completion or ReapBound, so a caller that gave up still leaves a domain that is down. The
// Outcome is always filled in; ErrReapBound says it is not final (a later call retries). Once
// final, calling it again returns the same result.
func (d *Domain) Terminate(ctx context.Context) (Outcome, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.teardownLocked(ctx, true)
}

// Kill is Terminate without the SIGTERM stage.
func (d *Domain) Kill(ctx context.Context) (Outcome, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.teardownLocked(ctx, false)
}

func (d *Domain) teardownLocked(ctx context.Context, graceful bool) (Outcome, error) {
	if d.final != nil {
		return *d.final, d.finalErr
	}
	if d.closed {
		return Outcome{ExitCode: -1}, ErrClosed
	}
	stage := "exited"
	// released: nothing of the domain is charged to its pids controller, so nothing is left
	// alive or unreaped (see domainCgroups.released) and there is nothing to signal, kill,
	// wait for or reap: the outcome is final at once. This is how a worker that exited by
	// itself (every answer that was not a kill) is found, in one read of one counter.
	released := d.gone()
	quiet := released || d.quiet() // once quiet, a domain stays so: nothing of it is left to start a task
	if graceful && !quiet {
		stage = "term"
		d.tr.signal(unix.SIGTERM)
		graceCtx, cancel := context.WithTimeout(ctx, d.cfg.TermGrace)
		d.pollUntil(graceCtx, d.quiet)
		cancel()
		quiet = d.quiet()
	}
	reapCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.ReapBound)
	defer cancel()
	if !quiet {
		stage = "kill"
	}
	var killErr error
	lastKill := time.Time{}
	// A cgroup found without a live task stays so (none is left to start one, and nothing else
	// moves tasks into it): it is not read again.
	empty := quiet
	survivors := -1 // the last count, when the loop ended on none left
	if released {
		survivors = 0
	}
	done := released || d.pollUntil(reapCtx, func() bool {
		if !empty && d.cg.populated() {
			// Repeat the kill now and then: on v1 each round only kills what the freezer caught.
			if time.Since(lastKill) > 5*time.Millisecond {
				killErr = d.cg.killOnce(reapCtx, d.tr.mark)
				lastKill = time.Now()
			}
			d.tr.reapOnce()
			return false
		}
		empty = true
		if !d.mainExited() {
			return false
		}
		if d.gone() {
			survivors = 0 // the scan of this process's children below would find none
			return true
		}
		if d.tr.reapOnce() > 0 {
			return false
		}
		survivors = d.tr.survivors()
		return survivors == 0
	})

	o := d.mainOutcome()
	o.Stage = stage
	if !done || survivors != 0 { // none left stays so: no process of the domain is left to start one
		survivors = d.tr.survivors()
	}
	o.Survivors = survivors
	o.AllReaped = done && o.Survivors == 0
	if c := d.settled.Load(); c != nil && stage == "exited" {
		o.OOMKilled, o.PeakMemory = c.oomKilled, c.peak // final since Wait found the domain empty
	} else {
		o.OOMKilled = d.cg.oomKilled() // read after reaping: asynchronous events miss kills
		o.PeakMemory = d.cg.peak()
	}

	var err error
	switch {
	case !o.AllReaped && ctx.Err() != nil:
		err = fmt.Errorf("isolation: teardown of %s: %w", d.id, ctx.Err())
	case !o.AllReaped:
		err = opErr("teardown "+d.id, d.cg.mode, "", ErrReapBound,
			fmt.Errorf("%d processes left after %s (last kill error: %v)", o.Survivors, d.cfg.ReapBound, killErr))
	}
	// A final result is cached; a cut-short one is not, so a later call can finish the job.
	if err == nil {
		d.final, d.finalErr = &o, nil
	}
	return o, err
}

func (d *Domain) mainExited() bool {
	select {
	case <-d.exited:
		return true
	default:
		return false
	}
}

// gone: the main process is reaped, no process the tracker pinned is left to reap through it,
// and the domain's pids controller charges nothing, so no process of the domain is alive or
// unreaped anywhere: zombies, and escapees re-parented to this process, included.
func (d *Domain) gone() bool {
	return d.mainExited() && len(d.tr.members) == 0 && d.cg.released()
}

// quiet: the main process is reaped and the cgroup holds no live task (as a Wait found it, or
// read now).
func (d *Domain) quiet() bool {
	return d.mainExited() && (d.settled.Load() != nil || !d.cg.populated())
}

// pollUntil calls cond until it holds or ctx ends, sleeping in between until a member exits or
// the cgroup's populated flag changes (tracker.wait), at most a short, growing interval: exits
// nobody is told about (an orphan re-parented to us, a zombie not yet known) are found by the
// next poll.
func (d *Domain) pollUntil(ctx context.Context, cond func() bool) bool {
	interval := 100 * time.Microsecond
	for {
		if cond() {
			return true
		}
		if ctx.Err() != nil {
			return cond()
		}
		wait := interval
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			wait = max(time.Until(dl), 0)
		}
		if d.tr.exited[d.pid] && !d.mainExited() {
			// The main process is dead; its own Wait reaps it and closes d.exited any moment.
			t := time.NewTimer(wait)
			select {
			case <-d.exited:
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			continue
		}
		switch {
		case d.tr.wait(wait):
			interval = 100 * time.Microsecond // something exited: what follows comes soon
		case interval < 5*time.Millisecond:
			interval *= 2
		}
	}
}
