package foreign

import (
	"slices"
	"strings"
	"sync"

	"github.com/gpuscope/gpuscope/internal/callers"
	"github.com/gpuscope/gpuscope/internal/prefixed"
)

// The C calls the library's messages advise, unless a binding renames
// them (NameCall).
const (
	SetMaxReservedCall = "gpuscope_set_max_reserved"
	EmptyCacheCall     = "gpuscope_empty_cache"
)

// advised are the calls the messages advise, in NameCall's error.
var advised = []string{SetMaxReservedCall, EmptyCacheCall}

// renamed is what the messages call each advised call a binding named:
// set once by a binding in another language, for the process's one copy
// of the library.
var renamed struct {
	mu    sync.Mutex // protects names
	names map[string]string
}

// NameCall makes the messages that advise the C call c write name
// instead: what a binding in another language calls it (gpuscope.py
// names gpuscope_set_max_reserved gpuscope.set_max_reserved). An empty
// name gives the call its C name back. A c the messages do not advise is
// an error.
func NameCall(c, name string) error {
	if !slices.Contains(advised, c) {
		return prefixed.Errorf("gpu", "%q: no call the library's messages advise; they advise %s", c, strings.Join(advised, " and "))
	}
	renamed.mu.Lock()
	defer renamed.mu.Unlock()
	if name == "" {
		delete(renamed.names, c)
		return nil
	}
	if renamed.names == nil {
		renamed.names = map[string]string{}
	}
	renamed.names[c] = name
	return nil
}

// callerNames are the calls of C's callers, for the errors of the scopes
// begun from C: no option at open, since the library opens its devices,
// and no Limit, which C's scopes do not have.
func callerNames() callers.Names {
	renamed.mu.Lock()
	defer renamed.mu.Unlock()
	name := func(c string) string {
		if n, ok := renamed.names[c]; ok {
			return n
		}
		return c
	}
	return callers.Names{SetMaxReserved: name(SetMaxReservedCall), EmptyCache: name(EmptyCacheCall)}
}
