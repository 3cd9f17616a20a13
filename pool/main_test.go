package pool_test

import (
	"testing"

	"github.com/gpuscope/gpuscope/internal/sim"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(sim.Wrap(m))
}
