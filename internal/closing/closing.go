// Package closing closes a driver once: it sets the closed flag that the
// driver's operations check under its lock and, in the same hold of that
// lock, takes out the objects the driver made, for Close to destroy.
package closing

import "sync"

// Once sets *closed with mu held and, before it lets mu go, runs take, which
// moves out of the driver what Close will destroy: a call that checks
// *closed under mu either runs before Close or finds the driver closed,
// never the objects half taken. It reports whether this call closed the
// driver; where an earlier one did, take does not run and Close has nothing
// more to do. Once must not be called with mu held.
func Once(mu sync.Locker, closed *bool, take func()) bool {
	mu.Lock()
	defer mu.Unlock()
	if *closed {
		return false
	}
	*closed = true
	take()
	return true
}
