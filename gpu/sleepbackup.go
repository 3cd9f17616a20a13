package gpu

import (
	"errors"
	"unsafe"

	"github.com/gpuscope/gpuscope/gpu/driver"
	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/internal/units"
)

// backup is what a scope asleep with KeepContents kept of its memory: the
// bytes of the ranges it had mapped, in host memory, in order. The memory
// is page-locked, from the device's cache of it (AllocHost's), where the
// driver has some, so that the copies run at the speed of the link; it
// goes back to that cache once Wake has copied it back, for the next
// Sleep.
type backup struct {
	ranges []span
	chunks []backupChunk
	bytes  int64 // of the ranges
}

// backupChunk is one piece of a backup: a page-locked block, or Go memory
// where the driver has no page-locked memory.
type backupChunk struct {
	b    *hostBlock
	mem  []byte
	size int64
}

// backupChunkSize is the most a chunk of a backup holds: a size class of
// its own (hostClass), so that a chunk pins what it holds, and small
// enough that the last one wastes little.
const backupChunkSize = 64 << 20

// saveContents copies the ranges into a new backup, on the default stream,
// and returns once the copies have completed. Where it fails, it gives
// back what it took.
func saveContents(d *Device, ranges []span) (*backup, error) {
	bk := &backup{ranges: ranges}
	for _, r := range ranges {
		bk.bytes += r.size
	}
	for left := bk.bytes; left > 0; {
		c, err := newBackupChunk(d, min(left, backupChunkSize))
		if err != nil {
			return nil, errors.Join(err, bk.free())
		}
		bk.chunks = append(bk.chunks, c)
		left -= c.size
	}
	if err := bk.copy(d, true, nil); err != nil {
		return nil, errors.Join(prefixed.Wrap("gpu", err, "copying %s to host memory to sleep", units.FormatBytes(bk.bytes)), bk.free())
	}
	return bk, nil
}

// newBackupChunk returns a chunk of size bytes.
func newBackupChunk(d *Device, size int64) (backupChunk, error) {
	if d.host.drv == nil {
		return backupChunk{mem: make([]byte, size), size: size}, nil
	}
	b, err := d.host.get(size)
	if err != nil {
		return backupChunk{}, prefixed.Wrap("gpu", err, "page-locked memory for %s of contents", units.FormatBytes(size))
	}
	return backupChunk{b: b, size: size}, nil
}

// restore copies the backup back where it was taken from, into the ranges
// only (sorted by address: what the scope's buffers hold of the pages
// mapped at Wake), on the default stream, and returns once the copies have
// completed. Memory freed while the scope slept (a Free, a scope inside it
// that ended) is not copied into: what it held is nobody's, and a page
// that held nothing else was given back asleep and is not mapped again.
func (bk *backup) restore(d *Device, only []span) error {
	if err := bk.copy(d, false, only); err != nil {
		return prefixed.Wrap("gpu", err, "copying %s back from host memory", units.FormatBytes(bk.bytes))
	}
	return nil
}

// copy copies every range to the chunks (save) or back, in order, and
// waits for the copies; where only is not nil, only the parts of the
// ranges that lie in it.
func (bk *backup) copy(d *Device, save bool, only []span) error {
	ci, off := 0, int64(0) // the chunk and where in it the next byte goes
	for _, r := range bk.ranges {
		for done := int64(0); done < r.size; {
			c := bk.chunks[ci]
			n := min(r.size-done, c.size-off)
			piece := span{r.ptr + uintptr(done), n}
			for _, p := range clip(piece, only) {
				if err := bk.copyPiece(d, c, off+int64(p.ptr-piece.ptr), p, save); err != nil {
					return errors.Join(err, d.drv.Synchronize(0))
				}
			}
			done, off = done+n, off+n
			if off == c.size {
				ci, off = ci+1, 0
			}
		}
	}
	return d.drv.Synchronize(0)
}

// copyPiece queues the copy of the device memory p to chunk c at off
// (save), or back.
func (bk *backup) copyPiece(d *Device, c backupChunk, off int64, p span, save bool) error {
	pinned, _ := d.drv.(driver.HostAllocator)
	switch {
	case c.b != nil && save:
		return pinned.CopyDtoHAsync(unsafe.Add(c.b.p, off), p.ptr, p.size, 0)
	case c.b != nil:
		return pinned.CopyHtoDAsync(p.ptr, unsafe.Add(c.b.p, off), p.size, 0)
	case save:
		return d.drv.CopyDtoH(c.mem[off:off+p.size], p.ptr, 0)
	}
	return d.drv.CopyHtoD(p.ptr, c.mem[off:off+p.size], 0)
}

// clip returns the parts of s that lie in the ranges of in, by address
// (in sorted by address); in nil: s whole.
func clip(s span, in []span) []span {
	if in == nil {
		return []span{s}
	}
	var out []span
	end := s.ptr + uintptr(s.size)
	for _, r := range in {
		lo, hi := max(s.ptr, r.ptr), min(end, r.ptr+uintptr(r.size))
		if lo < hi {
			out = append(out, span{lo, int64(hi - lo)})
		}
	}
	return out
}

// free gives the chunks back to the device's cache of page-locked memory.
// No copy uses them: copy waited for its copies.
func (bk *backup) free() error {
	var errs []error
	for _, c := range bk.chunks {
		if c.b != nil {
			errs = append(errs, c.b.cache.put(c.b, nil))
		}
	}
	bk.chunks = nil
	return errors.Join(errs...)
}
