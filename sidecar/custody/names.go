package custody

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrForeignName: an engine asked for custody of a name outside what it may own — not under its
// invocation's dataset, in the dataset's version chain or steward's own folder, a prefix that is
// a whole folder, or a prefix that already holds objects older than the invocation. Nothing was
// reserved; the engine must not write it.
var ErrForeignName = errors.New("custody: name not reservable by this invocation")

// prefixClockSlack is how much older than the invocation's launch an object under a prefix it
// reserves may look (the store's clock against the sidecar's) and still count as its own.
const prefixClockSlack = time.Minute

// Folders of a dataset no engine may reserve in: the version chain (a manifest is shared: its
// abandon could delete another writer's commit) and steward's slot claims (permanent records).
var reservedFolders = []string{"_versions", "_steward"}

// checkNames refuses names outside the invocation's own dataset (docs/ENGINE.md §6).
func checkNames(dataset string, keys, prefixes []string) error {
	base := strings.Trim(dataset, "/") + "/"
	check := func(name string, prefix bool) error {
		rest, ok := strings.CutPrefix(name, base)
		segs := strings.Split(strings.TrimSuffix(rest, "/"), "/")
		switch {
		case !ok || rest == "":
			return fmt.Errorf("%w: %q is not under the dataset %q", ErrForeignName, name, base)
		case strings.Contains(name, "//") || strings.Contains("/"+name, "/../") || strings.Contains("/"+name, "/./"):
			return fmt.Errorf("%w: %q is not a clean name", ErrForeignName, name)
		case len(segs) > 0 && (segs[0] == reservedFolders[0] || segs[0] == reservedFolders[1]):
			return fmt.Errorf("%w: %q is in the dataset's %s/ folder", ErrForeignName, name, segs[0])
		case prefix && len(segs) < 2:
			return fmt.Errorf("%w: prefix %q is a whole folder of the dataset (want <folder>/<name>/)", ErrForeignName, name)
		case !prefix && len(segs) < 2:
			return fmt.Errorf("%w: %q is not inside a folder of the dataset", ErrForeignName, name)
		}
		return nil
	}
	for _, k := range keys {
		if err := check(k, false); err != nil {
			return err
		}
	}
	for _, p := range prefixes {
		if err := check(p, true); err != nil {
			return err
		}
	}
	return nil
}

// checkNewPrefixes refuses a prefix under which the store already holds an object older than
// the invocation's launch: it is not the invocation's new folder, and abandoning it would delete
// what someone else wrote. (An engine that names its folder only after the build, Lance's BTREE,
// reserves a prefix its own domain has already written into.)
func (c *Custody) checkNewPrefixes(ctx context.Context, inv Invocation, prefixes []string) error {
	st, err := c.cfg.OpenStore(ctx, inv.Dataset.Store, inv.Creds)
	if err != nil {
		return fmt.Errorf("custody: open store: %s", c.cfg.Redact(inv.Creds, err.Error()))
	}
	since := inv.Launched.Add(-prefixClockSlack)
	for _, p := range prefixes {
		for info, err := range st.List(ctx, p) {
			if err != nil {
				return fmt.Errorf("custody: list %q: %s", p, c.cfg.Redact(inv.Creds, err.Error()))
			}
			if inv.Launched.IsZero() || info.ModTime.Before(since) {
				return fmt.Errorf("%w: prefix %q already holds %q, written before this invocation", ErrForeignName, p, info.Key)
			}
		}
	}
	return nil
}
