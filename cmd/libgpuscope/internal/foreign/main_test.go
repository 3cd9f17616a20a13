package foreign

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/gpu/gputest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(gputest.Wrap(m))
}
