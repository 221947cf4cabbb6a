package hostile

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

func (r *run) filesystem(_ context.Context) {
	name := "hostile-" + r.inv
	r.emit(r.writeOutside("fs.write-state-dir", "the sidecar's state directory", filepath.Join(r.p[ParamStateDir], name)))
	r.emit(r.writeOutside("fs.write-host-dir", "a directory of the host's /tmp", filepath.Join(r.p[ParamHostDir], name)))
	r.emit(r.writeOutside("fs.write-tmp", "/tmp itself", filepath.Join("/tmp", name)))
	r.emit(r.readFile("fs.read-credentials", "the sidecar's credentials file", r.p[ParamCredFile], true))
	r.emit(r.readStateDir())
	r.emit(r.readFile("fs.read-kcore", "/proc/kcore (kernel memory)", "/proc/kcore", false))
	r.emit(r.execShell())
	r.emit(r.mknodDisk())
	r.emit(r.execWritten())
	r.emit(r.execMemfd())
	r.emit(r.setuidFifo())
	r.emit(r.tmpQuota())
}

// writeOutside creates path (O_EXCL). A created file is Pending: a private mount could have
// caught it; only the host's view says whether it escaped (the test looks, then removes it).
func (r *run) writeOutside(attack, what, path string) Finding {
	tried := "create a file in " + what
	if filepath.Dir(path) == "." || strings.HasPrefix(path, "hostile-") {
		return Finding{Attack: attack, Tried: tried, Verdict: Inconclusive, Evidence: "the test named no such directory"}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return blocked(attack, tried, err)
	}
	_, werr := f.WriteString("written by the hostile engine " + r.inv + "\n")
	f.Close()
	return Finding{Attack: attack, Tried: tried, Verdict: Pending, Left: []string{path},
		Evidence: fmt.Sprintf("created %s (write: %v); the test looks for it on the host", path, werr)}
}

func (r *run) readFile(attack, what, path string, digest bool) Finding {
	tried := "open and read " + what
	if path == "" {
		return Finding{Attack: attack, Tried: tried, Verdict: Inconclusive, Evidence: "the test named no such file"}
	}
	f, err := os.Open(path)
	if err != nil {
		return blocked(attack, tried, err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	n, err := f.Read(buf)
	if n <= 0 {
		return blocked(attack, tried, fmt.Errorf("opened, read nothing: %w", err))
	}
	out := Finding{Attack: attack, Tried: tried, Verdict: Succeeded, Evidence: fmt.Sprintf("read %d bytes of %s", n, path)}
	if digest {
		out.Digest = Digest(string(buf[:n]))
	}
	return out
}

func (r *run) readStateDir() Finding {
	const attack, tried = "fs.read-state-dir", "list the sidecar's state directory and read a file in it (the ledger journal)"
	dir := r.p[ParamStateDir]
	if dir == "" {
		return Finding{Attack: attack, Tried: tried, Verdict: Inconclusive, Evidence: "the test named no state directory"}
	}
	var files []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && !strings.Contains(p, "hostile-") {
			files = append(files, p)
		}
		return err
	})
	if len(files) == 0 {
		if err == nil {
			err = errors.New("no file visible")
		}
		return blocked(attack, tried, err)
	}
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil && len(b) > 0 {
			return Finding{Attack: attack, Tried: tried, Verdict: Succeeded, Evidence: fmt.Sprintf("%d files listed; read %d bytes of %s", len(files), len(b), filepath.Base(p))}
		} else if err != nil {
			return blocked(attack, tried, err)
		}
	}
	return Finding{Attack: attack, Tried: tried, Verdict: Succeeded, Evidence: fmt.Sprintf("%d files listed (all empty)", len(files))}
}

func (r *run) execShell() Finding {
	const attack, tried = "fs.exec-shell", "exec /bin/sh -c 'exit 7'"
	err := exec.Command("/bin/sh", "-c", "exit 7").Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 7 {
		return Finding{Attack: attack, Tried: tried, Verdict: Succeeded, Evidence: "the shell ran and exited 7"}
	}
	if err == nil {
		err = errors.New("exited 0, not 7")
	}
	return blocked(attack, tried, err)
}

// mknodDisk makes a block device node of the first disk in /proc/partitions and reads from it.
func (r *run) mknodDisk() Finding {
	const attack, tried = "fs.mknod-disk", "mknod a block device node of the host's first disk (from /proc/partitions) in TMPDIR and read 4 KiB of it"
	f, err := os.Open("/proc/partitions")
	if err != nil {
		return blocked(attack, tried, err)
	}
	defer f.Close()
	var major, minor uint32
	var dev string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var blocks uint64
		if n, _ := fmt.Sscan(sc.Text(), &major, &minor, &blocks, &dev); n == 4 && !strings.HasPrefix(dev, "loop") && !strings.HasPrefix(dev, "ram") {
			break
		}
		dev = ""
	}
	if dev == "" {
		return Finding{Attack: attack, Tried: tried, Verdict: Blocked, Evidence: "no disk listed in /proc/partitions"}
	}
	node := filepath.Join(r.tmp, "disk")
	if err := unix.Mknod(node, unix.S_IFBLK|0o600, int(unix.Mkdev(major, minor))); err != nil {
		return blocked(attack, tried, err)
	}
	defer os.Remove(node)
	d, err := os.Open(node)
	if err != nil {
		return blocked(attack, tried, fmt.Errorf("mknod %s (%d:%d) succeeded, open: %w", dev, major, minor, err))
	}
	defer d.Close()
	buf := make([]byte, 4096)
	n, err := d.Read(buf)
	if n <= 0 {
		return blocked(attack, tried, fmt.Errorf("mknod %s and open succeeded, read: %w", dev, err))
	}
	return Finding{Attack: attack, Tried: tried, Verdict: Succeeded, Evidence: fmt.Sprintf("read %d bytes of %s (%d:%d)", n, dev, major, minor)}
}
