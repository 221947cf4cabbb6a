package boltfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// ErrAuditRequired: Quarantine was given no operator or no reason.
var ErrAuditRequired = errors.New("boltfile: quarantine needs who and why")

// Audit says who moves files aside, why and when. It is written next to every file moved.
type Audit struct {
	By     string    // the operator
	Reason string    // why
	At     time.Time // when; it also stamps the new names
}

// Moved is one file Quarantine renamed.
type Moved struct {
	From string `json:"from"`
	To   string `json:"to"`
	// Problem is what Check found; "" for a sound file moved with a corrupt one it belongs with.
	Problem string `json:"problem,omitempty"`
	// Note is the audit record written next to To.
	Note string `json:"-"`
}

type auditRecord struct {
	At     time.Time `json:"at"`
	By     string    `json:"by"`
	Reason string    `json:"reason"`
	Moved
}

// Quarantine is the explicit way out of a corrupt file: it moves a set of files that belong
// together (a journal and its sidecar file) aside when at least one of them is corrupt, so the
// next start creates them anew. Each present file becomes <file>.corrupt-<UTC time> and gets an
// audit record <that>.audit.json with a, the problem found and both names. It takes every
// file's flock first, so nothing moves while a process has one open (ErrInUse), and it moves
// nothing when no file is corrupt (ErrNotCorrupt). Absent files are skipped. Each file is
// checked as a bbolt file (Check).
func Quarantine(a Audit, paths ...string) ([]Moved, error) {
	return QuarantineChecked(a, nil, paths...)
}

// QuarantineChecked is Quarantine for a set whose files are checked together, or are not all
// bbolt files: problems gets a copy of each file of paths, in order ("" for an absent one), and
// returns what is wrong with each ("" when sound). nil checks each copy with Check.
func QuarantineChecked(a Audit, problems func(copies []string) ([]string, error), paths ...string) ([]Moved, error) {
	if a.By == "" || a.Reason == "" {
		return nil, ErrAuditRequired
	}
	copies := make([]string, len(paths))
	defer func() {
		for _, c := range copies {
			if c != "" {
				os.Remove(c)
			}
		}
	}()
	for i, p := range paths {
		lock, err := lockExclusive(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		defer lock.Close()
		// The flock shuts bbolt out in this process too, so the check reads a copy (consistent:
		// the lock keeps writers away).
		if copies[i], err = copyOf(p); err != nil {
			return nil, err
		}
	}
	if problems == nil {
		problems = checkEach
	}
	found, err := problems(copies)
	if err != nil {
		return nil, err
	}
	if len(found) != len(paths) {
		return nil, fmt.Errorf("boltfile: %d problems for %d files", len(found), len(paths))
	}
	var moves []Moved
	anyCorrupt := false
	for i, p := range paths {
		if copies[i] == "" {
			continue
		}
		anyCorrupt = anyCorrupt || found[i] != ""
		moves = append(moves, Moved{From: p, Problem: found[i]})
	}
	if !anyCorrupt {
		return nil, fmt.Errorf("%w: %v", ErrNotCorrupt, paths)
	}
	for i := range moves {
		if err := moveAside(&moves[i], a); err != nil {
			return moves[:i], err
		}
	}
	return moves, nil
}

// checkEach checks every present copy as a bbolt file.
func checkEach(copies []string) ([]string, error) {
	out := make([]string, len(copies))
	for i, c := range copies {
		if c == "" {
			continue
		}
		err := Check(c, time.Second)
		var ce *CorruptError
		switch {
		case errors.As(err, &ce):
			out[i] = ce.Err.Error()
		case err != nil:
			return nil, err
		}
	}
	return out, nil
}

// copyOf copies path to a temporary file.
func copyOf(path string) (string, error) {
	src, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer src.Close()
	return copyToTemp(path, src)
}

// moveAside renames m.From to a free <file>.corrupt-<stamp>[-n] name and writes its audit record.
func moveAside(m *Moved, a Audit) error {
	base := m.From + ".corrupt-" + a.At.UTC().Format("20060102T150405Z")
	for n := 1; ; n++ {
		m.To = base
		if n > 1 {
			m.To = fmt.Sprintf("%s-%d", base, n)
		}
		err := os.Link(m.From, m.To) // never replaces an earlier quarantine
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return err
		}
		break
	}
	if err := os.Remove(m.From); err != nil {
		return err
	}
	m.Note = m.To + ".audit.json"
	rec, err := json.MarshalIndent(auditRecord{At: a.At.UTC(), By: a.By, Reason: a.Reason, Moved: *m}, "", "  ")
	if err != nil {
		return err
	}
	if err := writeNew(m.Note, append(rec, '\n')); err != nil {
		return err
	}
	return SyncDir(filepath.Dir(m.From))
}

func writeNew(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	return errors.Join(err, f.Sync(), f.Close())
}
