package foreign

import (
	"sync/atomic"

	"github.com/gpuscope/gpuscope/internal/callers"
	"github.com/gpuscope/gpuscope/internal/prefixed"
)

// SetMaxReservedCall is the C call that changes a device's cap, as the
// library's messages advise it unless a binding renames it (NameCall).
const SetMaxReservedCall = "gpuscope_set_max_reserved"

// setMaxReservedName is what the messages call SetMaxReservedCall: nil
// for its C name. A binding in another language sets it once, for the
// process's one copy of the library.
var setMaxReservedName atomic.Pointer[string]

// NameCall makes the messages that advise the C call c write name
// instead: what a binding in another language calls it (gpuscope.py
// names gpuscope_set_max_reserved gpuscope.set_max_reserved). An empty
// name gives the call its C name back. The messages advise one call,
// SetMaxReservedCall; another c is an error.
func NameCall(c, name string) error {
	if c != SetMaxReservedCall {
		return prefixed.Errorf("gpu", "%q: no call the library's messages advise; they advise %s", c, SetMaxReservedCall)
	}
	if name == "" {
		setMaxReservedName.Store(nil)
		return nil
	}
	setMaxReservedName.Store(&name)
	return nil
}

// callerNames are the calls of C's callers, for the errors of the scopes
// begun from C: no option at open, since the library opens its devices.
func callerNames() callers.Names {
	n := SetMaxReservedCall
	if p := setMaxReservedName.Load(); p != nil {
		n = *p
	}
	return callers.Names{SetMaxReserved: n}
}
