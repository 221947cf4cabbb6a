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
	cleanState := testbin.PrivateState()
	code := m.Run()
	cleanState()
	testbin.Cleanup()
	os.Exit(code)
}
