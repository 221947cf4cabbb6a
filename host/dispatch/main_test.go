package dispatch

import (
	"os"
	"testing"

	"github.com/cba1309c/steward/internal/testbin"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain())
	}
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}
