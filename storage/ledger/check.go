package ledger

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
)

// WALPath is the write-ahead log of the journal at path, the journal's second file: a slot is
// moved, restored or quarantined as the two together.
func WALPath(path string) string { return walPath(path) }

// Problems says what Open would refuse in a journal and its write-ahead log, given copies of
// the two ("" for one that is absent): a problem for each file, "" when it is sound. It opens
// the copies as Open does (the bbolt structure, every record decoded, the log replayed), in a
// directory of its own, and removes them; the originals are not read. A log that is missing
// while the journal needs one is the journal's problem: it is the file there is to move.
func Problems(journal, log string) (journalProblem, logProblem string, err error) {
	if journal == "" && log == "" {
		return "", "", nil
	}
	dir, err := os.MkdirTemp("", "steward-ledger-check-*")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "ledger.db")
	for _, f := range [][2]string{{journal, path}, {log, walPath(path)}} {
		if f[0] == "" {
			continue
		}
		if err := linkOrCopy(f[0], f[1]); err != nil {
			return "", "", err
		}
	}
	l, err := Open(context.Background(), Config{Path: path})
	if err == nil {
		return "", "", l.Close()
	}
	var ce *CorruptError
	switch {
	case !errors.As(err, &ce):
		return "", "", err
	case ce.Path == walPath(path) && log != "":
		return "", ce.Err.Error(), nil
	default:
		return ce.Err.Error(), "", nil
	}
}

// linkOrCopy makes dst a link to src, or a copy where the two are on different file systems.
func linkOrCopy(src, dst string) error {
	if os.Link(src, dst) == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}
