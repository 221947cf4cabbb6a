//go:build !unix

package storage

import (
	"errors"
	"fmt"
	"os"
	"time"
)

// A local store needs openat-style calls to refuse symbolic links; this platform has none here.
var errLocalUnsupported = fmt.Errorf("local store: %w on this platform (it needs a unix system)", errors.ErrUnsupported)

type openMode int

const (
	openDirectory openMode = iota
	openObject
)

var errIsDir = errors.New("is a directory")

func localSupported() error { return errLocalUnsupported }

func openRoot(string) (*os.File, error)                           { return nil, errLocalUnsupported }
func walkOpen(*os.File, string, openMode, bool) (*os.File, error) { return nil, errLocalUnsupported }
func openBeneath(*os.File, string, openMode) (*os.File, error)    { return nil, errLocalUnsupported }
func checkObject(*os.File) (os.FileInfo, error)                   { return nil, errLocalUnsupported }
func statAt(*os.File, string) (int64, time.Time, error)           { return 0, time.Time{}, errLocalUnsupported }
func createTempAt(*os.File) (*os.File, string, error)             { return nil, "", errLocalUnsupported }
func renameAt(*os.File, string, *os.File, string) error           { return errLocalUnsupported }
func linkAt(*os.File, string, *os.File, string) error             { return errLocalUnsupported }
func unlinkAt(*os.File, string, bool) error                       { return errLocalUnsupported }
