//go:build linux

package host

import (
	"errors"
	"iter"
	"sort"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/internal/handles"
	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/internal/units"
)

// Page mapping, emulated as CUDA's virtual memory calls behave: a handle is a
// range of one memfd file, address space is reserved with an inaccessible
// anonymous mapping, mapping a handle maps its file range over part of a
// reservation with MAP_FIXED, still inaccessible, and SetAccess makes it
// readable and writable. A handle keeps its bytes while it lives, as on a
// GPU, mapped or not; memory that is unmapped, or mapped without access, is
// inaccessible, and every copy checks first.

var _ driver.PageMapper = (*Driver)(nil)

// vmState is the page mapping state, guarded by Driver.mu.
type vmState struct {
	fd       int // the memfd holding every handle; -1 before the first
	fileSize int64
	handles  map[uint64]*vmHandle
	nextID   uint64
	res      []*reservation // sorted by base
}

type vmHandle struct {
	off, size  int64   // its range of the file
	mappings   int     // addresses it is mapped at
	freed      bool    // unmapped from its last address: poisoned when next made accessible elsewhere
	unmappedAt uintptr // where it was unmapped from its last address
}

type reservation struct {
	base     uintptr
	mem      []byte           // the whole reservation, as mapped
	mapped   map[int64]uint64 // granule index within mem -> handle
	access   map[int64]bool   // granules readable and writable
	mappings map[int64]int64  // first granule of each mapping -> its size
}

// Granularity implements driver.PageMapper.
func (d *Driver) Granularity() int64 { return PageSize }

// ReserveAddress implements driver.PageMapper.
func (d *Driver) ReserveAddress(size int64) (uintptr, error) {
	if size <= 0 || size%PageSize != 0 {
		return 0, prefixed.Errorf("host", "ReserveAddress(%d): not a positive multiple of %d", size, PageSize)
	}
	var res uintptr
	err := d.whileOpen(func() error {
		mem, err := unix.Mmap(-1, 0, int(size), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
		if err != nil {
			return prefixed.Wrap("host", err, "reserving %d bytes of address space", size)
		}
		r := &reservation{base: addrOf(mem), mem: mem, mapped: map[int64]uint64{}, access: map[int64]bool{}, mappings: map[int64]int64{}}
		i := sort.Search(len(d.vm.res), func(i int) bool { return d.vm.res[i].base > r.base })
		d.vm.res = append(d.vm.res, nil)
		copy(d.vm.res[i+1:], d.vm.res[i:])
		d.vm.res[i] = r
		res = r.base
		return nil
	})
	return res, err
}

// reservationAt returns the reservation holding [ptr, ptr+n). Called with
// d.mu held.
func (d *Driver) reservationAt(ptr uintptr, n int64) (*reservation, int64, bool) {
	i := sort.Search(len(d.vm.res), func(i int) bool { return d.vm.res[i].base > ptr }) - 1
	if i < 0 || n < 0 {
		return nil, 0, false
	}
	r := d.vm.res[i]
	off := int64(ptr - r.base)
	if off+n > int64(len(r.mem)) {
		return nil, 0, false
	}
	return r, off, true
}

// ReleaseAddress implements driver.PageMapper.
func (d *Driver) ReleaseAddress(ptr uintptr, size int64) error {
	return d.whileOpen(func() error {
		r, off, ok := d.reservationAt(ptr, size)
		if !ok || off != 0 || int64(len(r.mem)) != size {
			return prefixed.Errorf("host", "ReleaseAddress(%#x, %d): no such reservation", ptr, size)
		}
		if len(r.mapped) > 0 {
			return prefixed.Errorf("host", "ReleaseAddress(%#x): %d granules still mapped", ptr, len(r.mapped))
		}
		if err := unix.Munmap(r.mem); err != nil {
			return prefixed.Wrap("host", err, "releasing address space")
		}
		for i, x := range d.vm.res {
			if x == r {
				d.vm.res = append(d.vm.res[:i], d.vm.res[i+1:]...)
				break
			}
		}
		return nil
	})
}

// Create implements driver.PageMapper.
func (d *Driver) Create(size int64) (uint64, error) {
	if size <= 0 || size%PageSize != 0 {
		return 0, prefixed.Errorf("host", "Create(%d): not a positive multiple of %d", size, PageSize)
	}
	var res uint64
	err := d.whileOpen(func() error {
		if d.used+size > d.capacity {
			return &driver.OutOfMemoryError{Requested: size,
				Err: prefixed.Errorf("host", "%d bytes asked, %d of %d in use", size, d.used, d.capacity)}
		}
		if d.vm.fd < 0 {
			fd, err := unix.MemfdCreate("gpuscope-host-pages", unix.MFD_CLOEXEC)
			if err != nil {
				return prefixed.Wrap("host", err, "memfd_create")
			}
			d.vm.fd = fd
		}
		// Each handle takes a fresh range of the file; a released one has its
		// memory punched out, so the file is sparse and its size is only a name
		// space.
		off := d.vm.fileSize
		if err := unix.Ftruncate(d.vm.fd, off+size); err != nil {
			return prefixed.Wrap("host", err, "growing the page file")
		}
		d.vm.fileSize += size
		d.used += size
		res = handles.Add(d.vm.handles, &d.vm.nextID, &vmHandle{off: off, size: size})
		return nil
	})
	return res, err
}

// Release implements driver.PageMapper. The handle's bytes are dropped.
func (d *Driver) Release(h uint64) error {
	return d.whileOpen(func() error {
		hd, ok := d.vm.handles[h]
		if !ok {
			return prefixed.Errorf("host", "Release(%d): no such handle (double free?)", h)
		}
		if hd.mappings > 0 {
			return prefixed.Errorf("host", "Release(%d): still mapped", h)
		}
		if err := unix.Fallocate(d.vm.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, hd.off, hd.size); err != nil {
			return prefixed.Wrap("host", err, "dropping a handle")
		}
		delete(d.vm.handles, h)
		d.used -= hd.size
		return nil
	})
}

// Map implements driver.PageMapper. The memory stays inaccessible until
// SetAccess, as on a GPU. A handle may be mapped at several addresses.
func (d *Driver) Map(ptr uintptr, size int64, h uint64) error {
	return d.whileOpen(func() error {
		hd, ok := d.vm.handles[h]
		if !ok {
			return prefixed.Errorf("host", "Map: handle %d does not exist", h)
		}
		if hd.size != size {
			return prefixed.Errorf("host", "Map: handle %d has %d bytes, not %d", h, hd.size, size)
		}
		r, off, ok := d.reservationAt(ptr, size)
		if !ok || off%PageSize != 0 {
			return prefixed.Errorf("host", "Map(%#x, %d): outside any reservation or unaligned", ptr, size)
		}
		for g := range granules(off, size) {
			if _, ok := r.mapped[g]; ok {
				return prefixed.Errorf("host", "Map: %#x is already mapped", r.base+uintptr(g*PageSize))
			}
		}
		_, err := unix.MmapPtr(d.vm.fd, hd.off, unsafe.Pointer(&r.mem[off]), uintptr(size),
			unix.PROT_NONE, unix.MAP_SHARED|unix.MAP_FIXED)
		if err != nil {
			return prefixed.Wrap("host", err, "mapping a handle")
		}
		for g := range granules(off, size) {
			r.mapped[g] = h
		}
		r.mappings[off/PageSize] = size
		if hd.freed && hd.mappings == 0 && ptr == hd.unmappedAt {
			hd.freed = false // mapped again where it was: a sleeping scope's page, as it was
		}
		hd.mappings++
		return nil
	})
}

// SetAccess implements driver.PageMapper.
func (d *Driver) SetAccess(ptr uintptr, size int64) error {
	return d.whileOpen(func() error {
		r, off, ok := d.reservationAt(ptr, size)
		if !ok || off%PageSize != 0 || size <= 0 || size%PageSize != 0 {
			return prefixed.Errorf("host", "SetAccess(%#x, %d): not whole granules of a reservation", ptr, size)
		}
		for g := range granules(off, size) {
			if _, ok := r.mapped[g]; !ok {
				return prefixed.Errorf("host", "SetAccess: %#x is not mapped", r.base+uintptr(g*PageSize))
			}
		}
		if err := unix.Mprotect(r.mem[off:off+size], unix.PROT_READ|unix.PROT_WRITE); err != nil {
			return prefixed.Wrap("host", err, "setting access")
		}
		for g := range granules(off, size) {
			r.access[g] = true
			if hd := d.vm.handles[r.mapped[g]]; hd.freed {
				at, ok := r.mappings[g] // the first granule of a mapping starts it
				if ok {
					poison(r.mem[g*PageSize : g*PageSize+at])
					hd.freed = false
				}
			}
		}
		return nil
	})
}

// Unmap implements driver.PageMapper: ptr and size must be one whole
// mapping. The pool moves only memory it has freed, so a handle unmapped
// from its last address is poisoned before anyone can read it again: when
// SetAccess next makes it accessible at another address (a handle released
// instead is dropped unread, and costs nothing). Mapped again where it was,
// it keeps its bytes, as on a GPU: a Sleep that must undo its unmapping
// maps the scope's pages back so.
func (d *Driver) Unmap(ptr uintptr, size int64) error {
	return d.whileOpen(func() error {
		r, off, ok := d.reservationAt(ptr, size)
		if !ok || off%PageSize != 0 || r.mappings[off/PageSize] != size {
			return prefixed.Errorf("host", "Unmap(%#x, %d): not one whole mapping", ptr, size)
		}
		hd := d.vm.handles[r.mapped[off/PageSize]]
		if err := d.unmapLocked(r, off, size); err != nil {
			return err
		}
		delete(r.mappings, off/PageSize)
		hd.mappings--
		hd.freed = hd.freed || hd.mappings == 0
		hd.unmappedAt = ptr
		return nil
	})
}

// unmapLocked makes [off, off+size) of r inaccessible again.
func (d *Driver) unmapLocked(r *reservation, off, size int64) error {
	_, err := unix.MmapPtr(-1, 0, unsafe.Pointer(&r.mem[off]), uintptr(size), unix.PROT_NONE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED|unix.MAP_NORESERVE)
	if err != nil {
		return prefixed.Wrap("host", err, "unmapping")
	}
	for g := range granules(off, size) {
		delete(r.mapped, g)
		delete(r.access, g)
	}
	return nil
}

// resolveMapped returns the memory at [ptr, ptr+n) if it lies in a
// reservation; ok is false if it does not, and err is set where it does but
// is not wholly mapped. Called with d.mu held.
func (d *Driver) resolveMapped(ptr uintptr, n int64) (mem []byte, ok bool, err error) {
	r, off, in := d.reservationAt(ptr, n)
	if !in {
		return nil, false, nil
	}
	for g := off / PageSize; g*PageSize < off+n; g++ {
		if !r.access[g] {
			return nil, true, prefixed.Errorf("host", "address %#x is reserved but not mapped with access", r.base+uintptr(g*PageSize))
		}
	}
	return r.mem[off : off+n], true, nil
}

func newVM() vmState { return vmState{fd: -1, handles: map[uint64]*vmHandle{}} }

// closeVM releases the page file and reports pages or reservations left.
// Called with d.mu held.
func (d *Driver) closeVM() error {
	var err error
	if len(d.vm.handles) > 0 || len(d.vm.res) > 0 {
		err = prefixed.Errorf("host", "closed with %s and %s not released",
			units.Count(len(d.vm.handles), "handle"), units.Count(len(d.vm.res), "address reservation"))
	}
	// What was left is unmapped all the same: a closed device keeps no
	// memory of the process.
	for _, r := range d.vm.res {
		if uerr := unix.Munmap(r.mem); uerr != nil {
			err = errors.Join(err, prefixed.Wrap("host", uerr, "releasing address space at close"))
		}
	}
	d.vm.res, d.vm.handles = nil, map[uint64]*vmHandle{}
	if d.vm.fd >= 0 {
		_ = unix.Close(d.vm.fd)
		d.vm.fd = -1
	}
	return err
}

// granules yields the index of each granule of [off, off+size).
func granules(off, size int64) iter.Seq[int64] {
	return func(yield func(int64) bool) {
		for g := off / PageSize; g < (off+size)/PageSize; g++ {
			if !yield(g) {
				return
			}
		}
	}
}
