package isolation

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cba1309c/steward/internal/testing/specdoc"
)

// TestAppendixAListsTheWorkersEnvironment: docs/PROTOCOL.md Appendix A calls the worker's
// environment complete, so it names every variable the code can put there: each
// STEWARD_ISOLATION_* name of this package and each NAME= the sidecar adds (sidecar/*.go), and
// names no STEWARD_ISOLATION_* variable the code does not have.
func TestAppendixAListsTheWorkersEnvironment(t *testing.T) {
	app := specdoc.Protocol(t, "## Appendix A")

	code := stringLits(t, ".", regexp.MustCompile(`^(STEWARD_[A-Z_]*[A-Z])$`))
	// Tests reach the launcher through launcherEnv; no production launch sets these.
	code = slices.DeleteFunc(code, func(n string) bool { return strings.HasPrefix(n, "STEWARD_TEST_") })
	code = append(code, stringLits(t, "../sidecar", regexp.MustCompile(`^([A-Z][A-Z0-9_]*)=`))...)
	if !slices.Contains(code, EnvParent) || !slices.Contains(code, "TMPDIR") {
		t.Fatalf("found %v in the code: the scan no longer matches it", code)
	}
	for _, n := range code {
		if !strings.Contains(app, "`"+n) {
			t.Errorf("%s reaches a worker (or the launcher) but docs/PROTOCOL.md Appendix A does not name it", n)
		}
	}
	for _, m := range regexp.MustCompile("`(STEWARD_ISOLATION_[A-Z_]+)").FindAllStringSubmatch(app, -1) {
		if !slices.Contains(code, m[1]) {
			t.Errorf("docs/PROTOCOL.md Appendix A names %s, which the code never sets", m[1])
		}
	}
}

// stringLits returns the first group of re in every string literal of dir's non-test Go files.
func stringLits(t *testing.T, dir string, re *regexp.Regexp) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if m := re.FindStringSubmatch(s); err == nil && m != nil && !slices.Contains(out, m[1]) {
				out = append(out, m[1])
			}
			return true
		})
	}
	return out
}
