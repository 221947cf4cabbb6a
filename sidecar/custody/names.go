package custody

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cba1309c/steward/storage"
)

// ErrForeignName: an engine asked for custody of a name outside what it may own — not under its
// invocation's dataset, outside the dataset's data and index folders (DataFolders), a prefix that
// is a whole folder, or a prefix that already holds objects older than the invocation. Nothing was
// reserved; the engine must not write it.
var ErrForeignName = errors.New("custody: name not reservable by this invocation")

// ErrNameExists: an engine asked for custody of a key that already exists in the store. It is
// someone's object, not the invocation's new one, and abandoning it would delete it with the
// sidecar's credentials. Nothing was reserved; the engine must not write it.
var ErrNameExists = errors.New("custody: object already exists")

// ErrQuota: the reservation would take the invocation past its ticket quota (Config.Quota).
// Nothing of it was reserved; what the invocation already holds is unaffected.
var ErrQuota = errors.New("custody: invocation's ticket quota exhausted")

// DataFolders are the folders of a dataset an engine may reserve in: data files, index segments
// (steward's storage/dataset.Folders), and Lance's transaction files. Never the version chain
// (_versions/: a manifest is shared, its abandon could delete another writer's commit), steward's
// slot claims (_steward/) or any other folder.
var DataFolders = []string{"data", "_indices", "_transactions"}

// statParallelism bounds the existence checks of one reservation in flight at once.
const statParallelism = 8

// prefixClockSlack is how much older than the invocation's launch an object under a prefix it
// reserves may look (the store's clock against the sidecar's) and still count as its own.
const prefixClockSlack = time.Minute

// checkNames refuses names outside the invocation's own dataset (docs/ENGINE.md §6) and its
// build area (buildArea, dataset-relative, "" for none).
func checkNames(dataset, buildArea string, keys, prefixes []string) error {
	base := strings.Trim(dataset, "/") + "/"
	check := func(name string, prefix bool) error {
		rest, ok := strings.CutPrefix(name, base)
		segs := strings.Split(strings.TrimSuffix(rest, "/"), "/")
		switch {
		case ok && buildArea != "" && strings.HasPrefix(rest, buildArea) && len(rest) > len(buildArea) &&
			!strings.Contains(name, "//") && !strings.Contains("/"+name, "/../") && !strings.Contains("/"+name, "/./"):
			return nil
		case !ok || rest == "":
			return fmt.Errorf("%w: %q is not under the dataset %q", ErrForeignName, name, base)
		case strings.Contains(name, "//") || strings.Contains("/"+name, "/../") || strings.Contains("/"+name, "/./"):
			return fmt.Errorf("%w: %q is not a clean name", ErrForeignName, name)
		case !slices.Contains(DataFolders, segs[0]):
			return fmt.Errorf("%w: %q is in the dataset's %s/ folder, not one of its data and index folders %v", ErrForeignName, name, segs[0], DataFolders)
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
	st, err := c.cfg.OpenStore(ctx, inv.Store, inv.Creds)
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

// checkAbsent refuses a key that already exists in the store (ErrNameExists), with one Stat per
// key, statParallelism at a time, before anything is journaled: the ticket can then only ever
// cover an object the invocation writes. A Stat that fails for another reason than "not found"
// refuses the reservation too (nothing is known about the name). A writer outside steward that
// creates the key between this check and the engine's upload is not seen (steward's own writers
// are kept out by the ledger's ownership check).
func (c *Custody) checkAbsent(ctx context.Context, inv Invocation, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	st, err := c.cfg.OpenStore(ctx, inv.Store, inv.Creds)
	if err != nil {
		return fmt.Errorf("custody: open store: %s", c.cfg.Redact(inv.Creds, err.Error()))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  = make(chan string)
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
			cancel()
		}
		mu.Unlock()
	}
	for range min(statParallelism, len(keys)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range next {
				_, err := st.Stat(ctx, k)
				switch {
				case err == nil:
					c.existsRefusals.Add(1)
					fail(fmt.Errorf("%w: %q is already in the store: not this invocation's new object", ErrNameExists, k))
				case !errors.Is(err, storage.ErrNotFound):
					fail(fmt.Errorf("custody: stat %q: %s", k, c.cfg.Redact(inv.Creds, err.Error())))
				}
			}
		}()
	}
feed:
	for _, k := range keys {
		select {
		case next <- k:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}
