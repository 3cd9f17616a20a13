//go:build linux

package host

import (
	"fmt"
	"sort"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpuscope/gpuscope/gpu/driver"
)

// Page mapping, emulated as CUDA's virtual memory calls behave: pages are
// ranges of one memfd file, address space is reserved with an inaccessible
// anonymous mapping, and mapping a page maps its file range over part of a
// reservation with MAP_FIXED. A page keeps its bytes when it moves, as on a
// GPU; unmapped memory is inaccessible, and every copy checks first.

// PageSize is the host device's page: the H200's allocation granularity.
const PageSize = 2 << 20

var _ driver.PageMapper = (*Driver)(nil)

// vmState is the page mapping state, guarded by Driver.mu.
type vmState struct {
	fd       int              // the memfd holding every page; -1 before the first
	fileSize int64            // bytes of the file in use or free
	freeOffs []int64          // offsets of released pages, for reuse
	pages    map[uint64]int64 // live page -> its offset in the file
	nextID   uint64
	res      []*reservation // sorted by base
}

type reservation struct {
	base   uintptr
	mem    []byte           // the whole reservation, as mapped
	mapped map[int64]uint64 // page index within mem -> page
}

// PageSize implements driver.PageMapper.
func (d *Driver) PageSize() int64 { return PageSize }

// ReserveAddress implements driver.PageMapper.
func (d *Driver) ReserveAddress(size int64) (uintptr, error) {
	if size <= 0 || size%PageSize != 0 {
		return 0, fmt.Errorf("host: ReserveAddress(%d): not a positive multiple of %d", size, PageSize)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, ErrClosed
	}
	mem, err := unix.Mmap(-1, 0, int(size), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return 0, fmt.Errorf("host: reserving %d bytes of address space: %w", size, err)
	}
	r := &reservation{base: addrOf(mem), mem: mem, mapped: map[int64]uint64{}}
	i := sort.Search(len(d.vm.res), func(i int) bool { return d.vm.res[i].base > r.base })
	d.vm.res = append(d.vm.res, nil)
	copy(d.vm.res[i+1:], d.vm.res[i:])
	d.vm.res[i] = r
	return r.base, nil
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
	d.mu.Lock()
	defer d.mu.Unlock()
	r, off, ok := d.reservationAt(ptr, size)
	if !ok || off != 0 || int64(len(r.mem)) != size {
		return fmt.Errorf("host: ReleaseAddress(%#x, %d): no such reservation", ptr, size)
	}
	if len(r.mapped) > 0 {
		return fmt.Errorf("host: ReleaseAddress(%#x): %d pages still mapped", ptr, len(r.mapped))
	}
	if err := unix.Munmap(r.mem); err != nil {
		return fmt.Errorf("host: releasing address space: %w", err)
	}
	for i, x := range d.vm.res {
		if x == r {
			d.vm.res = append(d.vm.res[:i], d.vm.res[i+1:]...)
			break
		}
	}
	return nil
}

// CreatePage implements driver.PageMapper.
func (d *Driver) CreatePage() (uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.inject(OpAlloc, PageSize); err != nil {
		return 0, err
	}
	if d.used+PageSize > d.capacity {
		return 0, &driver.OutOfMemory{Requested: PageSize,
			Err: fmt.Errorf("host: a page asked, %d of %d bytes in use", d.used, d.capacity)}
	}
	if d.vm.fd < 0 {
		fd, err := unix.MemfdCreate("gpuscope-host-pages", unix.MFD_CLOEXEC)
		if err != nil {
			return 0, fmt.Errorf("host: memfd_create: %w", err)
		}
		d.vm.fd = fd
	}
	var off int64
	if n := len(d.vm.freeOffs); n > 0 {
		off = d.vm.freeOffs[n-1]
		d.vm.freeOffs = d.vm.freeOffs[:n-1]
	} else {
		off = d.vm.fileSize
		if err := unix.Ftruncate(d.vm.fd, off+PageSize); err != nil {
			return 0, fmt.Errorf("host: growing the page file: %w", err)
		}
		d.vm.fileSize += PageSize
	}
	d.vm.nextID++
	d.vm.pages[d.vm.nextID] = off
	d.used += PageSize
	return d.vm.nextID, nil
}

// ReleasePage implements driver.PageMapper. The page's bytes are dropped.
func (d *Driver) ReleasePage(page uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.inject(OpFree, PageSize); err != nil {
		return err
	}
	off, ok := d.vm.pages[page]
	if !ok {
		return fmt.Errorf("host: ReleasePage(%d): no such page (double free?)", page)
	}
	for _, r := range d.vm.res {
		for _, pg := range r.mapped {
			if pg == page {
				return fmt.Errorf("host: ReleasePage(%d): still mapped", page)
			}
		}
	}
	if err := unix.Fallocate(d.vm.fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, PageSize); err != nil {
		return fmt.Errorf("host: dropping a page: %w", err)
	}
	delete(d.vm.pages, page)
	d.vm.freeOffs = append(d.vm.freeOffs, off)
	d.used -= PageSize
	return nil
}

// MapPages implements driver.PageMapper.
func (d *Driver) MapPages(ptr uintptr, pages []uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	n := int64(len(pages)) * PageSize
	r, off, ok := d.reservationAt(ptr, n)
	if !ok || off%PageSize != 0 {
		return fmt.Errorf("host: MapPages(%#x, %d pages): outside any reservation or unaligned", ptr, len(pages))
	}
	for i, pg := range pages {
		if _, ok := d.vm.pages[pg]; !ok {
			return fmt.Errorf("host: MapPages: page %d does not exist", pg)
		}
		if _, ok := r.mapped[off/PageSize+int64(i)]; ok {
			return fmt.Errorf("host: MapPages: %#x is already mapped", ptr+uintptr(int64(i)*PageSize))
		}
	}
	for i, pg := range pages {
		at := off + int64(i)*PageSize
		_, err := unix.MmapPtr(d.vm.fd, d.vm.pages[pg], unsafe.Pointer(&r.mem[at]), PageSize,
			unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED)
		if err != nil {
			for j := range i {
				d.unmapLocked(r, off+int64(j)*PageSize, PageSize)
			}
			return fmt.Errorf("host: mapping a page: %w", err)
		}
		r.mapped[at/PageSize] = pg
	}
	return nil
}

// UnmapPages implements driver.PageMapper. The bytes are poisoned first:
// the pool unmaps only memory it has freed.
func (d *Driver) UnmapPages(ptr uintptr, size int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, off, ok := d.reservationAt(ptr, size)
	if !ok || off%PageSize != 0 || size%PageSize != 0 {
		return fmt.Errorf("host: UnmapPages(%#x, %d): not whole pages of a reservation", ptr, size)
	}
	for p := off / PageSize; p < (off+size)/PageSize; p++ {
		if _, ok := r.mapped[p]; !ok {
			return fmt.Errorf("host: UnmapPages: %#x is not mapped", r.base+uintptr(p*PageSize))
		}
	}
	for i := range r.mem[off : off+size] {
		r.mem[off+int64(i)] = PoisonByte
	}
	return d.unmapLocked(r, off, size)
}

// unmapLocked makes [off, off+size) of r inaccessible again.
func (d *Driver) unmapLocked(r *reservation, off, size int64) error {
	_, err := unix.MmapPtr(-1, 0, unsafe.Pointer(&r.mem[off]), uintptr(size), unix.PROT_NONE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED|unix.MAP_NORESERVE)
	if err != nil {
		return fmt.Errorf("host: unmapping: %w", err)
	}
	for p := off / PageSize; p < (off+size)/PageSize; p++ {
		delete(r.mapped, p)
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
	for p := off / PageSize; p*PageSize < off+n; p++ {
		if _, mapped := r.mapped[p]; !mapped {
			return nil, true, fmt.Errorf("host: address %#x is reserved but not mapped", r.base+uintptr(p*PageSize))
		}
	}
	return r.mem[off : off+n], true, nil
}

func newVM() vmState { return vmState{fd: -1, pages: map[uint64]int64{}} }

// closeVM releases the page file and reports pages or reservations left.
// Called with d.mu held.
func (d *Driver) closeVM() error {
	var err error
	if len(d.vm.pages) > 0 || len(d.vm.res) > 0 {
		err = fmt.Errorf("host: closed with %d pages and %d address reservations not released", len(d.vm.pages), len(d.vm.res))
	}
	if d.vm.fd >= 0 {
		_ = unix.Close(d.vm.fd)
		d.vm.fd = -1
	}
	return err
}
