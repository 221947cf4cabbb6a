package storage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// tmpDir holds in-flight writes inside the root, so that the final link/rename never crosses a
// filesystem. Keys under it are invisible to List.
const tmpDir = LocalStagingDir

// LocalStagingDir is the directory below a local store's root where puts are staged before
// they are renamed into place (a contained worker must be able to write it).
const LocalStagingDir = ".steward-tmp"

// LocalStore keeps objects as files under a root directory. Writes go to a temporary file that
// is fsynced and then renamed (Put) or hard-linked (PutIfAbsent: link fails with EEXIST, so it
// never replaces an object) into place, followed by an fsync of the parent directory.
//
// No path beneath the root is resolved through a symbolic link: each file is reached from a
// handle on its parent directory, itself opened without following one (openat2 with
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS on Linux, O_NOFOLLOW element by element elsewhere). A link
// planted in the store fails the operation with ErrSymlink; its target is never read, replaced or
// deleted. Only regular files are objects: a device, FIFO or socket fails with ErrNotRegular, and
// List skips links and special files.
type LocalStore struct {
	root string
}

var _ Store = (*LocalStore)(nil)

// NewLocalStore opens (creating if needed) a store rooted at dir.
func NewLocalStore(dir string) (*LocalStore, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: local store needs a root directory", ErrInvalidConfig)
	}
	if err := localSupported(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, opErr("open", dir, osKind(err), err)
	}
	s := &LocalStore{root: abs}
	err = s.withRoot(func(root *os.File) error {
		tmp, err := openDirCreate(root, tmpDir)
		if err == nil {
			tmp.Close()
		}
		return err
	})
	if err != nil {
		return nil, opErr("open", dir, osKind(err), err)
	}
	return s, nil
}

// Root returns the store's absolute directory.
func (s *LocalStore) Root() string { return s.root }

// withRoot runs fn with a handle on the root directory, from which every path is resolved.
func (s *LocalStore) withRoot(fn func(root *os.File) error) error {
	root, err := openRoot(s.root)
	if err != nil {
		return err
	}
	defer root.Close()
	return fn(root)
}

// splitKey splits a key into its parent directory ("" for the root) and its last element.
func splitKey(key string) (dir, name string) {
	i := strings.LastIndexByte(key, '/')
	if i < 0 {
		return "", key
	}
	return key[:i], key[i+1:]
}

// openDirCreate opens directory rel beneath root, creating what is missing.
func openDirCreate(root *os.File, rel string) (*os.File, error) {
	d, err := openBeneath(root, rel, openDirectory)
	if errors.Is(err, fs.ErrNotExist) {
		d, err = walkOpen(root, rel, openDirectory, true)
	}
	return d, err
}

func (s *LocalStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.write(ctx, "put", key, r, func(tmpd *os.File, tmp string, dir *os.File, name string) error {
		// Replacing a link would not follow it, but a link is never an object to overwrite.
		if _, _, err := statAt(dir, name); errors.Is(err, ErrSymlink) || errors.Is(err, ErrNotRegular) {
			return err
		}
		return renameAt(tmpd, tmp, dir, name)
	})
}

func (s *LocalStore) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.write(ctx, "put-if-absent", key, r, func(tmpd *os.File, tmp string, dir *os.File, name string) error {
		switch _, _, err := statAt(dir, name); {
		case err == nil, errors.Is(err, errIsDir):
			return fs.ErrExist // cheap early answer; the link below is the real arbiter
		case errors.Is(err, ErrSymlink), errors.Is(err, ErrNotRegular):
			return err
		}
		if err := linkAt(tmpd, tmp, dir, name); err != nil {
			return err
		}
		return unlinkAt(tmpd, tmp, false)
	})
}

// place publishes the staged file tmpd/tmp as dir/name.
type place func(tmpd *os.File, tmp string, dir *os.File, name string) error

// write stages r in a temp file, fsyncs it, publishes it with place, and fsyncs the directory.
func (s *LocalStore) write(ctx context.Context, op, key string, r io.Reader, publish place) error {
	if err := checkKey(op, key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return opErr(op, key, ErrUnavailable, err)
	}
	var kind error
	err := s.withRoot(func(root *os.File) error {
		parent, name := splitKey(key)
		dir, err := openDirCreate(root, parent)
		if err != nil {
			return err
		}
		defer dir.Close()
		tmpd, err := openDirCreate(root, tmpDir)
		if err != nil {
			return err
		}
		defer tmpd.Close()
		kind, err = stage(ctx, tmpd, r, func(tmp string) error { return publish(tmpd, tmp, dir, name) })
		if err != nil {
			return err
		}
		return dir.Sync()
	})
	switch {
	case err == nil:
		return nil
	case kind != nil:
		return opErr(op, key, kind, err)
	case errors.Is(err, fs.ErrExist):
		return opErr(op, key, ErrExists, nil)
	}
	return opErr(op, key, osKind(err), err)
}

// stage copies r into a new temp file of tmpd, fsyncs it and hands its name to publish; the temp
// file is removed if anything fails. kind is set when the copy itself failed (the reader or the
// context), which says nothing about the disk.
func stage(ctx context.Context, tmpd *os.File, r io.Reader, publish func(tmp string) error) (kind, err error) {
	f, tmp, err := createTempAt(tmpd)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Close()
			unlinkAt(tmpd, tmp, false)
		}
	}()
	w := newDirectStage(f)
	_, err = io.Copy(w, ctxReader{ctx, r})
	werr := w.finish() // its flush is done before anything closes the file
	if err != nil {
		return ErrUnavailable, err
	}
	if werr != nil {
		return nil, werr
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return nil, publish(tmp)
}

// writebackWindow is how many bytes of a staged file are written before their writeback to the
// disk is started (writeBehind).
const writebackWindow = 8 << 20

// flushWindow is how many bytes of a staged file are written between the flushes writeBehind
// starts.
const flushWindow = 4 * writebackWindow

// writeBehind writes a staged file and starts the disk write of each writebackWindow bytes as
// soon as they are written, after waiting for the window before: the page cache holds at most
// two windows of a large object dirty, and the disk writes while the producer works, so a
// large Put takes about the longer of the two rather than their sum.
//
// Written back is not durable yet: a virtual disk may hold it in its host's cache until the
// cache is flushed, and the fsync that publishes the object would flush everything written
// since the last flush, after its last byte, on the build's answer. So every flushWindow bytes
// a flush (fsync) is started on a goroutine of its own, one at a time, while the writes go on;
// the publishing fsync then flushes the last window or two (docs/PERFORMANCE.md §1.3).
//
// Starting writeback is advice. Waiting for it and the flushes report errors, and finish
// returns the first: once reported on this file, an error of its writeback is not reported
// again by the fsync after (Linux reports each to an open file once).
type writeBehind struct {
	f *os.File
	// written is the bytes written so far, started those whose writeback was started, waited
	// those whose writeback was waited for, flushed those written when the last flush began.
	written, started, waited, flushed int64
	failed                            bool
	err                               error // the first error waited for or flushed
	// flushing is closed when the flush in flight is done; flushErr is its result, read
	// once flushing is closed.
	flushing chan struct{}
	flushErr error
}

func (w *writeBehind) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 { // a window at most a write: one large Write (a bytes.Reader's) is cut
		m, err := w.f.Write(p[:min(len(p), writebackWindow)])
		n, p, w.written = n+m, p[m:], w.written+int64(m)
		if err != nil {
			return n, err
		}
		w.behind()
	}
	return n, nil
}

// behind waits for the window before the last one started and starts the one just written,
// once a window's worth was written since the last start.
func (w *writeBehind) behind() {
	if w.written-w.started < writebackWindow || w.failed {
		return
	}
	if w.started > w.waited {
		w.fail(awaitWriteback(w.f, w.waited, w.started-w.waited))
		w.waited = w.started
	}
	if !w.failed {
		w.failed = startWriteback(w.f, w.started, w.written-w.started) != nil
	}
	w.started = w.written
	w.flushBehind()
}

// flushBehind starts a flush once flushWindow bytes were written since the last began, unless
// one is still in flight or the writeback failed.
func (w *writeBehind) flushBehind() {
	if w.failed || w.written-w.flushed < flushWindow {
		return
	}
	if w.flushing != nil {
		select {
		case <-w.flushing:
			w.collect()
		default:
			return
		}
	}
	w.flushed = w.written
	done := make(chan struct{})
	w.flushing = done
	go func() {
		defer close(done)
		w.flushErr = w.f.Sync()
	}()
}

// collect takes the result of the flush that was in flight.
func (w *writeBehind) collect() {
	w.flushing = nil
	w.fail(w.flushErr)
}

func (w *writeBehind) fail(err error) {
	if err != nil {
		w.failed = true
		w.err = cmp.Or(w.err, err)
	}
}

// finish waits for the flush in flight and returns the first error a wait for writeback or a
// flush reported. It must be called before the file is closed.
func (w *writeBehind) finish() error {
	if w.flushing != nil {
		<-w.flushing
		w.collect()
	}
	return w.err
}

// open opens key's file for reading; only a regular file reached without a link will do.
func (s *LocalStore) open(op, key string) (*os.File, fs.FileInfo, error) {
	if err := checkKey(op, key); err != nil {
		return nil, nil, err
	}
	var f *os.File
	var fi fs.FileInfo
	err := s.withRoot(func(root *os.File) error {
		var err error
		if f, err = openBeneath(root, key, openObject); err != nil {
			return err
		}
		if fi, err = checkObject(f); err != nil {
			f.Close()
		}
		return err
	})
	if err != nil {
		return nil, nil, opErr(op, key, osKind(err), err)
	}
	return f, fi, nil
}

// localBody is the body of a Get: the file, and its size for ReadAll's bound.
type localBody struct {
	*os.File
	size int64
}

func (b localBody) objectSize() int64 { return b.size }

// FileRange implements FileBody: the whole file.
func (b localBody) FileRange() (*os.File, int64, int64) { return b.File, 0, b.size }

// localRange is a GetRange body: length bytes of f from off.
type localRange struct {
	*io.SectionReader
	f           *os.File
	off, length int64
}

func (b localRange) Close() error { return b.f.Close() }

// FileRange implements FileBody.
func (b localRange) FileRange() (*os.File, int64, int64) { return b.f, b.off, b.length }

func (s *LocalStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, opErr("get", key, ErrUnavailable, err)
	}
	f, fi, err := s.open("get", key)
	if err != nil {
		return nil, err
	}
	return localBody{f, fi.Size()}, nil
}

func (s *LocalStore) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, opErr("get", key, ErrUnavailable, err)
	}
	f, fi, err := s.open("get", key)
	if err != nil {
		return nil, err
	}
	if off < 0 || length < 0 || off+length > fi.Size() {
		f.Close()
		return nil, opErr("get", key, ErrCorrupt, fmt.Errorf("range [%d,+%d) outside object of %d bytes", off, length, fi.Size()))
	}
	return localRange{io.NewSectionReader(f, off, length), f, off, length}, nil
}

func (s *LocalStore) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	if err := checkKey("stat", key); err != nil {
		return ObjectInfo{}, err
	}
	info := ObjectInfo{Key: key}
	err := s.withRoot(func(root *os.File) error {
		parent, name := splitKey(key)
		dir, err := openBeneath(root, parent, openDirectory)
		if err != nil {
			return err
		}
		defer dir.Close()
		info.Size, info.ModTime, err = statAt(dir, name)
		return err
	})
	if err != nil {
		return ObjectInfo{}, opErr("stat", key, osKind(err), err)
	}
	return info, nil
}

func (s *LocalStore) List(ctx context.Context, prefix string) iter.Seq2[ObjectInfo, error] {
	return func(yield func(ObjectInfo, error) bool) {
		infos, err := s.list(ctx, prefix)
		if err != nil {
			yield(ObjectInfo{}, err)
			return
		}
		for _, info := range infos {
			if !yield(info, nil) {
				return
			}
		}
	}
}

func (s *LocalStore) list(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	dir := prefix
	if !strings.HasSuffix(prefix, "/") {
		dir = path.Dir(prefix)
	}
	dir = strings.Trim(path.Clean("/"+dir), "/")
	var out []ObjectInfo
	err := s.withRoot(func(root *os.File) error {
		d, err := openBeneath(root, dir, openDirectory)
		if errors.Is(err, fs.ErrNotExist) || isNotDir(err) {
			return nil
		}
		if err != nil {
			return err
		}
		defer d.Close()
		return walkDir(ctx, d, dir, prefix, &out)
	})
	if err != nil {
		return nil, opErr("list", prefix, osKind(err), err)
	}
	slices.SortFunc(out, func(a, b ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// walkDir appends the regular files under d (whose key is rel) that start with prefix. Every
// subdirectory is opened from d without following a link; links and special files are skipped.
func walkDir(ctx context.Context, d *os.File, rel, prefix string, out *[]ObjectInfo) error {
	ents, err := d.ReadDir(-1)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return err
		}
		key := path.Join(rel, e.Name())
		switch {
		case e.IsDir():
			if key == tmpDir || !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/") {
				continue
			}
			sub, err := walkOpen(d, e.Name(), openDirectory, false)
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrSymlink) || isNotDir(err) {
				continue // gone or swapped for a link while listing
			}
			if err != nil {
				return err
			}
			err = walkDir(ctx, sub, key, prefix, out)
			sub.Close()
			if err != nil {
				return err
			}
		case e.Type().IsRegular() && strings.HasPrefix(key, prefix):
			size, mtime, err := statAt(d, e.Name())
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrSymlink) || errors.Is(err, ErrNotRegular) || errors.Is(err, errIsDir) {
				continue // deleted or replaced while listing
			}
			if err != nil {
				return err
			}
			*out = append(*out, ObjectInfo{Key: key, Size: size, ModTime: mtime})
		}
	}
	return nil
}

func (s *LocalStore) DeleteBatch(ctx context.Context, keys []string) []DeleteResult {
	out := make([]DeleteResult, len(keys))
	err := s.withRoot(func(root *os.File) error {
		for i, key := range keys {
			out[i] = DeleteResult{Key: key, Err: s.delete(ctx, root, key)}
		}
		return nil
	})
	if err != nil {
		for i, key := range keys {
			out[i] = DeleteResult{Key: key, Err: opErr("delete", key, osKind(err), err)}
		}
	}
	return out
}

// delete removes one object. Absent is success; a link or special file is refused, never
// removed through or followed.
func (s *LocalStore) delete(ctx context.Context, root *os.File, key string) error {
	if err := checkKey("delete", key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return opErr("delete", key, ErrUnavailable, err)
	}
	parent, name := splitKey(key)
	dir, err := openBeneath(root, parent, openDirectory)
	if errors.Is(err, fs.ErrNotExist) || isNotDir(err) {
		return nil
	}
	if err != nil {
		return opErr("delete", key, osKind(err), err)
	}
	defer dir.Close()
	switch _, _, err := statAt(dir, name); {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, errIsDir):
		return nil // no object there
	case err != nil:
		return opErr("delete", key, osKind(err), err)
	}
	if err := unlinkAt(dir, name, false); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return opErr("delete", key, osKind(err), err)
	}
	pruneEmptyDirs(root, parent)
	return nil
}

// pruneEmptyDirs removes now-empty directories from rel up to (not including) the root, so a
// deleted prefix leaves nothing behind. Best effort: a concurrent writer may recreate a
// directory, and removing a non-empty one fails.
func pruneEmptyDirs(root *os.File, rel string) {
	for rel != "" && rel != tmpDir {
		parent, name := splitKey(rel)
		d, err := openBeneath(root, parent, openDirectory)
		if err != nil {
			return
		}
		err = unlinkAt(d, name, true)
		d.Close()
		if err != nil {
			return
		}
		rel = parent
	}
}

// osKind maps an OS error to a sentinel. Anything unexpected (EIO, ENOSPC, a cancelled copy)
// is ErrUnavailable: the caller cannot know what the disk holds.
func osKind(err error) error {
	switch {
	case errors.Is(err, ErrSymlink):
		return ErrSymlink
	case errors.Is(err, ErrNotRegular):
		return ErrNotRegular
	case errors.Is(err, ErrInvalidKey):
		return ErrInvalidKey
	case errors.Is(err, errIsDir):
		return ErrNotFound
	case errors.Is(err, fs.ErrNotExist):
		return ErrNotFound
	case errors.Is(err, fs.ErrExist):
		return ErrExists
	case errors.Is(err, fs.ErrPermission):
		return ErrPermission
	case isNotDir(err):
		return ErrNotFound
	default:
		return ErrUnavailable
	}
}

// ctxReader stops a copy when its context is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// WriteTo lets a reader that writes its own buffers (an index segment's pipe, a bytes.Reader)
// write them to w, the context checked before each write; any other reader is copied as Read
// would be.
func (c ctxReader) WriteTo(w io.Writer) (int64, error) {
	if wt, ok := c.r.(io.WriterTo); ok {
		return wt.WriteTo(ctxWriter{c.ctx, w})
	}
	return io.Copy(w, struct{ io.Reader }{c})
}

// ctxWriter stops a copy when its context is done.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}
