package sidecar_test

import (
	"os"
	"testing"

	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testminio"
)

func TestMain(m *testing.M) {
	cleanState := testbin.PrivateState()
	code := m.Run()
	cleanState()
	testbin.Cleanup()
	testminio.Cleanup()
	os.Exit(code)
}
