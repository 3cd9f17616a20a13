// Package hostctl reaches the host driver's test controls: work of a test's
// own on a stream, a stream held busy, the bytes and handles a driver holds.
// They are for this project's tests (through internal/hosttest), not part of
// gpu/host's API, so gpu/host keeps them unexported and hands them over here
// when it makes its first driver (host.New). Each function takes the
// *host.Driver as a driver.Driver (this package cannot import gpu/host, which
// imports it) and is nil until then.
package hostctl

import "github.com/gpuscope/gpuscope/gpu/driver"

// Enqueue queues fn on stream, after the work queued there, and returns at
// once; on the default stream fn runs before Enqueue returns. An error fn
// returns is reported by the stream's next Synchronize.
var Enqueue func(d driver.Driver, stream uintptr, fn func() error) error

// Hold keeps stream busy: work queued on it after Hold, and events recorded
// on it, wait until release is called. release may be called more than
// once. Holding the default stream is refused: its work never waits.
var Hold func(d driver.Driver, stream uintptr) (release func(), err error)

// Used returns the bytes allocated from the driver.
var Used func(d driver.Driver) int64

// Handles counts what the driver holds besides device memory: streams (the
// default one aside), events, and page-locked allocations.
var Handles func(d driver.Driver) (streams, events, pinned int)
