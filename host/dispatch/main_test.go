package dispatch

import (
	"os"
	"testing"

	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testetcd"
)

func TestMain(m *testing.M) {
	if os.Getenv(clusterHelperEnv) != "" {
		os.Exit(clusterHelperMain())
	}
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain())
	}
	cleanState := testbin.PrivateState()
	code := m.Run()
	cleanState()
	testetcd.Cleanup()
	testbin.Cleanup()
	os.Exit(code)
}
