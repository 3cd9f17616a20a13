package foreign

import (
	"fmt"

	"github.com/gpuscope/gpuscope/gpu"
)

// A library names the stream an allocation is for. A scope begun from C
// allocates for a stream other than the default in a child scope on that
// stream, named "stream 0x...", opened on first use: the pool then keeps
// the stream's blocks apart, reuses them at once on it and on other
// streams only after an event recorded at the free has completed, as
// PyTorch's allocator does. The Stream for a library's stream handle is
// made once, by the device's root scope, which never destroys it.

// onStream returns r's child on the stream of handle h, opening it on
// first use; nil, and no error, where r has begun to end.
func (r *record) onStream(h uintptr) (*record, error) {
	if v, ok := r.byStream.Load(h); ok {
		return v.(*record), nil
	}
	d := r.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if v, ok := r.byStream.Load(h); ok {
		return v.(*record), nil
	}
	if r.ending.Load() {
		return nil, nil
	}
	st, err := d.root.stream(h)
	if err != nil {
		return nil, err
	}
	c, err := openRecord(d, r, fmt.Sprintf("stream %#x", h), gpu.OnStream(st))
	if err != nil {
		return nil, err
	}
	c.streamOf, c.onHandle = r, h
	r.onStreams = append(r.onStreams, c)
	r.byStream.Store(h, c)
	return c, nil
}

// stream returns the Stream for the stream of handle h, which r's scope
// owns, making it on first use.
func (r *record) stream(h uintptr) (*gpu.Stream, error) {
	if v, ok := r.streams.Load(h); ok {
		return v.(*gpu.Stream), nil
	}
	st, err := r.scope.UseStream(h)
	if err != nil {
		return nil, err
	}
	v, _ := r.streams.LoadOrStore(h, st) // one that lost a race stays the scope's, unused
	return v.(*gpu.Stream), nil
}

// recordUse tells the pool that work on the stream of handle h uses buf, an
// allocation of r.
func (r *record) recordUse(buf gpu.Buffer, h uintptr) error {
	st, err := r.dev.root.stream(h)
	if err != nil {
		return err
	}
	return buf.RecordUse(st)
}
