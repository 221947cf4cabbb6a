package hostile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// copySelf writes a copy of this (static) executable to dst with mode.
func copySelf(dst string, mode os.FileMode) error {
	src, err := os.Open(self())
	if err != nil {
		return err
	}
	defer src.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, src)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// execWritten writes a static binary (a copy of itself) into TMPDIR and runs it: code the engine
// brought in as data must not become a program.
func (r *run) execWritten() Finding {
	const attack = "fs.exec-tmpdir"
	tried := "write a static binary (a copy of itself) into TMPDIR, chmod 0755, and exec it"
	p := filepath.Join(r.tmp, "hostile-exec")
	if err := copySelf(p, 0o755); err != nil {
		return Finding{Attack: attack, Tried: tried, Verdict: Blocked, Errno: errno(err), Evidence: "could not write it: " + err.Error()}
	}
	defer os.Remove(p)
	cmd := helper("nop")
	cmd.Path, cmd.Args[0] = p, p
	if err := cmd.Run(); err != nil {
		f := blocked(attack, tried, err)
		f.Evidence += "; TMPDIR mount: " + mountOptions(r.tmp)
		return f
	}
	return Finding{Attack: attack, Tried: tried, Verdict: Succeeded, Evidence: "the copy in TMPDIR ran and exited 0; TMPDIR mount: " + mountOptions(r.tmp)}
}

// execMemfd runs a copy of itself from a memfd (no mount to be noexec).
func (r *run) execMemfd() Finding {
	const attack = "fs.exec-memfd"
	const tried = "memfd_create, write a copy of itself into it, and exec /proc/self/fd/N (a written program without any file system)"
	fd, err := unix.MemfdCreate("hostile", 0)
	if err != nil {
		return blocked(attack, tried, err)
	}
	mf := os.NewFile(uintptr(fd), "memfd")
	defer mf.Close()
	src, err := os.Open(self())
	if err != nil {
		return Finding{Attack: attack, Tried: tried, Verdict: Inconclusive, Evidence: err.Error()}
	}
	_, err = io.Copy(mf, src)
	src.Close()
	if err != nil {
		return blocked(attack, tried, fmt.Errorf("write: %w", err))
	}
	p := fmt.Sprintf("/proc/self/fd/%d", fd)
	cmd := helper("nop")
	cmd.ExtraFiles = []*os.File{mf} // fd 3 in the child, where /proc/self/fd names it at exec
	cmd.Path, cmd.Args[0] = "/proc/self/fd/3", p
	if err := cmd.Run(); err != nil {
		return blocked(attack, tried, err)
	}
	return Finding{Attack: attack, Tried: tried, Verdict: Succeeded, Evidence: "the memfd copy ran and exited 0"}
}

// setuidFifo leaves a setuid executable and a FIFO in TMPDIR and tries the same in the store's
// directories (file://): the test looks for them after the answer.
func (r *run) setuidFifo() Finding {
	const attack = "fs.setuid-fifo"
	f := Finding{Attack: attack, Tried: "leave a setuid-root executable (mode 04755) and a FIFO in TMPDIR and in the store's dataset directories"}
	var ev []string
	dirs := []string{r.tmp}
	if root := r.p[ParamStoreRoot]; root != "" {
		dirs = append(dirs, filepath.Join(root, r.ds, "data"), filepath.Join(root, r.existingDataset(), "data"), root)
	}
	left := 0
	for _, d := range dirs {
		suid, fifo := filepath.Join(d, "hostile-suid-"+r.inv), filepath.Join(d, "hostile-fifo-"+r.inv)
		err := copySelf(suid, 0o755)
		if err == nil {
			err = os.Chmod(suid, 0o755|os.ModeSetuid)
		}
		if err == nil {
			st, _ := os.Stat(suid)
			f.Left = append(f.Left, suid)
			left++
			ev = append(ev, fmt.Sprintf("%s: %v", suid, st.Mode()))
		} else {
			ev = append(ev, fmt.Sprintf("%s: %s", suid, errnoOr(err)))
		}
		if err := unix.Mkfifo(fifo, 0o666); err == nil {
			f.Left = append(f.Left, fifo)
			left++
			ev = append(ev, fifo+": made")
		} else {
			ev = append(ev, fmt.Sprintf("%s: %s", fifo, errnoOr(err)))
		}
	}
	// Left in its own TMPDIR they are the domain's to remove with it: the test judges what
	// remains on the host after the answer.
	f.Verdict, f.Evidence = Pending, strings.Join(ev, "; ")+"; TMPDIR mount: "+mountOptions(r.tmp)
	if left == 0 {
		f.Verdict = Blocked
	}
	return f
}

// tmpQuota fills TMPDIR until the kernel refuses, up to the domain's memory limit and 1 MiB
// more: the temp dir is bounded (a tmpfs of its own, whose pages the domain's memory pays for)
// if the write fails with ENOSPC or EDQUOT before that.
func (r *run) tmpQuota() Finding {
	const attack = "fs.tmpdir-quota"
	bound := int64(r.intParam(ParamTmpBound))
	f := Finding{Attack: attack, Tried: fmt.Sprintf("fill TMPDIR up to the domain's memory limit (%d bytes) and 1 MiB more", bound)}
	if bound <= 0 {
		f.Verdict, f.Evidence = Inconclusive, "the test named no memory limit"
		return f
	}
	p := filepath.Join(r.tmp, "hostile-fill")
	defer os.Remove(p)
	out, err := os.Create(p)
	if err != nil {
		return blocked(attack, f.Tried, err)
	}
	n, err := io.Copy(out, zeros(bound+1<<20))
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		f.Verdict, f.Evidence = Succeeded, fmt.Sprintf("wrote %d bytes; TMPDIR mount: %s", n, mountOptions(r.tmp))
		return f
	}
	f = blocked(attack, f.Tried, err)
	f.Evidence = fmt.Sprintf("refused after %d bytes: %v; TMPDIR mount: %s", n, err, mountOptions(r.tmp))
	if !errors.Is(err, unix.ENOSPC) && !errors.Is(err, unix.EDQUOT) {
		f.Verdict = Inconclusive
	}
	return f
}

// mountOptions describes the mount that holds dir (file system type and options), from
// /proc/self/mountinfo.
func mountOptions(dir string) string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	best, desc := "", "not found"
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 {
			continue
		}
		mp := fs[4]
		if (dir == mp || strings.HasPrefix(dir, strings.TrimSuffix(mp, "/")+"/")) && len(mp) >= len(best) {
			i := 6
			for i < len(fs) && fs[i] != "-" {
				i++
			}
			if i+3 < len(fs) {
				best, desc = mp, fmt.Sprintf("%s %s %s,%s", mp, fs[i+1], fs[5], fs[i+3])
			}
		}
	}
	return desc
}
