package rpc_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test of the package must leave no goroutine behind (connections, handlers, streams).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
