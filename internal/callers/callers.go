// Package callers tells package gpu what the code that calls it calls its
// functions, so that an error advises a call the caller can make: Go's
// Device.SetMaxReserved, C's gpuscope_set_max_reserved, Python's
// gpuscope.set_max_reserved. A layer that serves another language
// (cmd/libgpuscope/internal/foreign) puts its callers' names in the
// context of the scopes it opens, which the scopes inside them inherit;
// gpu reads them from the context of the scope that allocated, and keeps
// nothing per process: a Go program and a C library in one process each
// read their own names.
package callers

import "context"

// Names are the calls an out-of-memory error advises, as a caller writes
// them.
type Names struct {
	SetMaxReserved string // changes the cap while the program runs
	AtOpen         string // sets it when the device opens; "" where the caller opens none
	EmptyCache     string // gives what the pool caches back to the driver
	Limit          string // caps a scope and the scopes inside it; "" where the caller has none
}

// Go returns the names of package gpu's own calls: what a context without
// names means.
func Go() Names {
	return Names{SetMaxReserved: "Device.SetMaxReserved", AtOpen: "the MaxReserved or MaxReservedFraction option at Open",
		EmptyCache: "EmptyCache", Limit: "Limit"}
}

type key struct{}

// With returns ctx carrying names, a function called when an error is
// made, so that names set after the scope opened are read.
func With(ctx context.Context, names func() Names) context.Context {
	return context.WithValue(ctx, key{}, names)
}

// From returns the names ctx carries, or Go's.
func From(ctx context.Context) Names {
	if f, ok := ctx.Value(key{}).(func() Names); ok {
		return f()
	}
	return Go()
}
