package foreign

import (
	"errors"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/internal/prefixed"
)

// tbl holds every live allocation made through this package.
var tbl table

// Alloc allocates size bytes on device i, in the scope scope (0: the
// device's root), for work on stream, and returns the address. The scope
// is the one clib keeps for the calling thread, or for stream: where it
// has ended, or is ending, the allocation fails with ErrEnded. Size 0
// returns 0 and no error, whatever i and stream are, as c10's allocator
// and C's malloc(0) may: PyTorch asks for it routinely, and it is no
// failure.
func Alloc(i int, scope int64, size int64, stream uintptr) (uintptr, error) {
	a, err := alloc(i, scope, size, stream, -1)
	return a.Ptr, err
}

// alloc is Alloc, where the pair cache held held blocks when it missed (<
// 0: unknown).
func alloc(i int, scope int64, size int64, stream uintptr, held int) (Block, error) {
	if size == 0 {
		return Block{}, nil
	}
	d := openDeviceAt(i)
	if d == nil {
		var err error
		if d, err = deviceAt(i); err != nil {
			return Block{}, err
		}
	}
	r, err := d.scopeOf(scope)
	if err != nil {
		return Block{}, err
	}
	// An allocation that finds the pool short has the pair cache give
	// back what it holds, and tries again (gpu's allocOnce).
	a, ok, err := r.alloc(size, stream, held)
	switch {
	case ok:
		return a, err
	case r == d.root:
		return Block{}, prefixed.Kind("gpu", gpu.ErrDeviceClosed, "device %d was shut down", i)
	}
	return Block{}, ErrEnded // it ended under the allocation
}

// AllocIn allocates size bytes in the scope id, for work on stream (a
// CuPy allocator's param names it). Where i >= 0 the scope's device must
// be device i. Size 0 returns 0 and no error, as Alloc.
func AllocIn(id int64, i int, size int64, stream uintptr) (uintptr, error) {
	a, err := allocIn(id, i, size, stream, -1)
	return a.Ptr, err
}

// allocIn is AllocIn, where the pair cache held held blocks when it missed
// (< 0: unknown).
func allocIn(id int64, i int, size int64, stream uintptr, held int) (Block, error) {
	if size == 0 {
		return Block{}, nil
	}
	r := lookup(id)
	if r == nil {
		return Block{}, prefixed.Wrap("gpu", errNoScope, "scope %d", id)
	}
	if i >= 0 && r.dev.index != i {
		return Block{}, prefixed.Kind("gpu", gpu.ErrWrongScope, "scope %d is a scope of device %s, not of device %d", id, r.dev.gpu.Name(), i)
	}
	a, ok, err := r.alloc(size, stream, held)
	if !ok {
		return Block{}, prefixed.Wrap("gpu", errNoScope, "scope %d is ending", id)
	}
	return a, err
}

// alloc allocates in r, for work on stream besides r's own (0: none);
// ok is false, and nothing done, where r has begun to end.
//
// An End that begins while the allocation is under way must find its
// entry in the table, or the allocation must not come out of it: End
// marks r ending and then reads every shard under its lock, and alloc
// checks the mark under the lock of the shard it puts the entry in. Before
// End read that shard, the entry is there for End to see; after, the mark
// is seen and the allocation undone.
func (r *record) alloc(size int64, stream uintptr, held int) (a Block, ok bool, err error) {
	if r.ending.Load() {
		return Block{}, false, nil
	}
	if stream != 0 {
		// A scope allocates for another stream in its child on that
		// stream.
		c, err := r.onStream(stream)
		if c == nil || err != nil {
			return Block{}, err != nil, err
		}
		return c.allocOn(size, stream, held)
	}
	return r.allocOn(size, stream, held)
}

// allocOn is alloc in r itself, for work on stream: r's own stream where r
// is a child on a library's stream.
func (r *record) allocOn(size int64, stream uintptr, held int) (a Block, ok bool, err error) {
	if r.ending.Load() {
		return Block{}, false, nil
	}
	buf, err := r.dev.allocIn(r, size, held)
	if err != nil {
		if r.ending.Load() {
			return Block{}, false, nil // the scope ended under it
		}
		return Block{}, true, err
	}
	ptr := buf.Ptr()
	h := hash(ptr)
	s := tbl.shardOf(h)
	s.mu.Lock()
	if r.ending.Load() {
		s.mu.Unlock()
		_ = r.scope.Free(buf) // or its end freed it already
		return Block{}, false, nil
	}
	a = Block{Ptr: ptr, ID: allocIDs.Add(1)}
	s.put(entry{ptr: ptr, rec: r, buf: buf, stream: stream, id: a.ID}, h)
	s.mu.Unlock()
	return a, true, nil
}

// Settle settles the allocation of id at ptr, made in a scope that the
// pair cache found ended once the allocation came back from here, before
// its caller handed it out: it returns the id of the scope that holds it
// now (0: a device's root), where the scope's end passed it on, or -1
// where the end freed it (GPUSCOPE_FREE_LIVE) or has yet to settle it, and
// Settle frees it: the caller allocates again, in the enclosing scope, and
// hands out no block an end freed.
func Settle(ptr uintptr, id uint64) int64 {
	h := hash(ptr)
	s := tbl.shardOf(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.find(ptr, h)
	if k < 0 || s.entries[k].id != id {
		return -1
	}
	e := &s.entries[k]
	if e.rec.ending.Load() {
		_ = e.rec.scope.Free(e.buf) // the scope is open until its end has seen every shard
		s.remove(k)
		s.shrink()
		return -1
	}
	if e.rec.streamOf != nil {
		return e.rec.streamOf.id
	}
	return e.rec.id
}

// allocIn allocates size bytes in r's scope. Where the pair cache is on,
// allocations here take turns, and one that could raise a peak while the
// cache held blocks when it missed (held != 0) first has it give back what
// would count in the peak (makeRoom).
func (d *device) allocIn(r *record, size int64, held int) (gpu.Buffer, error) {
	if d.pairs.Load() {
		d.allocMu.Lock()
		defer d.allocMu.Unlock()
		if held != 0 {
			d.makeRoom(r, size)
		}
	}
	return r.scope.Alloc(size)
}

// Free frees the allocation at ptr. Where the caller says, it checks the
// allocation's device (i >= 0) and size (size >= 0) first, and frees
// nothing where they differ. A ptr of 0 is no allocation, and freeing it
// does nothing, as C's free(NULL).
func Free(i int, ptr uintptr, size int64, stream uintptr) error {
	_, err := free(i, ptr, 0, size, stream)
	return err
}

// FreeID is Free of the allocation of id at ptr, where id is not 0: an
// allocation made since at the same address is not freed, and the free
// fails as one of a block freed already.
func FreeID(i int, ptr uintptr, id uint64, size int64, stream uintptr) error {
	_, err := free(i, ptr, id, size, stream)
	return err
}

// ownStream, as the stream of a free, is the allocation's own: the pair
// cache's blocks were freed for it.
const ownStream = ^uintptr(0)

// free is FreeID; late reports that the allocation of id was freed
// already, where id is not 0, and nothing else is wrong.
func free(i int, ptr uintptr, id uint64, size int64, stream uintptr) (late bool, err error) {
	if ptr == 0 {
		return false, nil
	}
	var want *gpu.Device
	if i >= 0 {
		d := openDeviceAt(i)
		if d == nil {
			return false, prefixed.Kind("gpu", gpu.ErrNoDevice, "freeing %#x on device %d, which is not open", ptr, i)
		}
		want = d.gpu
	}
	h := hash(ptr)
	s := tbl.shardOf(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.find(ptr, h)
	switch {
	case id != 0 && (k < 0 || s.entries[k].id != id):
		return true, FreedAlready(ptr) // by its scope's end, with GPUSCOPE_FREE_LIVE
	case k < 0:
		return false, NotLive(ptr)
	}
	e := &s.entries[k]
	if want != nil && e.buf.Device() != want {
		return false, prefixed.Kind("gpu", gpu.ErrWrongScope, "%#x belongs to device %s, freed as one of device %d: not freed", ptr, e.buf.Device().Name(), i)
	}
	if size >= 0 && size != e.buf.Size() {
		return false, prefixed.Kind("gpu", gpu.ErrInvalidSize, "%#x was allocated with %d bytes, freed with %d: not freed", ptr, e.buf.Size(), size)
	}
	if stream == ownStream {
		stream = e.stream
	}
	if stream != e.stream {
		// Freed for work on another stream than its allocation's: that
		// stream uses it too, and the pool reuses it only once its work
		// queued before the free has completed. Asleep, no work may use
		// it (nothing is mapped under it; the sleep's caller waited for
		// the work of streams the scope does not know): the free, which
		// touches no memory, needs no record.
		if err := e.rec.recordUse(e.buf, stream); err != nil && !errors.Is(err, gpu.ErrAsleep) {
			return false, prefixed.Wrap("gpu", err, "freeing %#x for stream %#x, which it was not allocated for: not freed", ptr, stream)
		}
	}
	err = e.rec.scope.Free(e.buf)
	s.remove(k)
	s.shrink()
	if err != nil {
		return false, prefixed.Wrap("gpu", err, "freeing %#x", ptr)
	}
	return false, nil
}

// RecordStream records that work on stream uses the allocation at ptr
// (PyTorch's record_stream): once it is freed, its memory is reused on
// another stream only after that work has completed.
func RecordStream(ptr, stream uintptr) error {
	h := hash(ptr)
	s := tbl.shardOf(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	k, err := s.live(ptr, h)
	if err != nil {
		return err
	}
	e := &s.entries[k]
	if stream == e.stream {
		return nil // the allocation's own stream, or one its allocation recorded
	}
	// The default stream (0) too: a block allocated for a side stream lives
	// on it, and the default stream is another (PyTorch's, FSDP's pattern).
	return e.rec.recordUse(e.buf, stream)
}

// live returns the index of ptr's entry in s, or an error that says ptr is
// no live allocation of this library. Called with s.mu held.
func (s *shard) live(ptr uintptr, h uint64) (int, error) {
	k := s.find(ptr, h)
	if k < 0 {
		return -1, NotLive(ptr)
	}
	return k, nil
}

// NotLive is the error of a call that names ptr as a live allocation of
// this library, which it is not: an address the library never returned, or
// one freed already. The table keeps only what is live, so it cannot tell
// which, and the error claims neither.
func NotLive(ptr uintptr) error {
	return prefixed.Errorf("gpu", "%#x is no live allocation of this library: an address it never returned, or one freed already", ptr)
}

// FreedAlready is the error of a call that names ptr, which the library
// knows was freed: a block of the pair cache (ErrFreed).
func FreedAlready(ptr uintptr) error {
	return prefixed.Kind("gpu", gpu.ErrFreed, "%#x was freed already (a second free, or a use after the free)", ptr)
}
