package swarm_test

import (
	"testing"

	"github.com/pipeshard/pipeshard/internal/testwatch"
)

// A hang names itself before go test's -timeout (internal/testwatch).
func TestMain(m *testing.M) { testwatch.Main(m) }
