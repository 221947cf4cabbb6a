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
// the build embedded (Config.WorkerExecutable, cmd/steward-worker: the worker modes alone, ~22
// MB, whose workers start in 2.3–2.9 ms of package initializers instead of 5.8–8.6), or else a
// copy of this sidecar's own executable. What follows holds for both.
//
// Why: a worker maps the executable's text from the page cache, and tearing its address space
// down at exit (on every answer's path: the answer waits for the domain to be dead) costs one
// reference drop per page-cache folio it mapped. How the cache holds a file depends on who put
// it there: the Go linker writes its output through a mapping, and an executable evicted and
// faulted back in by its workers was as slow here, so a freshly built or freshly booted binary
// sits in 4 KiB folios, while a file written with large write(2)s on a file system with large
// folios (XFS; ext4 on recent kernels) sits in folios of up to a few MiB (here: 10,289 pages in
// 42 folios, against none in a large folio for the linker's output). Measured on this project's
// 2-vCPU VM with the static build (ftrace, 100 prestarted no-op mutations each): the worker's
// exit_mmap 1.21 ms median from /proc/self/exe against 0.68 ms from the image; interleaved, 6
// rounds of 150, the round trip 3.81 against 3.56 ms (median; paired, 8% less). The sidecar
// cannot re-lay its own running executable (pages it maps stay as they are), but it can write
// the copy its workers run.
//
// The image is written once per sidecar process with reads and writes of 2 MiB at offsets that
// are multiples of 2 MiB (never copy_file_range, which may leave the destination in small
// folios): the page cache then holds it in PMD-sized folios where the file system allows, and
// a worker's text and read-only data, whose addresses lie at the same offset from 2 MiB
// boundaries as their file offsets (the Go linker's layout), are mapped 2 MiB a page-table
// entry. `steward serve` started from a copy made in 1 MiB writes (folios of at most 1 MiB)
// mapped them in 4 KiB entries: FilePmdMapped 0 of 29.8 MB RssFile, VmPTE 248 kB; from one
// made in 2 MiB writes 22.5 of 29.2 MB PMD-mapped, VmPTE 204 kB; a prestarted worker 24.6 of
// 27.2 MB, VmPTE 148 -> 96 kB (ext4, kernel 6.18). The image is read-only (0555, in the
// 0711 temp dir: guests can execute it and change nothing), goes with the temp dir at Close, and
// a dead sidecar's is swept with its temp dir. Before any worker depends on it, it is started
// once as a worker probe (isolation.ProbeExecutable): if it does not run, workers stay on
// /proc/self/exe. It is skipped where it cannot help or cannot run: a temp dir on tmpfs (the
// image would be 22–40 MB of unswappable memory, in small pages unless tmpfs is mounted with
// huge pages), one mounted noexec, or a build whose workers do not re-execute this binary.

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
