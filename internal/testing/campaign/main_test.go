package campaign_test

import (
	"os"
	"testing"

	"github.com/cba1309c/steward/internal/testing/testbin"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}
