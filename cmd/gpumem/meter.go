package main

import (
	"errors"
	"sync"
	"time"

	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/pool"
)

// meter stands between a pool and its source and counts every driver call
// by kind (the names of package sim's Call constants) and its time. With a
// cost table it also adds up what the calls would cost on that GPU, which is
// how a replay on the simulated source models a real one.
type meter struct {
	src   pool.Source
	ev    pool.EventSource
	model sim.CostTable // nil: report measured time
	// streams maps a trace's streams to the source's.
	streams *streamTable

	mu       sync.Mutex // protects the fields below
	tally    tally
	handles  map[uint64]int64  // handle -> size, to price a release
	mapped   map[uintptr]int64 // mapping start -> size, to price an access call by the handles it covers
	measured time.Duration     // time spent in the source
	// owed is, with a cost table, what the next create waits for the
	// handles released since the last one (sim.PriceCreateAfterRelease).
	owed time.Duration
}

// tally is what a stretch of a replay cost in driver calls.
type tally struct {
	Calls map[string]int64 `json:"driver_calls"`
	Ns    int64            `json:"driver_ns"` // measured, or modelled with a cost table
	ByNs  map[string]int64 `json:"driver_ns_by_call"`
}

func newTally() tally { return tally{Calls: map[string]int64{}, ByNs: map[string]int64{}} }

// merge adds u's calls and times to t's.
func (t *tally) merge(u tally) {
	t.Ns += u.Ns
	for k, v := range u.Calls {
		t.Calls[k] += v
	}
	for k, v := range u.ByNs {
		t.ByNs[k] += v
	}
}

// meteredMapper is a meter over a source that maps pages.
type meteredMapper struct {
	*meter
	pm pool.PageMapper
}

// newMeter wraps src, which must have events. The result is a
// pool.PageMapper exactly where src is.
func newMeter(src pool.Source, model sim.CostTable) (pool.Source, *meter, error) {
	ev, ok := src.(pool.EventSource)
	if !ok {
		return nil, nil, errors.New("the source has no events")
	}
	m := &meter{src: src, ev: ev, model: model, tally: newTally(), handles: map[uint64]int64{}, mapped: map[uintptr]int64{},
		streams: newStreamTable(src)}
	if pm, ok := src.(pool.PageMapper); ok {
		return meteredMapper{m, pm}, m, nil
	}
	return m, m, nil
}

// call runs fn, one driver call of kind on size bytes, and counts it.
func (m *meter) call(kind string, size int64, fn func() error) error {
	return m.callOver(kind, size, 0, fn)
}

// callOver is call for a call whose cost also grows with the handles it
// covers beyond the first (extra): an access call over a range.
func (m *meter) callOver(kind string, size int64, extra int, fn func() error) error {
	start := time.Now()
	err := fn()
	took := time.Since(start)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.measured += took
	if m.model != nil {
		took, _ = m.model.Cost(kind, size)
		per, _ := m.model.Cost(sim.PriceSetAccessExtraHandle, 0)
		took += time.Duration(extra) * per
		if kind == sim.CallCreate {
			took += m.owed
			m.owed = 0
		}
	}
	m.tally.Calls[kind]++
	m.tally.Ns += took.Nanoseconds()
	m.tally.ByNs[kind] += took.Nanoseconds()
	return err
}

// take returns what was counted since the last take, and the time really
// spent in the source.
func (m *meter) take() (tally, time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, d := m.tally, m.measured
	m.tally, m.measured = newTally(), 0
	return t, d
}

func (m *meter) Alloc(size int64) (ptr uintptr, err error) {
	err = m.call(sim.CallAlloc, size, func() error { ptr, err = m.src.Alloc(size); return err })
	return ptr, err
}

func (m *meter) Free(ptr uintptr, size int64) error {
	return m.call(sim.CallFree, size, func() error { return m.src.Free(ptr, size) })
}

// MemInfo is not counted: the pool calls it when it is made and to report
// an out-of-memory error, never to grow.
func (m *meter) MemInfo() (int64, int64, error) { return m.src.MemInfo() }

func (m *meter) RecordEvent(stream uintptr) (ev uintptr, err error) {
	err = m.call(sim.CallRecordEvent, 0, func() error { ev, err = m.ev.RecordEvent(stream); return err })
	return ev, err
}

func (m *meter) EventDone(ev uintptr) (done bool, err error) {
	err = m.call(sim.CallEventQuery, 0, func() error { done, err = m.ev.EventDone(ev); return err })
	return done, err
}

func (m *meter) WaitEvent(ev uintptr) error {
	return m.call(sim.CallWaitEvent, 0, func() error { return m.ev.WaitEvent(ev) })
}

func (m *meter) DestroyEvent(ev uintptr) error {
	return m.call(sim.CallDestroyEvent, 0, func() error { return m.ev.DestroyEvent(ev) })
}

func (m meteredMapper) Granularity() int64 { return m.pm.Granularity() }

func (m meteredMapper) ReserveAddress(size int64) (ptr uintptr, err error) {
	err = m.call(sim.CallReserveAddress, size, func() error { ptr, err = m.pm.ReserveAddress(size); return err })
	return ptr, err
}

func (m meteredMapper) ReleaseAddress(ptr uintptr, size int64) error {
	return m.call(sim.CallReleaseAddress, size, func() error { return m.pm.ReleaseAddress(ptr, size) })
}

// Create is priced by its size and, with a cost table, what it waits for
// the releases before it (sim.PriceCreateAfterRelease).
func (m meteredMapper) Create(size int64) (h uint64, err error) {
	err = m.call(sim.CallCreate, size, func() error { h, err = m.pm.Create(size); return err })
	if err == nil {
		m.mu.Lock()
		m.handles[h] = size
		m.mu.Unlock()
	}
	return h, err
}

func (m meteredMapper) Release(h uint64) error {
	m.mu.Lock()
	size := m.handles[h]
	m.mu.Unlock()
	err := m.call(sim.CallRelease, size, func() error { return m.pm.Release(h) })
	if err == nil {
		m.mu.Lock()
		delete(m.handles, h)
		if m.model != nil {
			wait, _ := m.model.Cost(sim.PriceCreateAfterRelease, size)
			m.owed += wait
		}
		m.mu.Unlock()
	}
	return err
}

func (m meteredMapper) Map(ptr uintptr, size int64, h uint64) error {
	err := m.call(sim.CallMap, size, func() error { return m.pm.Map(ptr, size, h) })
	if err == nil {
		m.mu.Lock()
		m.mapped[ptr] = size
		m.mu.Unlock()
	}
	return err
}

// SetAccess is priced by the first handle's size and the handles after it
// (sim.PriceSetAccessExtraHandle).
func (m meteredMapper) SetAccess(ptr uintptr, size int64) error {
	first, n := size, 0
	m.mu.Lock()
	for at := ptr; at < ptr+uintptr(size); {
		hs, ok := m.mapped[at]
		if !ok {
			break // not a range of whole mappings: priced as one
		}
		if n == 0 {
			first = hs
		}
		n++
		at += uintptr(hs)
	}
	m.mu.Unlock()
	return m.callOver(sim.CallSetAccess, first, max(n-1, 0), func() error { return m.pm.SetAccess(ptr, size) })
}

func (m meteredMapper) Unmap(ptr uintptr, size int64) error {
	err := m.call(sim.CallUnmap, size, func() error { return m.pm.Unmap(ptr, size) })
	if err == nil {
		m.mu.Lock()
		delete(m.mapped, ptr)
		m.mu.Unlock()
	}
	return err
}
