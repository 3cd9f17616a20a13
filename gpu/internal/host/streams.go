package host

import (
	"sync"

	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/internal/prefixed"
)

// stream is a non-default stream: a FIFO of work run by a goroutine of its
// own, in order, and not in step with the default stream (as CUDA's
// non-blocking streams). Stream 0 has no stream value: its work runs in the
// caller, at once.
type stream struct {
	mu     sync.Mutex
	cond   sync.Cond
	queue  []func() error
	queued uint64 // work enqueued so far
	done   uint64 // of which completed
	err    error  // the first error of asynchronous work, until reported
	ending bool   // no more work: the worker exits once the queue is empty
	exited chan struct{}
}

func newStream() *stream {
	s := &stream{exited: make(chan struct{})}
	s.cond.L = &s.mu
	go s.run()
	return s
}

func (s *stream) run() {
	defer close(s.exited)
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		for len(s.queue) == 0 && !s.ending {
			s.cond.Wait()
		}
		if len(s.queue) == 0 {
			return
		}
		fn := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		s.mu.Unlock()
		err := fn()
		s.mu.Lock()
		if err != nil && s.err == nil {
			s.err = err
		}
		s.done++
		s.cond.Broadcast()
	}
}

// enqueue adds fn to the stream and returns its position: the work is done
// once done reaches it.
func (s *stream) enqueue(fn func() error) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, fn)
	s.queued++
	s.cond.Broadcast()
	return s.queued
}

// reached reports whether the work up to position n has completed.
func (s *stream) reached(n uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done >= n
}

// waitFor waits until the work up to position n has completed.
func (s *stream) waitFor(n uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.done < n {
		s.cond.Wait()
	}
}

// drain waits for all the work queued so far and returns, and forgets, the
// first error of asynchronous work.
func (s *stream) drain() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.done < s.queued {
		s.cond.Wait()
	}
	err := s.err
	s.err = nil
	return err
}

// end drains the stream and stops its goroutine.
func (s *stream) end() error {
	err := s.drain()
	s.mu.Lock()
	s.ending = true
	s.cond.Broadcast()
	s.mu.Unlock()
	<-s.exited
	return err
}

// event marks a position in a stream's work: it is done when the work
// queued before it has completed. On the default stream it is done at once.
type event struct {
	s   *stream // nil: the default stream
	pos uint64
}

func (e event) isDone() bool { return e.s == nil || e.s.reached(e.pos) }

// onStream runs op on stream: under d.mu at once for the default stream;
// for another, after the work queued on it, in its goroutine. With wait it
// returns when op has run, with op's error; without, at once, and an error
// of op is reported by the stream's next Synchronize or its destruction.
func (d *Driver) onStream(id uintptr, wait bool, op func() error) error {
	d.mu.Lock()
	s, err := d.streamLocked(id)
	if err != nil || s == nil {
		defer d.mu.Unlock()
		if err != nil {
			return err
		}
		return op()
	}
	d.mu.Unlock()
	locked := func() error { return d.whileOpen(op) }
	if !wait {
		s.enqueue(locked)
		return nil
	}
	// Waited for: the error is the caller's, not the stream's.
	var opErr error
	s.waitFor(s.enqueue(func() error { opErr = locked(); return nil }))
	return opErr
}

// streamLocked returns the stream id names (nil for the default stream),
// or why there is none. Called with d.mu held.
func (d *Driver) streamLocked(id uintptr) (*stream, error) {
	if d.closed {
		return nil, driver.ErrClosed
	}
	s, ok := d.streams[id]
	if !ok {
		return nil, noStreamError(id)
	}
	return s, nil
}

// noStreamError is the error for a stream that does not exist: destroyed,
// or never made.
func noStreamError(id uintptr) error { return &driver.NoStreamError{Driver: "host", Stream: id} }

// lookup is streamLocked for callers that do not hold d.mu.
func (d *Driver) lookup(id uintptr) (*stream, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.streamLocked(id)
}

// Enqueue queues fn on stream, after the work queued there, and returns at
// once: a test's way to put work of its own on a stream. On the default
// stream fn runs before Enqueue returns. An error fn returns is reported by
// the stream's next Synchronize.
func (d *Driver) Enqueue(stream uintptr, fn func() error) error {
	if fn == nil {
		return prefixed.Errorf("host", "Enqueue: nil function")
	}
	s, err := d.lookup(stream)
	switch {
	case err != nil:
		return err
	case s == nil:
		return fn()
	}
	s.enqueue(fn)
	return nil
}

// Hold keeps stream busy: work queued on it after Hold, and events recorded
// on it, wait until release is called. It is a test's stand-in for a long
// kernel. release may be called more than once. Holding the default stream
// is refused: its work never waits.
func (d *Driver) Hold(stream uintptr) (release func(), err error) {
	if stream == 0 {
		return nil, prefixed.Errorf("host", "Hold: the default stream does not wait")
	}
	held := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(held) }) }
	if err := d.Enqueue(stream, func() error { <-held; return nil }); err != nil {
		return nil, err
	}
	return release, nil
}

// Handles counts what the driver holds besides device memory: streams
// (the default one aside), events, and page-locked allocations. A test
// checks with it that nothing was left behind.
func (d *Driver) Handles() (streams, events, pinned int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id := range d.streams {
		if id != 0 {
			streams++
		}
	}
	return streams, len(d.events), len(d.pinned)
}
