package main

import (
	"os"
	"testing"

	"github.com/cba1309c/steward/internal/testing/testbin"
)

// TestMain removes the steward binary the tests share once all of them ran (a test that removed
// it itself took it from the tests after it).
func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}
