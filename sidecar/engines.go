package sidecar

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/workerproto"
)

// EngineSpec registers one engine (docs/ENGINE.md §1): `steward serve --engine NAME=COMMAND ARG…`.
type EngineSpec struct {
	// Name is 1-32 of [a-z0-9_-]; "builtin" is taken by the built-in engine.
	Name string
	// Argv is the command: Argv[0] an absolute path (never a $PATH lookup), then its arguments.
	Argv []string
}

// ParseEngineFlag parses NAME=COMMAND ARG… (split on spaces) into an EngineSpec.
func ParseEngineFlag(v string) (EngineSpec, error) {
	name, cmd, ok := strings.Cut(v, "=")
	spec := EngineSpec{Name: name, Argv: strings.Fields(cmd)}
	if !ok {
		return spec, fmt.Errorf("engine %q: want NAME=COMMAND [ARG…]", v)
	}
	return spec, spec.check()
}

func (e EngineSpec) check() error {
	switch {
	case !workerproto.ValidEngineName(e.Name):
		return fmt.Errorf("engine name %q: want 1-32 of [a-z0-9_-]", e.Name)
	case e.Name == workerproto.BuiltinName:
		return fmt.Errorf("engine name %q is the built-in engine's", e.Name)
	case len(e.Argv) == 0 || !filepath.IsAbs(e.Argv[0]):
		return fmt.Errorf("engine %s: the command must be an absolute path", e.Name)
	}
	return nil
}

// engineProbeTimeout bounds how long a registered engine may take to say hello at start.
const engineProbeTimeout = 30 * time.Second

// engine is a registered engine with the declaration its hello made.
type engine struct {
	name string
	argv []string // nil for the built-in engine
	decl workerproto.Engine
}

func (e *engine) builtin() bool { return e.argv == nil }

// command is the domain's executable and arguments. The built-in engine is this binary's worker
// mode. Any other engine starts behind this binary's `engine-exec` trampoline, which hardens the
// process and waits for placement in the domain's cgroups (isolation.EnterWorker: on v1 and
// hybrid the kernel cannot start a child inside its cgroups) and then execs the engine's command,
// in the same process: the engine's pid is the domain's.
func (s *Server) command(e *engine) (string, []string) {
	path := s.cfg.Isolation.WorkerPath
	if s.image != "" {
		path = s.image // this binary, in the page cache as its workers are best served (workerimage.go)
	}
	if e.builtin() {
		return path, s.cfg.Isolation.WorkerArgs
	}
	return path, append([]string{"engine-exec", "--"}, e.argv...)
}

// registerEngines registers the built-in engine and probes every configured one once: each is
// started in a domain, its hello read and checked, and the domain killed. An engine whose probe
// fails is not registered (logged). Without isolation nothing is launched: only the built-in
// engine is listed, since nothing can run anyway.
func (s *Server) registerEngines() {
	s.engines = map[string]*engine{workerproto.BuiltinName: {name: workerproto.BuiltinName, decl: workerproto.Builtin()}}
	s.engineOrder = []string{workerproto.BuiltinName}
	for _, spec := range s.cfg.Engines {
		if err := spec.check(); err != nil {
			s.log.Error("engine not registered", "engine", spec.Name, "error", err)
			continue
		}
		if _, dup := s.engines[spec.Name]; dup {
			s.log.Error("engine not registered: registered twice", "engine", spec.Name)
			continue
		}
		if s.iso == nil {
			s.log.Warn("engine not probed: isolation unavailable", "engine", spec.Name)
			continue
		}
		e := &engine{name: spec.Name, argv: slices.Clone(spec.Argv)}
		decl, err := s.probe(e)
		if err != nil {
			s.log.Error("engine not registered: its probe failed", "engine", spec.Name, "error", err)
			continue
		}
		e.decl = decl
		s.engines[e.name] = e
		s.engineOrder = append(s.engineOrder, e.name)
		s.log.Info("engine registered", "engine", e.name, "declared_name", decl.Name, "index_types", decl.IndexTypes, "settle", decl.Settle)
	}
}

// probe starts e once in a domain and reads its hello.
func (s *Server) probe(e *engine) (workerproto.Engine, error) {
	// Before any executor runs: the budget is free. A budget below the worker limit bounds the
	// probe too.
	o := launchOptions{memory: below(s.cfg.Isolation.MemoryLimit, s.budget.total)}
	mem := s.memoryOf(o)
	g := s.budget.tryAcquire(mem, false)
	if g == nil {
		return workerproto.Engine{}, fmt.Errorf("no memory budget for the probe (%d bytes)", mem)
	}
	w, err := s.launch(e, "hello-"+e.name, o)
	if err != nil {
		g.release()
		return workerproto.Engine{}, err
	}
	w.grant = g
	defer w.discard()
	select {
	case fe, ok := <-w.frames:
		switch {
		case !ok:
			return workerproto.Engine{}, errors.New("the engine exited before its hello")
		case fe.err != nil:
			return workerproto.Engine{}, fmt.Errorf("hello: %w", fe.err)
		case fe.f.T != workerproto.TypeHello:
			return workerproto.Engine{}, fmt.Errorf("first frame %q, want hello", fe.f.T)
		case fe.f.Pid != w.dom.WorkerPid():
			return workerproto.Engine{}, fmt.Errorf("hello from pid %d, the domain's worker is %d", fe.f.Pid, w.dom.WorkerPid())
		}
		if err := fe.f.Engine.Check(); err != nil {
			return workerproto.Engine{}, err
		}
		return *fe.f.Engine, nil
	case <-time.After(engineProbeTimeout):
		return workerproto.Engine{}, fmt.Errorf("no hello within %v", engineProbeTimeout)
	}
}

// engineNamed resolves an index.mutate or index.resolve engine name ("" = builtin); an unknown
// one is invalid params.
func (s *Server) engineNamed(name string) (*engine, error) {
	if name == "" {
		name = workerproto.BuiltinName
	}
	e, ok := s.engines[name]
	if !ok {
		return nil, fmt.Errorf("%w: engine %q is not registered on this sidecar (registered: %s)", rpc.ErrInvalidParams,
			name, strings.Join(s.engineOrder, ", "))
	}
	return e, nil
}

// admitEngine resolves the mutation's engine and checks that it builds the index type.
func (s *Server) admitEngine(p *rpc.MutateParams) (*engine, error) {
	e, err := s.engineNamed(p.Engine)
	if err != nil {
		return nil, err
	}
	// DROP and OPTIMIZE name an existing index: its type is the stored one.
	if p.Op != rpc.OpDrop && p.Op != rpc.OpOptimize && !e.decl.Builds(p.Index.Type) {
		return nil, fmt.Errorf("%w: index.type %q: engine %s builds %s", rpc.ErrInvalidParams, p.Index.Type, e.name,
			strings.Join(e.decl.IndexTypes, ", "))
	}
	return e, nil
}

// wireEngines lists the registered engines for steward.hello.
func (s *Server) wireEngines() []rpc.EngineInfo {
	out := make([]rpc.EngineInfo, 0, len(s.engineOrder))
	for _, n := range s.engineOrder {
		d := s.engines[n].decl
		// Every engine's outcome settles by fence: its gateway claims its commit and
		// index.resolve fences it, whatever the engine declared (docs/ENGINE.md §4.3).
		out = append(out, rpc.EngineInfo{Name: n, Protocol: d.Protocol, IndexTypes: slices.Clone(d.IndexTypes), Settle: rpc.SettleFence,
			IdleMemoryBytes: s.spares.idleMemoryOf(n)})
	}
	return out
}
