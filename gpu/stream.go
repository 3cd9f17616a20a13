package gpu

import (
	"errors"
	"fmt"
	"sync"
)

// Stream is a queue of device work, owned by the scope that made it: when
// the scope ends, the stream is destroyed after the work queued on it has
// completed, and before the scope's memory is released. Its methods fail
// with ErrScopeClosed after that.
type Stream struct {
	dev *Device
	id  uintptr

	mu   sync.Mutex // protects done
	done bool
}

// NewStream makes a stream owned by the scope.
func (s *Scope) NewStream() (*Stream, error) {
	if !s.valid() {
		return nil, errNilScope
	}
	id, err := s.dev.drv.NewStream()
	if err != nil {
		return nil, deviceError(fmt.Errorf("gpu: NewStream: %w", err))
	}
	st := &Stream{dev: s.dev, id: id}
	if err := s.s.Own(st.end); err != nil {
		return nil, deviceError(errors.Join(err, st.end()))
	}
	return st, nil
}

// Device returns the stream's device; nil for a nil Stream.
func (st *Stream) Device() *Device {
	if st == nil {
		return nil
	}
	return st.dev
}

// ID returns the driver's handle of the stream, for kernels and drivers;
// it is meaningless once the stream has ended.
func (st *Stream) ID() uintptr {
	if st == nil {
		return 0
	}
	return st.id
}

// errStreamEnded is what the methods of a Stream return once it has ended.
var errStreamEnded = fmt.Errorf("%w: the stream ended with its scope", ErrScopeClosed)

// Synchronize waits until the work queued on the stream has completed, and
// reports the first error of work that ran asynchronously.
func (st *Stream) Synchronize() error {
	if st == nil {
		return fmt.Errorf("%w: nil Stream", ErrScopeClosed)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.done {
		return errStreamEnded
	}
	return deviceError(st.dev.drv.Synchronize(st.id))
}

// end waits for the stream's work, tells the pool to stop waiting on it,
// and destroys it. It runs once, when the scope ends.
func (st *Stream) end() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.done {
		return nil
	}
	st.done = true
	return errors.Join(st.dev.pool.RetireStream(st.id), st.dev.drv.DestroyStream(st.id))
}
