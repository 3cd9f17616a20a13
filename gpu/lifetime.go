package gpu

import "sync"

// lifetime is the end of a handle that a scope owns (a stream, an event, a
// module; page-locked memory has its block's generation): once ended, its uses fail with the handle's
// error, and it is released once. A use holds the end off until it
// returns.
type lifetime struct {
	mu   sync.RWMutex // protects done; held by a use for the use's length
	done bool
}

// use calls fn unless the handle has ended, and returns ended if it has.
// Uses run one at a time.
func (l *lifetime) use(ended error, fn func() error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unlessEnded(ended, fn)
}

// unlessEnded calls fn, or returns ended once the handle has ended. Called
// with l.mu held.
func (l *lifetime) unlessEnded(ended error, fn func() error) error {
	if l.done {
		return ended
	}
	return fn()
}

// ended reports whether the handle has ended.
func (l *lifetime) ended() bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.done
}

// end calls release the first time only, once the uses in progress have
// returned; later ends return nil.
func (l *lifetime) end(release func() error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return nil
	}
	l.done = true
	return release()
}
