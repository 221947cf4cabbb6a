package sidecar

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// The worker image is a file in the sidecar's temp dir which the built-in engine's workers and
// the engine-exec trampoline are started from instead of /proc/self/exe: the worker executable
// the build embedded (Config.WorkerExecutable, cmd/steward-worker: the worker modes alone), or
// else a copy of this sidecar's own executable.
//
// Why a copy: a worker's exit (on every answer's path) drops one reference per page-cache folio
// of the text it mapped, and a binary written by the linker, or evicted and faulted back in,
// sits in 4 KiB folios. A file written with large aligned write(2)s sits in large folios where
// the file system has them (XFS; ext4 on recent kernels), and the Go linker lays text out at the
// same offset from 2 MiB boundaries as in the file, so a worker maps it 2 MiB a page-table entry.
// The sidecar cannot re-lay its own running executable, but it can write the copy its workers
// run: once per sidecar, in reads and writes of 2 MiB at 2 MiB offsets (never copy_file_range,
// which may leave small folios). Figures: docs/PERFORMANCE.md §2.3.
//
// The image is read-only (0555, in the 0711 temp dir: guests can execute it and change nothing),
// goes with the temp dir at Close, and a dead sidecar's is swept with its temp dir. Before any
// worker depends on it, it is started once as a worker probe (isolation.ProbeExecutable): if it
// does not run, workers stay on /proc/self/exe. It is skipped where it cannot help or cannot
// run: a temp dir on tmpfs (22–40 MB of unswappable memory, in small pages unless tmpfs has huge
// pages), one mounted noexec, or a build whose workers do not re-execute this binary.

// workerImageName is the image's name in the sidecar's temp dir.
const workerImageName = "worker-image"

// imageCopyBuffer is the size of each read and write of the copy: a PMD's worth on x86-64 and
// arm64 with 4 KiB pages.
const imageCopyBuffer = 2 << 20

// imageProbeTimeout bounds the image's one probe start (a worker's checks, ~10 ms).
const imageProbeTimeout = 10 * time.Second

// workerSource is what a worker image is written from: the worker executable a build embedded
// (Config.WorkerExecutable), or the file at path (this binary, /proc/self/exe).
type workerSource struct {
	exe  []byte
	path string
}

func (w workerSource) String() string {
	if w.exe != nil {
		return "the embedded steward-worker"
	}
	return w.path
}

// makeWorkerImage writes src to dir's worker image and returns its path, or "" and why not when
// the image is not made.
func makeWorkerImage(dir string, src workerSource) (string, error) {
	if why := imageUnhelpful(dir); why != "" {
		return "", errors.New(why)
	}
	var in io.Reader
	size := int64(len(src.exe))
	if src.exe != nil {
		in = bytes.NewReader(src.exe)
	} else {
		f, err := os.Open(src.path)
		if err != nil {
			return "", fmt.Errorf("worker image: %w", err)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return "", fmt.Errorf("worker image: %w", err)
		}
		in, size = f, fi.Size()
	}
	dst := filepath.Join(dir, workerImageName)
	tmp := dst + ".part"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o700)
	if err != nil {
		return "", fmt.Errorf("worker image: %w", err)
	}
	n, err := io.CopyBuffer(writerOnly{out}, readerOnly{in}, make([]byte, imageCopyBuffer))
	if err == nil {
		err = out.Chmod(0o555) // whatever the umask made of it
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != size {
		err = fmt.Errorf("copied %d of %d bytes", n, size)
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("worker image: %w", err)
	}
	return dst, nil
}

// readerOnly and writerOnly hide *os.File's ReadFrom and WriteTo from io.CopyBuffer, so that the
// copy is plain reads and writes of imageCopyBuffer bytes.
type readerOnly struct{ io.Reader }

type writerOnly struct{ io.Writer }
