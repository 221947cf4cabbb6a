package dispatch

import (
	"context"
	"errors"
	"slices"
	"sort"
	"time"
)

// prune deletes finished jobs older than Config.PruneAge, and the least recently updated ones
// beyond Config.PruneKeep; a store would otherwise grow by a job's record (about 5.5 KiB) per
// job forever. It runs at most every Config.PruneInterval, and writes nothing when nothing is due.
func (d *Dispatcher) prune(_ context.Context, st *RoundStats) error {
	now := d.cfg.Now()
	if now.Before(d.pruneAt) {
		return nil
	}
	due, err := d.pruneDue(now)
	if err != nil || len(due) == 0 {
		if err == nil {
			d.pruneAt = now.Add(d.cfg.PruneInterval)
		}
		return err
	}
	n := 0
	for batch := range slices.Chunk(due, pruneBatch) {
		if err := d.pruneBatch(batch, &n); err != nil {
			return err
		}
	}
	d.pruneAt = now.Add(d.cfg.PruneInterval)
	st.Pruned += n
	d.log.Info("pruned finished jobs", "deleted", n, "max_age", d.cfg.PruneAge, "keep", d.cfg.PruneKeep)
	return nil
}

// pruneBatch is the most jobs one prune transaction deletes: etcd bounds a transaction's
// operations (128 by default), and each job costs two compares and up to two deletes.
const pruneBatch = 32

func (d *Dispatcher) pruneBatch(ids []string, n *int) error {
	var deleted int
	err := d.store.Update(func(tx Tx) error {
		deleted = 0 // Update may run fn more than once: count the attempt that commits
		for _, id := range ids {
			j, err := tx.Get(id)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if !j.Finished() { // a late answer made it active again
				continue
			}
			if j.Parent != "" { // a step is kept while its segmented job still reads it
				if p, err := tx.Get(j.Parent); err == nil && !p.Finished() {
					continue
				}
			}
			if err := tx.Delete(id); err != nil {
				return err
			}
			deleted++
		}
		return nil
	})
	if err == nil {
		*n += deleted
	}
	return err
}

// pruneDue returns the ids of the finished jobs to delete. Finished jobs are not in the active
// index, so this reads the whole store.
func (d *Dispatcher) pruneDue(now time.Time) ([]string, error) {
	type finished struct {
		id      string
		updated time.Time
	}
	var all []finished
	err := d.store.View(func(tx Tx) error {
		return tx.All(func(j Job) error {
			if j.Finished() {
				all = append(all, finished{j.ID, j.Updated})
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(all, func(a, b int) bool { return all[a].updated.After(all[b].updated) }) // newest first
	cutoff := now.Add(-d.cfg.PruneAge)
	var due []string
	for i, f := range all {
		if i >= d.cfg.PruneKeep || f.updated.Before(cutoff) {
			due = append(due, f.id)
		}
	}
	return due, nil
}
