package host_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/gpu/internal/host"
)

// This package never opens a gpu.Device, so gputest would find nothing:
// what can leak here is a driver left open, holding its memory and memfd.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(closedAll{m})
}

type closedAll struct{ m *testing.M }

func (c closedAll) Run() int {
	code := c.m.Run()
	if n := host.OpenDrivers(); code == 0 && n != 0 {
		fmt.Fprintf(os.Stderr, "host: %d drivers left open after a successful test run\n", n)
		return 1
	}
	return code
}
