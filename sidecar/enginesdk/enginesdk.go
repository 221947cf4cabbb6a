// Package enginesdk is the Go SDK for engines of engine protocol v1 (docs/ENGINE.md): the side of
// the protocol an engine speaks. It owns the engine's pipes (fd 3 in, fd 4 out), the hello with
// the engine's declaration, the single request, throttled progress, custody reservations (one
// outstanding at a time) and the single answer. The built-in engine (sidecar/worker) is one user;
// an engine outside steward can be another: it needs nothing else from steward.
//
// It refuses to do an engine's work: it knows no dataset format and never commits anything.
package enginesdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cba1309c/steward/sidecar/workerproto"
)

// The fds of the protocol pipes in an engine process.
const (
	InFD  = 3 // sidecar → engine
	OutFD = 4 // engine → sidecar
)

// MaxMessage bounds a result message; longer ones are cut (with "…").
const MaxMessage = 1024

// Errors.
var (
	// ErrRefused: the sidecar refused a reservation; the engine must not write those names.
	ErrRefused = errors.New("enginesdk: reservation refused")
	// ErrProtocol: the sidecar closed the pipe or sent something out of order; the engine exits.
	ErrProtocol = errors.New("enginesdk: protocol")
	// ErrAnswered: a second answer.
	ErrAnswered = errors.New("enginesdk: already answered")
)

// Engine is what an engine implements: one mutation per process. (An engine's Settle method, for
// the settle requests of older sidecars, is never called: ENGINE.md §5.)
type Engine interface {
	// Mutate runs one mutation and returns its result. It writes through its request's gateway.
	Mutate(ctx context.Context, c *Conn, req *workerproto.MutateRequest) *workerproto.Result
}

// Conn is an engine's end of the protocol. Progress and Reserve may be called from several
// goroutines; the answer is sent once.
type Conn struct {
	in  io.Reader
	mu  sync.Mutex // guards out and the reservation exchange
	out io.Writer
	seq uint64

	pmu          sync.Mutex
	lastProgress time.Time
	lastStage    string
	answered     bool
	secrets      []string
}

// Open returns the Conn on this process's protocol pipes, with close-on-exec set on them so that
// nothing the engine starts holds the sidecar's end of the conversation open after it is gone.
func Open() (*Conn, error) {
	for _, fd := range []int{InFD, OutFD} {
		if _, err := syscall.Seek(fd, 0, io.SeekCurrent); errors.Is(err, syscall.EBADF) {
			return nil, fmt.Errorf("%w: protocol pipe fd %d missing", ErrProtocol, fd)
		}
		syscall.CloseOnExec(fd)
	}
	return New(os.NewFile(InFD, "from-sidecar"), os.NewFile(OutFD, "to-sidecar")), nil
}

// New returns a Conn on the given pipes (tests, or an engine that got them elsewhere).
func New(in io.Reader, out io.Writer) *Conn { return &Conn{in: in, out: out} }

// Hello sends the first frame: this process's pid and the engine's declaration (Protocol is set).
func (c *Conn) Hello(decl workerproto.Engine) error {
	decl.Protocol = workerproto.Protocol
	return c.send(&workerproto.Frame{T: workerproto.TypeHello, Pid: os.Getpid(), Engine: &decl})
}

// Request reads the one request frame.
func (c *Conn) Request() (*workerproto.Frame, error) {
	f, err := workerproto.Read(c.in, workerproto.MaxRequestFrame)
	if err != nil {
		return nil, fmt.Errorf("%w: no valid request: %w", ErrProtocol, err)
	}
	if f.T != workerproto.TypeRequest {
		return nil, fmt.Errorf("%w: want a request, got %q", ErrProtocol, f.T)
	}
	return f, nil
}

// Redact makes the answer's message and reason drop these secrets (the call's credentials).
func (c *Conn) Redact(secrets ...string) {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	for _, s := range secrets {
		if len(s) >= 4 {
			c.secrets = append(c.secrets, s)
		}
	}
}

// Progress reports progress at most ten times a second, except that the first report of a
// stage and the last step (done == total) are always sent.
func (c *Conn) Progress(stage string, done, total int64) {
	c.pmu.Lock()
	now := time.Now()
	if done < total && stage == c.lastStage && now.Sub(c.lastProgress) < 100*time.Millisecond {
		c.pmu.Unlock()
		return
	}
	c.lastProgress, c.lastStage = now, stage
	c.pmu.Unlock()
	_ = c.send(&workerproto.Frame{T: workerproto.TypeProgress, Stage: stage, Done: done, Total: total})
}

// Reserve asks the sidecar for custody of keys and prefixes (each ending in "/") before the
// engine writes them, and waits for the answer. ErrRefused means they must not be written.
func (c *Conn) Reserve(_ context.Context, keys, prefixes []string) error {
	if len(keys) == 0 && len(prefixes) == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	seq := c.seq
	f := &workerproto.Frame{T: workerproto.TypeReserve, Seq: seq, Keys: keys, Prefixes: prefixes}
	if err := workerproto.Write(c.out, f, workerproto.MaxWorkerFrame); err != nil {
		return fmt.Errorf("reserve: %w", err)
	}
	a, err := workerproto.Read(c.in, workerproto.MaxRequestFrame)
	if err != nil {
		return fmt.Errorf("%w: reserve: %w", ErrProtocol, err)
	}
	if a.T != workerproto.TypeReserved || a.Seq != seq {
		return fmt.Errorf("%w: reserve: unexpected answer %q seq %d", ErrProtocol, a.T, a.Seq)
	}
	if a.Error != "" {
		return &RefusedError{Refusal: a.Refusal, Message: a.Error}
	}
	return nil
}

// RefusedError is a refused reservation. It wraps ErrRefused.
type RefusedError struct {
	Refusal string // why: a workerproto.Refusal* value ("" from a sidecar that does not say)
	Message string // the sidecar's words
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%v (%s): %s", ErrRefused, e.Refusal, e.Message)
}

// Unwrap exposes ErrRefused to errors.Is.
func (e *RefusedError) Unwrap() error { return ErrRefused }

// Result sends the mutation's one result (its message redacted and bounded).
func (c *Conn) Result(r *workerproto.Result) error {
	if err := c.answer(); err != nil {
		return err
	}
	r.Message = c.clean(r.Message)
	return c.send(&workerproto.Frame{T: workerproto.TypeResult, Result: r})
}

func (c *Conn) answer() error {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if c.answered {
		return ErrAnswered
	}
	c.answered = true
	return nil
}

func (c *Conn) clean(msg string) string {
	c.pmu.Lock()
	for _, s := range c.secrets {
		msg = strings.ReplaceAll(msg, s, "[redacted]")
	}
	c.pmu.Unlock()
	if len(msg) > MaxMessage {
		msg = msg[:MaxMessage] + "…"
	}
	return msg
}

// Out is the engine's outgoing pipe, for tests and faults that must break the protocol on purpose.
func (c *Conn) Out() io.Writer { return c.out }

func (c *Conn) send(f *workerproto.Frame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return workerproto.Write(c.out, f, workerproto.MaxWorkerFrame)
}

// Serve runs one engine process's whole exchange on c: hello, the request, the engine's work, the
// answer. It returns the process exit code (0 after an answer).
func Serve(ctx context.Context, c *Conn, decl workerproto.Engine, e Engine) int {
	if err := c.Hello(decl); err != nil {
		return 3
	}
	f, err := c.Request()
	if err != nil {
		fmt.Fprintln(os.Stderr, "engine:", err)
		return 4
	}
	return Answer(ctx, c, f, e)
}

// Answer serves an already read request frame f (for engines that look at the request first).
func Answer(ctx context.Context, c *Conn, f *workerproto.Frame, e Engine) int {
	req, err := f.Mutate()
	if err != nil {
		fmt.Fprintln(os.Stderr, "engine:", err)
		return 4
	}
	if creds := req.Credentials; creds != nil {
		c.Redact(creds.SecretKey, creds.AccessKey, creds.SessionToken)
	}
	if c.Result(e.Mutate(ctx, c, req)) != nil {
		return 5
	}
	return 0
}
