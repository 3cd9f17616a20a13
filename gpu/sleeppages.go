package gpu

import (
	"cmp"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/internal/errdefs"
	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/internal/units"
	"github.com/gpuscope/gpuscope/pool"
)

// pageSource is the driver as a sleepable scope's own pool sees it: the
// pages (physical handles) the pool creates are the scope's alone, so that
// Sleep can give every one back and Wake create them again at the same
// addresses, while the pool knows them by the same ids throughout. Each
// page it creates is charged to the device's pool (pool.Pool.Charge), so
// that the device's cap covers it, until it is released or put to sleep.
// Streams, events and the rest go to the driver as they are.
//
// While the scope sleeps or wakes, its pool makes no call (the scope
// refuses allocations, and its releases and the device's EmptyCache wait);
// while it is asleep, the pool's unmapping and releasing of pages asleep
// is bookkeeping, with no driver call, and so are its events (idle).
type pageSource struct {
	driver.Driver
	mapper driver.PageMapper
	device *pool.Pool // the device's pool, charged with the pages that hold memory

	// idle is set while the scope is asleep: no work uses the pool's
	// memory (Sleep waited for every stream that used it, and every use is
	// refused), so that an event the pool records meanwhile, at a free of
	// a block other streams used or a stream's retirement, has completed
	// as it is recorded: a free asleep waits for no stream, and calls no
	// driver. Changed by Sleep and Wake, while no free runs.
	idle atomic.Bool

	mu     sync.Mutex       // protects the fields below and the pages'
	pages  map[uint64]*page // by the id the pool knows
	next   uint64
	held   int64 // bytes of pages with memory under them, charged to the device's pool
	asleep int64 // bytes of pages whose memory Sleep gave back, to create again at Wake
}

// page is a handle of the sleepable scope's pool, as the driver knows it
// now.
type page struct {
	id     uint64  // the driver's handle; 0 while its memory is given back (asleep)
	size   int64   // bytes
	ptr    uintptr // where the pool has it mapped; 0: nowhere (idle)
	mapped bool    // mapped at ptr in the driver: false while asleep, and where Sleep could not release it
}

func newPageSource(drv driver.Driver, m driver.PageMapper, device *pool.Pool) *pageSource {
	return &pageSource{Driver: drv, mapper: m, device: device, pages: map[uint64]*page{}}
}

// Granularity implements driver.PageMapper.
func (s *pageSource) Granularity() int64 { return s.mapper.Granularity() }

// ReserveAddress implements driver.PageMapper: address space stays the
// pool's, asleep or not.
func (s *pageSource) ReserveAddress(size int64) (uintptr, error) {
	return s.mapper.ReserveAddress(size)
}

// ReleaseAddress implements driver.PageMapper.
func (s *pageSource) ReleaseAddress(ptr uintptr, size int64) error {
	return s.mapper.ReleaseAddress(ptr, size)
}

// Create implements driver.PageMapper: a page charged to the device's
// pool. Where the device has no room, the device's pool gives back its
// cache and the driver is asked once more: the two pools share the device.
func (s *pageSource) Create(size int64) (uint64, error) {
	if err := s.device.Charge(size); err != nil {
		return 0, &driver.OutOfMemoryError{Requested: size, Err: err} // the cap's refusal, which the pool reports
	}
	id, err := s.mapper.Create(size)
	if err != nil && errdefs.IsSourceOutOfMemory(err) && s.device.EmptyCache() == nil {
		id, err = s.mapper.Create(size)
	}
	if err != nil {
		_ = s.device.Charge(-size)
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	s.pages[s.next] = &page{id: id, size: size}
	s.held += size
	return s.next, nil
}

// page returns the page the pool knows as h. Called with s.mu held.
func (s *pageSource) page(h uint64) (*page, error) {
	pg := s.pages[h]
	if pg == nil {
		return nil, prefixed.Errorf("gpu", "bug: the sleepable pool names page %d, which it does not hold", h)
	}
	return pg, nil
}

// Release implements driver.PageMapper. A page asleep has nothing to give
// back: the pool only forgets it.
func (s *pageSource) Release(h uint64) error {
	s.mu.Lock()
	pg, err := s.page(h)
	if err != nil || pg.id == 0 {
		if err == nil {
			delete(s.pages, h)
			s.asleep -= pg.size
		}
		s.mu.Unlock()
		return err
	}
	s.mu.Unlock()
	if err := s.mapper.Release(pg.id); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.pages, h)
	s.held -= pg.size
	s.mu.Unlock()
	return s.device.Charge(-pg.size)
}

// Map implements driver.PageMapper.
func (s *pageSource) Map(ptr uintptr, size int64, h uint64) error {
	s.mu.Lock()
	pg, err := s.page(h)
	if err == nil && pg.id == 0 {
		err = prefixed.Errorf("gpu", "bug: the sleepable pool maps page %d while asleep", h)
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err := s.mapper.Map(ptr, size, pg.id); err != nil {
		return err
	}
	s.mu.Lock()
	pg.ptr, pg.mapped = ptr, true
	s.mu.Unlock()
	return nil
}

// SetAccess implements driver.PageMapper.
func (s *pageSource) SetAccess(ptr uintptr, size int64) error { return s.mapper.SetAccess(ptr, size) }

// Unmap implements driver.PageMapper. A page that Sleep unmapped is mapped
// nowhere in the driver: the pool only forgets where it was.
func (s *pageSource) Unmap(ptr uintptr, size int64) error {
	s.mu.Lock()
	var pg *page
	for _, p := range s.pages {
		if p.ptr == ptr {
			pg = p
			break
		}
	}
	switch {
	case pg == nil:
		s.mu.Unlock()
		return prefixed.Errorf("gpu", "bug: the sleepable pool unmaps %#x, where none of its pages is", ptr)
	case !pg.mapped:
		pg.ptr = 0
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	if err := s.mapper.Unmap(ptr, size); err != nil {
		return err
	}
	s.mu.Lock()
	pg.ptr, pg.mapped = 0, false
	s.mu.Unlock()
	return nil
}

// doneEvent is the event pageSource hands the pool while idle: one that
// has completed, which no driver hands out (a CUDA event is a pointer,
// the host driver's a count).
const doneEvent = ^uintptr(0)

// RecordEvent implements driver.Driver: while idle, an event that has
// completed, with no driver call.
func (s *pageSource) RecordEvent(stream uintptr) (uintptr, error) {
	if s.idle.Load() {
		return doneEvent, nil
	}
	return s.Driver.RecordEvent(stream)
}

// EventDone implements driver.Driver.
func (s *pageSource) EventDone(ev uintptr) (bool, error) {
	if ev == doneEvent {
		return true, nil
	}
	return s.Driver.EventDone(ev)
}

// WaitEvent implements driver.Driver.
func (s *pageSource) WaitEvent(ev uintptr) error {
	if ev == doneEvent {
		return nil
	}
	return s.Driver.WaitEvent(ev)
}

// DestroyEvent implements driver.Driver.
func (s *pageSource) DestroyEvent(ev uintptr) error {
	if ev == doneEvent {
		return nil
	}
	return s.Driver.DestroyEvent(ev)
}

// Alloc implements driver.Driver: the pool of a sleepable scope maps pages
// only (pool.ExpandAlways), so that every byte it holds can sleep.
func (s *pageSource) Alloc(size int64) (uintptr, error) {
	return 0, prefixed.Errorf("gpu", "bug: a sleepable scope's pool allocates %s of a segment", units.FormatBytes(size))
}

// asleepBytes returns the bytes of the pages whose memory Sleep gave back.
func (s *pageSource) asleepBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asleep
}

// span is a range of device memory.
type span struct {
	ptr  uintptr
	size int64
}

// mapped returns the pages mapped, by address, with the ranges they
// cover, neighbours joined: what holds the scope's contents.
func (s *pageSource) mapped() (pages []*page, ranges []span) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pg := range s.pages {
		if pg.mapped {
			pages = append(pages, pg)
		}
	}
	slices.SortFunc(pages, func(a, b *page) int { return cmp.Compare(a.ptr, b.ptr) })
	for _, pg := range pages {
		if n := len(ranges); n > 0 && ranges[n-1].ptr+uintptr(ranges[n-1].size) == pg.ptr {
			ranges[n-1].size += pg.size
			continue
		}
		ranges = append(ranges, span{pg.ptr, pg.size})
	}
	return pages, ranges
}

// unmapAll unmaps pages, whose contents are saved or not wanted. Where one
// fails, those it unmapped are mapped again (a page unmapped keeps its
// bytes: nothing is lost), and it returns the error. Where mapping them
// again fails too, half is true: those it unmapped are unmapped (mapAt
// unmaps what it mapped), the others mapped, as the pages say.
func (s *pageSource) unmapAll(pages []*page) (half bool, err error) {
	for i, pg := range pages {
		if err := s.mapper.Unmap(pg.ptr, pg.size); err != nil {
			err = prefixed.Wrap("gpu", err, "unmapping %s to sleep", units.FormatBytes(pg.size))
			if merr := s.mapAt(pages[:i], nil); merr != nil {
				s.setMapped(pages[:i], false)
				return true, errors.Join(err, merr)
			}
			return false, err
		}
	}
	s.setMapped(pages, false)
	return false, nil
}

// setMapped records whether pages are mapped.
func (s *pageSource) setMapped(pages []*page, mapped bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pg := range pages {
		pg.mapped = mapped
	}
}

// mapAt maps pages at their addresses, each with the driver's handle ids[i]
// (nil: its own), and gives access to them. Where a call fails it unmaps
// what it mapped and returns the error.
func (s *pageSource) mapAt(pages []*page, ids []uint64) error {
	for i, pg := range pages {
		id := pg.id
		if ids != nil {
			id = ids[i]
		}
		err := s.mapper.Map(pg.ptr, pg.size, id)
		if err == nil {
			if err = s.mapper.SetAccess(pg.ptr, pg.size); err != nil {
				err = errors.Join(err, s.mapper.Unmap(pg.ptr, pg.size))
			}
		}
		if err != nil {
			for _, done := range pages[:i] {
				err = errors.Join(err, s.mapper.Unmap(done.ptr, done.size))
			}
			return prefixed.Wrap("gpu", err, "mapping %s at %#x", units.FormatBytes(pg.size), pg.ptr)
		}
	}
	return nil
}

// giveBack releases the memory of every page that holds some and is
// mapped nowhere: they are asleep from then on, and the source idle. A
// page the driver will not release keeps its memory, and Wake maps it
// again as it is; the error says so. A page Sleep could not unmap stays as
// it is until Wake. It returns the bytes given back.
func (s *pageSource) giveBack() (int64, error) {
	s.idle.Store(true)
	s.mu.Lock()
	var held []*page
	for _, pg := range s.pages {
		if pg.id != 0 && !pg.mapped {
			held = append(held, pg)
		}
	}
	s.mu.Unlock()
	var given int64
	var errs []error
	for _, pg := range held {
		if err := s.mapper.Release(pg.id); err != nil {
			errs = append(errs, prefixed.Wrap("gpu", err, "releasing %s to sleep: kept until Wake", units.FormatBytes(pg.size)))
			continue
		}
		s.mu.Lock()
		pg.id = 0
		s.held -= pg.size
		s.asleep += pg.size
		s.mu.Unlock()
		given += pg.size
	}
	return given, errors.Join(append(errs, s.device.Charge(-given))...)
}

// takeBack gives memory back to every page asleep and maps the pages that
// the pool has at an address, charging the device's pool first for all of
// it: Wake's driver calls, all or none. Where one fails, it undoes what it
// did and returns the error, every page as it was. undo takes it all back
// again, for a Wake whose restoring of the contents failed.
func (s *pageSource) takeBack() (undo func() error, err error) {
	s.mu.Lock()
	var asleep, unmapped []*page
	var need int64
	for _, pg := range s.pages {
		if pg.id == 0 {
			asleep = append(asleep, pg)
			need += pg.size
		}
		if pg.ptr != 0 && !pg.mapped {
			unmapped = append(unmapped, pg)
		}
	}
	s.mu.Unlock()
	if err := s.device.Charge(need); err != nil {
		return nil, err
	}
	ids := make(map[*page]uint64, len(asleep))
	release := func() error {
		var errs []error
		for _, id := range ids {
			errs = append(errs, s.mapper.Release(id))
		}
		return errors.Join(append(errs, s.device.Charge(-need))...)
	}
	for _, pg := range asleep {
		id, err := s.mapper.Create(pg.size)
		if err != nil && errdefs.IsSourceOutOfMemory(err) {
			err = prefixed.KindWrap("gpu", errdefs.OutOfMemory, err, "taking %s back to wake", units.FormatBytes(need))
		}
		if err != nil {
			return nil, errors.Join(err, release())
		}
		ids[pg] = id
	}
	mapIDs := make([]uint64, len(unmapped))
	for i, pg := range unmapped {
		mapIDs[i] = cmp.Or(ids[pg], pg.id)
	}
	if err := s.mapAt(unmapped, mapIDs); err != nil {
		return nil, errors.Join(err, release())
	}
	s.setAwake(ids, unmapped, need, true)
	return func() error {
		_, err := s.unmapAll(unmapped)
		if err == nil {
			s.setAwake(ids, unmapped, need, false)
			err = release()
		}
		return err
	}, nil
}

// setAwake records what takeBack did (awake) or undid (not awake).
func (s *pageSource) setAwake(ids map[*page]uint64, mapped []*page, need int64, awake bool) {
	s.idle.Store(!awake)
	s.mu.Lock()
	defer s.mu.Unlock()
	for pg, id := range ids {
		if !awake {
			id = 0
		}
		pg.id = id
	}
	for _, pg := range mapped {
		pg.mapped = awake
	}
	if !awake {
		need = -need
	}
	s.held += need
	s.asleep -= need
}
