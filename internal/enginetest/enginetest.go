// Package enginetest runs an engine executable as steward would, without a sidecar: a child with
// fd 3 = harness→engine and fd 4 = engine→harness, stdin /dev/null, stderr captured, the
// allow-listed environment of docs/ENGINE.md and a private temp dir. It speaks engine protocol v1,
// answers custody reservations through a hook, records everything, and enforces the frame rules,
// so that one contract suite can run against any engine (the Lance engine today, the built-in one
// later). It refuses to be a sidecar: no cgroups, no ledger, no redaction.
package enginetest

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

// Frame bounds of engine protocol v1.
const (
	MaxRequestFrame = 1 << 20  // harness (sidecar) → engine
	MaxEngineFrame  = 64 << 10 // engine → harness (sidecar)
	MaxFrames       = 100_000
)

// ErrProtocol is an engine that broke protocol v1 (malformed, oversized, out of order, second answer).
var ErrProtocol = errors.New("enginetest: protocol violation")

// Engine is how to start one engine process.
type Engine struct {
	Argv []string // argv[0] is an absolute path; no $PATH lookup
	Env  []string // extra variables on top of the allow-list (tests only; the sidecar adds none)
}

// Hello is the engine's first frame.
type Hello struct {
	PID    int `json:"pid"`
	Engine struct {
		Name       string          `json:"name"`
		Protocol   int             `json:"protocol"`
		IndexTypes []string        `json:"index_types"`
		Settle     string          `json:"settle"`
		Custody    json.RawMessage `json:"custody"`
	} `json:"engine"`
}

// Reserve is one custody request.
type Reserve struct {
	Seq      int      `json:"seq"`
	Keys     []string `json:"keys"`
	Prefixes []string `json:"prefixes"`
}

// Progress is one progress frame.
type Progress struct {
	Stage string `json:"stage"`
	Done  int64  `json:"done"`
	Total int64  `json:"total"`
}

// Result is the answer to a mutate request.
type Result struct {
	Phase            string `json:"phase"`
	Code             int    `json:"code"`
	ObservedLatest   int64  `json:"observed_latest"`
	CommittedVersion int64  `json:"committed_version"`
	CompletionReason string `json:"completion_reason"`
	Message          string `json:"message"`
	IndexUUID        string `json:"index_uuid"`
}

// Settled is the answer to a settle request.
type Settled struct {
	Outcome string            `json:"outcome"`
	Version int64             `json:"version"`
	Fenced  bool              `json:"fenced"`
	Reason  string            `json:"reason"`
	Holder  map[string]string `json:"holder"`
}

// Options shape one run. The zero value grants every reservation.
type Options struct {
	// OnReserve answers a reservation: "" grants it, anything else refuses it with that error.
	// It runs on the reading goroutine, so it may block to hold the engine at that point.
	OnReserve func(Reserve) string
	// OnHello runs after hello, before the request is written.
	OnHello func(*Session)
}

// Session is one engine process and what it said.
type Session struct {
	Hello    Hello
	Reserves []Reserve
	Progress []Progress
	Result   *Result
	Settled  *Settled
	Stderr   bytes.Buffer
	// TempLeft lists what the engine left in its private temp dir (relative paths), read after the
	// process ended and before the dir was removed.
	TempLeft []string
	TempDir  string
	Wall     time.Duration // start → exit
	HelloAt  time.Duration // start → hello

	cmd  *exec.Cmd
	mu   sync.Mutex
	done chan struct{}
	err  error
}

// Kill SIGKILLs the engine (the harness still reaps it and records the leftovers).
func (s *Session) Kill() { _ = s.cmd.Process.Kill() }

// Wait blocks until the engine exited and the session is complete.
func (s *Session) Wait() error { <-s.done; return s.err }

// Run starts the engine, sends one request of kind ("mutate" or "settle") and waits for the end.
func Run(ctx context.Context, eng Engine, kind string, req any, opt Options) (*Session, error) {
	s, err := Start(ctx, eng, kind, req, opt)
	if err != nil {
		return nil, err
	}
	return s, s.Wait()
}

// Start starts the engine and returns at once; the exchange runs in the background.
func Start(ctx context.Context, eng Engine, kind string, req any, opt Options) (_ *Session, retErr error) {
	tmp, err := os.MkdirTemp("", "steward-engine-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			os.RemoveAll(tmp)
		}
	}()
	if m, ok := req.(map[string]any); ok && kind == "mutate" {
		m["temp_dir"] = tmp
	}
	body, err := json.Marshal(map[string]any{"t": "request", "kind": kind, "request": req})
	if err != nil {
		return nil, err
	}
	if len(body) > MaxRequestFrame {
		return nil, fmt.Errorf("request of %d bytes exceeds %d", len(body), MaxRequestFrame)
	}
	toEngR, toEngW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	fromEngR, fromEngW, err := os.Pipe()
	if err != nil {
		toEngR.Close()
		toEngW.Close()
		return nil, err
	}
	s := &Session{TempDir: tmp, done: make(chan struct{})}
	cmd := exec.CommandContext(ctx, eng.Argv[0], eng.Argv[1:]...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "TMPDIR=" + tmp, "HOME=" + tmp}, eng.Env...)
	cmd.ExtraFiles = []*os.File{toEngR, fromEngW} // fd 3, fd 4
	cmd.Stderr = &lockedWriter{mu: &s.mu, w: &s.Stderr}
	cmd.Dir = tmp
	start := time.Now()
	if err := cmd.Start(); err != nil {
		toEngR.Close()
		toEngW.Close()
		fromEngR.Close()
		fromEngW.Close()
		return nil, err
	}
	toEngR.Close()
	fromEngW.Close()
	s.cmd = cmd
	go func() {
		defer close(s.done)
		perr := s.converse(toEngW, fromEngR, body, start, opt)
		toEngW.Close()
		fromEngR.Close()
		if perr != nil {
			_ = cmd.Process.Kill()
		}
		werr := cmd.Wait()
		s.Wall = time.Since(start)
		s.TempLeft = listTree(tmp)
		os.RemoveAll(tmp)
		switch {
		case perr != nil:
			s.err = perr
		case werr != nil:
			s.err = fmt.Errorf("engine exit: %w", werr)
		}
	}()
	return s, nil
}

func (s *Session) converse(w io.Writer, r io.Reader, request []byte, start time.Time, opt Options) error {
	f, err := readFrame(r)
	if err != nil {
		return err
	}
	if f.T != "hello" {
		return fmt.Errorf("%w: first frame is %q, want hello", ErrProtocol, f.T)
	}
	if err := json.Unmarshal(f.raw, &s.Hello); err != nil {
		return fmt.Errorf("%w: hello: %v", ErrProtocol, err)
	}
	s.HelloAt = time.Since(start)
	if s.Hello.PID != s.cmd.Process.Pid || s.Hello.Engine.Protocol != 1 {
		return fmt.Errorf("%w: hello pid %d (want %d) protocol %d", ErrProtocol, s.Hello.PID, s.cmd.Process.Pid, s.Hello.Engine.Protocol)
	}
	if opt.OnHello != nil {
		opt.OnHello(s)
	}
	if err := writeFrame(w, request); err != nil {
		return err
	}
	for n := 0; n < MaxFrames; n++ {
		f, err := readFrame(r)
		if err != nil {
			return err
		}
		switch f.T {
		case "progress":
			var p Progress
			if err := json.Unmarshal(f.raw, &p); err != nil || p.Done < 0 || p.Total < 0 {
				return fmt.Errorf("%w: progress %s", ErrProtocol, f.raw)
			}
			s.Progress = append(s.Progress, p)
		case "reserve":
			var rv Reserve
			if err := json.Unmarshal(f.raw, &rv); err != nil || len(rv.Keys)+len(rv.Prefixes) == 0 || len(rv.Keys) > 1000 || len(rv.Prefixes) > 1000 {
				return fmt.Errorf("%w: reserve %s", ErrProtocol, f.raw)
			}
			s.Reserves = append(s.Reserves, rv)
			answer := ""
			if opt.OnReserve != nil {
				answer = opt.OnReserve(rv)
			}
			b, _ := json.Marshal(map[string]any{"t": "reserved", "seq": rv.Seq, "error": answer})
			if err := writeFrame(w, b); err != nil {
				return err
			}
		case "result":
			var env struct {
				Result Result `json:"result"`
			}
			if err := json.Unmarshal(f.raw, &env); err != nil {
				return fmt.Errorf("%w: result: %v", ErrProtocol, err)
			}
			s.Result = &env.Result
			return expectEOF(r)
		case "settled":
			var env struct {
				Settled Settled `json:"settled"`
			}
			if err := json.Unmarshal(f.raw, &env); err != nil {
				return fmt.Errorf("%w: settled: %v", ErrProtocol, err)
			}
			s.Settled = &env.Settled
			return expectEOF(r)
		default:
			return fmt.Errorf("%w: unexpected frame %q", ErrProtocol, f.T)
		}
	}
	return fmt.Errorf("%w: more than %d frames", ErrProtocol, MaxFrames)
}

// expectEOF: after the answer the engine may only exit.
func expectEOF(r io.Reader) error {
	var b [1]byte
	if n, _ := r.Read(b[:]); n > 0 {
		return fmt.Errorf("%w: bytes after the answer", ErrProtocol)
	}
	return nil
}

type frame struct {
	T   string `json:"t"`
	raw []byte
}

func readFrame(r io.Reader) (frame, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return frame{}, fmt.Errorf("%w: engine ended without an answer: %v", ErrProtocol, err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > MaxEngineFrame {
		return frame{}, fmt.Errorf("%w: frame length %d", ErrProtocol, n)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return frame{}, fmt.Errorf("%w: short frame: %v", ErrProtocol, err)
	}
	f := frame{raw: buf}
	if err := json.Unmarshal(buf, &f); err != nil || f.T == "" {
		return frame{}, fmt.Errorf("%w: malformed frame", ErrProtocol)
	}
	return f, nil
}

func writeFrame(w io.Writer, body []byte) error {
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(body)))
	_, err := w.Write(append(hdr[:], body...))
	return err
}

func listTree(root string) []string {
	var out []string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && p != root {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Cmd is the engine's process (for its exit state after Wait).
func (s *Session) Cmd() *exec.Cmd { return s.cmd }
