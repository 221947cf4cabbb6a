package ledger

import (
	"errors"
	"os"
	"time"

	"github.com/cba1309c/steward/internal/boltfile"
	bolt "go.etcd.io/bbolt"
)

// WALPath is the write-ahead log of the journal at path, the journal's second file: a slot is
// moved, restored or quarantined as the two together.
func WALPath(path string) string { return walPath(path) }

// Problems says what Open would refuse in a journal and its write-ahead log, given copies of
// the two ("" for one that is absent): a problem for each file, "" when it is
// sound. It reads the copies only. A journal whose log is missing carries the problem itself
// (it is the file there is to move).
func Problems(journal, log string) (journalProblem, logProblem string, err error) {
	var done uint64
	var marked bool
	if journal != "" { // absent: Open makes a new journal, which never had a log
		var bad string
		if done, marked, bad, err = checkJournal(journal); bad != "" || err != nil {
			return bad, "", err
		}
	}
	if log == "" {
		if marked {
			return "its write-ahead log is missing", "", nil
		}
		return "", "", nil
	}
	f, err := os.Open(log)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	gen, ops, err := readWAL(f)
	var ce *CorruptError
	if errors.As(err, &ce) {
		return "", ce.Err.Error(), nil
	}
	if err != nil {
		return "", "", err
	}
	if err := walBelongs(gen, len(ops) > 0, done, marked); err != nil {
		return "", err.Error(), nil
	}
	return "", "", nil
}

// checkJournal checks the bbolt file of a journal and reads which log generation it absorbed.
func checkJournal(path string) (done uint64, marked bool, problem string, err error) {
	err = boltfile.Check(path, time.Second)
	var bad *boltfile.CorruptError
	if errors.As(err, &bad) {
		return 0, false, bad.Err.Error(), nil
	}
	if err != nil {
		return 0, false, "", err
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return 0, false, "", err
	}
	done, marked, derr := walDone(db)
	if err := db.Close(); err != nil {
		return 0, false, "", err
	}
	if derr != nil {
		return 0, false, derr.Error(), nil
	}
	return done, marked, "", nil
}
