package gputest_test

import (
	"testing"

	"github.com/gpuscope/gpuscope/internal/apitest"
)

// TestTheAPIIsWhatUsersCall holds the package's exported names to this
// list: a name added to the package is added here too, deliberately.
func TestTheAPIIsWhatUsersCall(t *testing.T) {
	apitest.Check(t, ".", []string{
		"const OpAccess",
		"const OpAlloc",
		"const OpCopy",
		"const OpEvent",
		"const OpFree",
		"const OpMap",
		"const OpRequest",
		"const OpReserve",
		"const OpStream",
		"const OpUnmap",
		"func Cleanup",
		"func Devices",
		"func Find",
		"func IgnoreCurrent",
		"func IgnoreScope",
		"func MaxSleep",
		"func OpenFaulty",
		"func Steady",
		"func VerifyNone",
		"func VerifyTestMain",
		"func Wrap",
		"method Faults.Enqueue",
		"method Faults.FailNth",
		"method Faults.FailWhen",
		"method Faults.Handles",
		"method Faults.Hold",
		"method Faults.Injected",
		"method Faults.Used",
		"method Op.String",
		"type Call",
		"type Faults",
		"type Op",
		"type Option",
		"type TestingM",
		"type TestingT",
		"var ErrInjected",
	})
}
