package pool

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/gpuscope/gpuscope/internal/prefixed"
	"github.com/gpuscope/gpuscope/internal/units"
)

// expander grows a pool's arenas by mapping pages, and gives pages back: an
// expandable arena is reservations of address space whose blocks are free,
// in use, or holes with nothing mapped, and its memory is handles, each
// mapped whole or held idle (docs/pool.md, "Growth, expandable"). Its
// fields below mu, and the arenas, are guarded by mu, the pool's lock.
// Growing is serialized by the pool's growMu, held across the driver calls;
// mu never is.
type expander struct {
	mapper PageMapper
	gran   int64 // the mapper's granularity
	vaSize int64 // address space each expandable segment reserves
	step   int64 // large arenas grow by multiples of this (GrowthStep), whole granules

	mu      *sync.Mutex
	arenas  *arenaSet
	ledger  *ledger
	streams *streams
	idle    []*handle // handles held but mapped nowhere
	stuck   []*handle // handles a failed growth could not unmap (see keepIdle)
	// Reservations, taken from their arenas, that the source would not
	// release: the next release of address space (EmptyCache, Close)
	// tries them again.
	unreleased []*segment
	// shortAt is the budget under which a growth last had to move memory
	// (see recut); 0 if none has.
	shortAt int64
}

// The address space an expandable segment reserves: reservesPerDevice
// times the device, or MaxSize/addressShare where the device's size is
// unknown.
const (
	reservesPerDevice = 2
	addressShare      = 64
)

// newExpander returns an expander over m for a device of total bytes
// (0: unknown), growing by multiples of step bytes.
func newExpander(m PageMapper, total, step int64) (*expander, error) {
	e := &expander{mapper: m, gran: m.Granularity()}
	if e.gran <= 0 || e.gran&(e.gran-1) != 0 {
		return nil, prefixed.Errorf("pool", "source granularity %d is not a power of two", e.gran)
	}
	// Address space is cheap and pages move: reserve more than the device
	// so that holes never leave too little contiguous room.
	va := total
	if va <= 0 || va > MaxSize {
		va = MaxSize / addressShare
	}
	e.vaSize = reservesPerDevice * e.granules(va) * e.gran
	e.step = e.granules(step) * e.gran
	return e, nil
}

// granules counts the granules of n bytes, rounded up.
func (e *expander) granules(n int64) int64 { return (n + e.gran - 1) / e.gran }

// grow maps memory into a so that it has a free block of r bytes. With
// squeeze it moves every handle it can before it creates one, as it does
// when memory is short. Called with growMu held.
func (e *expander) grow(a *arena, r int64, squeeze bool) error {
	e.unstick()
	if squeeze {
		if err := e.recut(a); err != nil {
			return err
		}
	}
	e.mu.Lock()
	h, at, k := e.bestHole(a, r)
	e.mu.Unlock()
	if h == nil {
		if err := e.reserve(a, r); err != nil {
			return err
		}
		e.mu.Lock()
		h, at, k = e.bestHole(a, r)
		e.mu.Unlock()
		if h == nil {
			return prefixed.Errorf("pool", "bug: no hole for %d bytes in a new reservation", r)
		}
	}
	if !a.key.small && !squeeze {
		at, k = e.roundToStep(h, at, k, r)
	}
	// Past the cap, apply fails before it creates anything, as the source
	// fails past the device's memory, and the caller squeezes: a cap is
	// usable to the same byte as a device of its size.
	e.mu.Lock()
	g := e.plan(a, h, at, k, r, squeeze)
	g.blockEnd = requestEnd(h, at, r)
	e.mu.Unlock()
	return e.apply(a, g)
}

// roundToStep rounds a growth of k granules at at in hole h, for a request
// of r bytes, up to whole steps, where the hole has room, and returns where
// it then starts and its granules. Where memory is plentiful (two steps are
// within what one handle may strand, see handleLimit), a request smaller
// than a step grows by enough to hold the next request of its size too,
// counting the free block the growth joins: requests of a size come in
// numbers (a layer's activations, an optimizer's buffers), and the next
// then fits without a growth of its own. PyTorch serves requests of 1-10
// MiB from 20 MiB segments for the same reason. Two whole steps for every
// such request, as before, left a stream's arena of mix a step above
// PyTorch expandable's (docs/measurements.md, "Unconstrained"). Where such
// a growth extends the free block before the hole, it ends on a line of a
// grid of torchPage (or a step, if larger) from the segment's start, as
// PyTorch's pages do: requests of sizes that differ, one after another (a
// model's weights as it loads), then reserve what those pages do, where
// steps from wherever the last growth ended left the arena up to a step
// more (GPT-2's weights, generate_kv_concat's seed 2).
func (e *expander) roundToStep(h *block, at uintptr, k, r int64) (uintptr, int64) {
	step := e.step / e.gran
	if step <= 1 {
		return at, k
	}
	e.mu.Lock()
	n := (k + step - 1) / step * step
	if limit, _ := e.handleLimit(r); r < e.step && 2*e.step <= limit {
		var joined int64 // the free block the growth extends
		if at == h.ptr && h.prev != nil && h.prev.state == stateFree {
			joined = h.prev.size
		} else if at != h.ptr && h.next != nil && h.next.state == stateFree {
			joined = h.next.size
		}
		want := max(k, e.granules(2*r-joined))
		n = (want + step - 1) / step * step
		if at == h.ptr {
			line, off := max(step, e.granules(torchPage)), int64(h.ptr-h.seg.ptr)/e.gran
			n = (off+want+line-1)/line*line - off
		}
	}
	e.mu.Unlock()
	if n*e.gran > h.size {
		return at, k
	}
	if at != h.ptr {
		at = h.end() - uintptr(n*e.gran)
	}
	return at, n
}

// torchPage is PyTorch's page for large blocks in its expandable segments
// (kLargeBuffer): the grid that roundToStep ends small requests' growths on.
const torchPage = 20 << 20

// growth is what one growth of an arena maps, and where it takes it from.
type growth struct {
	hole     *block
	fromEnd  bool      // map at the hole's end rather than its start
	handles  []*handle // idle handles taken
	moving   []*block  // blocks whose one handle moves (state moving)
	movingH  []*handle // the handle under each moving block
	create   int64     // bytes of new handles to create, 0 for none
	maxNew   int64     // the largest new handle (handleLimit)
	pages    bool      // new handles are cut as pages of maxNew, on the segment's grid
	byteSize int64     // bytes mapped in all
	blockEnd uintptr   // where the block of the request that needs the growth will end
}

// requestEnd returns where the block of r bytes that a growth at at in hole
// h makes room for will end: it starts at the free block before the hole,
// where the growth joins one, else at at.
func requestEnd(h *block, at uintptr, r int64) uintptr {
	start := at
	if at == h.ptr && h.prev != nil && h.prev.state == stateFree {
		start = h.prev.ptr
	}
	return start + uintptr(r)
}

// The shape of new handles. A handle is at most 1/budgetShare of the pool's
// budget (MaxReserved, else the device's memory): then one handle strands at
// most that share of the budget, and filling the budget creates at most
// budgetShare handles beyond one a growth, whose driver calls cost about
// what PyTorch's expandable segments spend mapping the budget in pages
// (docs/measurements.md has the times). A handle is never below minHandleGranules
// granules: on a small budget, handles of a page or two would multiply the
// driver calls and the moves for little memory.
//
// Large blocks are the exception. Where a handle is above its floor and
// under fineFrom bytes (a budget of 2.5 to 32 GiB, with 2 MiB granules), a
// growth for a request of at least torchPage bytes or one handle, whichever
// is less, creates handles of 1/fineShare of the budget (at least a
// granule), cut as pages on a grid of that size from the segment's start;
// on any budget, so does one for a request of fineFrom bytes and
// 1/largeShare of the budget or more. Such a block is freed whole, and what
// reuses its memory are the smaller blocks that come and go beside it (a
// language model's activations, keys and values in the memory its logits,
// its MLP's activations or its hidden states had): in a handle of its own
// size, every handle that a live block still touches strands its free
// rest, more than one of PyTorch's 20 MiB pages, and the next large block
// does not fit (docs/pool.md, "Under a memory cap"). Pages of 1/2048
// strand as little as PyTorch's pages on a budget of 40 GB, less below.
// GPT-2's training at 4-16 x 1,024 tokens (workload.GPT2TrainingAt) fits
// under PyTorch expandable's cap so: its hidden states (12-48 MiB) and its
// MLP's activations (48-192 MiB) are such blocks. On a budget of 32 GiB or
// more (an H100's or H200's memory, used without a cap) a handle is
// fineFrom or more, so only blocks of 1/largeShare of the budget grow in
// pages and a first pass there makes no more handles; under a cap that
// large, GPT-2's training at 20-32 x 1,024 tokens needs 3-4% of its peak
// more than PyTorch expandable (docs/measurements.md, "The smallest cap
// each side fits in"). Where a handle is at its floor (a budget under 2.5
// GiB) pages would be granules, a quarter of a handle, for blocks a few
// handles large, so only the second range holds there.
//
// Once a growth has had to move memory under the budget (memory is short,
// see recut), every new handle is such a page, until the budget changes.
const (
	budgetShare       = 256
	minHandleGranules = 4
	largeShare        = 64
	fineShare         = 2048
	fineFrom          = 128 << 20
)

// handleLimit is the largest handle a growth for a request of r bytes
// creates now, and whether its handles are pages (see largeShare). Called
// with mu held.
func (e *expander) handleLimit(r int64) (limit int64, pages bool) {
	budget := e.ledger.budget()
	if budget <= 0 {
		return MaxSize, false
	}
	limit = max(budget/budgetShare&^(e.gran-1), minHandleGranules*e.gran)
	if budget == e.shortAt || largeRequest(r, limit, budget, minHandleGranules*e.gran) {
		return e.pageSize(budget), true
	}
	return limit, false
}

// largeRequest reports whether a request of r bytes grows in pages under
// budget, where a handle is at most limit bytes and at least floor (see
// the shape of new handles, above).
func largeRequest(r, limit, budget, floor int64) bool {
	if limit > floor && limit < fineFrom && r >= min(limit, torchPage) {
		return true
	}
	return r >= fineFrom && r >= budget/largeShare
}

// pageSize is the size of a page under budget: 1/fineShare of it, in whole
// granules, at least one.
func (e *expander) pageSize(budget int64) int64 {
	return max(budget/fineShare&^(e.gran-1), e.gran)
}

// recut is the first step of a growth that moves memory (squeeze): memory
// is short under the budget, so from now on new handles are pages (see
// handleLimit), and the handles larger than a page that lie wholly under
// free blocks of a's stream go back to the source, leaving holes that
// growths fill with pages where requests need them. A handle cannot be
// given back in part: what a block placed later leaves free beside it in a
// large one is stranded, and at a cap near the peak, mix's phases, each
// placing its blocks in handles cut for the phase before, stranded more
// than PyTorch expandable's 20 MiB pages (docs/pool.md, "Under a memory
// cap"). Under a cap never reached no growth moves memory, so none of
// this happens there. Called with growMu held and mu not held.
func (e *expander) recut(a *arena) error {
	e.mu.Lock()
	budget := e.ledger.budget()
	if budget <= 0 {
		// No budget to take a share of: handles stay as large as growths.
		e.mu.Unlock()
		return nil
	}
	e.shortAt = budget
	page := e.pageSize(budget)
	cands, under := e.movable(a.key.stream, nil, nil)
	var moving []*block
	var hs []*handle
	for i, hd := range cands {
		if hd.size > page {
			moving = append(moving, e.arenas.of(under[i].seg).isolate(hd, under[i]))
			hs = append(hs, hd)
		}
	}
	e.mu.Unlock()
	if len(moving) == 0 {
		return nil
	}
	// The stream's work may still use the memory under its free blocks.
	if _, err := e.streams.wait(context.Background(), []uintptr{a.key.stream}); err != nil {
		e.mu.Lock()
		for _, mv := range moving {
			e.arenas.release(mv)
		}
		e.mu.Unlock()
		return err
	}
	unmapped, err := e.unmapMoving(moving, hs)
	return errors.Join(err, e.releaseHandles(unmapped))
}

// newHandleSizes cuts the bytes a growth creates, which start off bytes
// into the mapped range, itself rel bytes into its segment, into handles of
// at most g.maxNew. Pages are cut where the segment's offset is a multiple
// of g.maxNew; otherwise, where it cuts at all, one handle ends where the
// request's block ends (cut bytes into the range).
func (g *growth) newHandleSizes(off, cut, rel int64) []int64 {
	var sizes []int64
	for left := g.create; left > 0; {
		n := min(left, g.maxNew)
		switch {
		case g.pages:
			n = min(left, g.maxNew-(rel+off)%g.maxNew)
		case g.create > g.maxNew && cut > off && cut < off+n:
			n = cut - off
		}
		sizes = append(sizes, n)
		off += n
		left -= n
	}
	return sizes
}

// bestHole picks where to map memory for r bytes: the hole, the address in
// it and the granule count that need the least new memory, joining free
// blocks on either side. Called with mu held.
func (e *expander) bestHole(a *arena, r int64) (hole *block, at uintptr, granules int64) {
	best := int64(-1)
	consider := func(h *block, addr uintptr, k int64) {
		if best < 0 || k < best || k == best && h.size < hole.size {
			hole, at, granules, best = h, addr, k, k
		}
	}
	for _, h := range a.holes.blocks {
		var before, after int64
		if h.prev != nil && h.prev.state == stateFree {
			before = h.prev.size
		}
		if h.next != nil && h.next.state == stateFree {
			after = h.next.size
		}
		if need := r - before; need > 0 && need <= h.size {
			consider(h, h.ptr, e.granules(need))
		}
		if need := r - after; need > 0 && need <= h.size {
			k := e.granules(need)
			consider(h, h.end()-uintptr(k*e.gran), k)
		}
		if before+h.size+after >= r {
			consider(h, h.ptr, h.size/e.gran)
		}
	}
	return hole, at, granules
}

// plan chooses the handles that fill k granules at at in hole h, for a
// request of r bytes: idle ones, then, if move, handles moved from under
// free blocks, then new handles for the rest (handleLimit). The plan maps
// at least k and at most the hole's granules. Called with mu held; it takes the idle handles and marks the
// moving blocks, so the plan is the caller's to carry out or undo.
func (e *expander) plan(a *arena, h *block, at uintptr, k, r int64, move bool) *growth {
	g := &growth{hole: h, fromEnd: at != h.ptr}
	limit := h.size / e.gran
	var total int64 // granules planned
	// Idle handles first: mapping one costs no unmap.
	for total < k {
		i := pickHandle(e.idle, e.gran, k-total, limit-total)
		if i < 0 {
			break
		}
		hd := e.idle[i]
		e.idle = slices.Delete(e.idle, i, i+1)
		g.handles = append(g.handles, hd)
		total += hd.size / e.gran
	}
	if total < k && move {
		cands, under := e.movable(a.key.stream, h.prev, h.next)
		for total < k {
			i := pickHandle(cands, e.gran, k-total, limit-total)
			if i < 0 {
				break
			}
			g.moving = append(g.moving, e.arenas.of(under[i].seg).isolate(cands[i], under[i]))
			g.movingH = append(g.movingH, cands[i])
			total += cands[i].size / e.gran
			cands, under = slices.Delete(cands, i, i+1), slices.Delete(under, i, i+1)
		}
	}
	if total < k {
		g.create = (k - total) * e.gran
		g.maxNew, g.pages = e.handleLimit(r)
		total = k
	}
	g.byteSize = total * e.gran
	return g
}

// pickHandle returns the index in hs of the handle to take for need
// granules, at most limit: the smallest that covers need alone, else the
// largest that fits under limit; -1 if none fits.
func pickHandle(hs []*handle, gran, need, limit int64) int {
	cover, largest := -1, -1
	for i, h := range hs {
		n := h.size / gran
		if n > limit {
			continue
		}
		if n >= need && (cover < 0 || n < hs[cover].size/gran) {
			cover = i
		}
		if largest < 0 || n > hs[largest].size/gran {
			largest = i
		}
	}
	if cover >= 0 {
		return cover
	}
	return largest
}

// movable lists the handles lying wholly under free blocks of stream's
// expandable arenas, except skip1 and skip2, which the caller means to join,
// and for each the free block it lies under. Called with mu held.
func (e *expander) movable(stream uintptr, skip1, skip2 *block) (hs []*handle, under []*block) {
	for _, small := range []bool{false, true} {
		a := e.arenas.byKey[arenaKey{stream, small}]
		if a == nil || !a.expandable {
			continue
		}
		ahs, aunder := underFree(a, skip1, skip2)
		hs, under = append(hs, ahs...), append(under, aunder...)
	}
	return hs, under
}

// underFree lists the handles lying wholly under free blocks of a, except
// skip1 and skip2, and for each the free block it lies under. Called with
// mu held.
func underFree(a *arena, skip1, skip2 *block) (hs []*handle, under []*block) {
	for _, b := range a.free.blocks {
		if b == skip1 || b == skip2 {
			continue
		}
		for _, hd := range b.seg.mappedIn(b.ptr, b.end()) {
			hs = append(hs, hd)
			under = append(under, b)
		}
	}
	return hs, under
}

// unmapAll undoes the mappings of handles after a failed growth; a handle
// the source will not unmap keeps its address (see keepIdle). Called with
// mu not held.
func (e *expander) unmapAll(handles []*handle) {
	for _, hd := range handles {
		if err := e.mapper.Unmap(hd.ptr, hd.size); err == nil {
			hd.ptr = 0
		}
	}
}

// createHandle creates a handle of size bytes, within the limit.
func (e *expander) createHandle(size int64) (*handle, error) {
	if err := e.ledger.checkLimit(size); err != nil {
		return nil, err
	}
	id, err := e.mapper.Create(size)
	if err != nil {
		return nil, markOutOfMemory(prefixed.Wrap("pool", err, "creating %s", units.FormatBytes(size)))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ledger.counts.SourceAllocs++
	e.ledger.handles++
	e.ledger.addReserved(size)
	return &handle{id: id, size: size}, nil
}

// unmapMoving unmaps the handle under each moving block, turns the block
// into a hole and returns the handles unmapped. A block the source would not
// unmap goes back to its free set. Called with growMu held and mu not held.
func (e *expander) unmapMoving(moving []*block, hs []*handle) ([]*handle, error) {
	var errs []error
	var done []*handle
	for i, mv := range moving {
		hd := hs[i]
		err := e.mapper.Unmap(hd.ptr, hd.size)
		e.mu.Lock()
		a := e.arenas.of(mv.seg)
		if err != nil {
			a.release(mv)
			errs = append(errs, prefixed.Wrap("pool", err, "unmapping %s", units.FormatBytes(hd.size)))
		} else {
			mv.seg.removeMapping(hd)
			hd.ptr = 0
			a.makeHole(mv)
			done = append(done, hd)
		}
		e.mu.Unlock()
	}
	return done, errors.Join(errs...)
}

// apply makes the driver calls of growth plan g and records the result.
// On failure nothing is lost: handles it could not map are kept idle, and
// moving blocks it could not unmap are free again. Called with growMu held
// and mu not held.
func (e *expander) apply(a *arena, g *growth) error {
	handles, err := e.unmapForMove(a, g)
	if err != nil {
		return e.keepIdle(handles, err)
	}
	start := g.hole.ptr
	if g.fromEnd {
		start = g.hole.end() - uintptr(g.byteSize)
	}
	cut := int64(0)
	if g.blockEnd > start {
		cut = e.granules(int64(g.blockEnd-start)) * e.gran
	}
	if err := e.ledger.checkLimit(g.create); err != nil {
		return e.keepIdle(handles, err)
	}
	old := len(handles)
	for _, n := range g.newHandleSizes(g.byteSize-g.create, cut, int64(start-g.hole.seg.ptr)) {
		hd, err := e.createHandle(n)
		if err != nil {
			return e.undoCreate(handles, old, err)
		}
		handles = append(handles, hd)
	}
	if err := e.mapAt(start, g.byteSize, handles); err != nil {
		return e.undoCreate(handles, old, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	a.fillHole(g.hole, start, g.byteSize)
	for _, hd := range handles {
		g.hole.seg.addMapping(hd)
	}
	e.ledger.counts.Growths++
	e.ledger.counts.PagesMapped += g.byteSize / e.gran
	return nil
}

// unmapForMove unmaps the handles g moves, once the work on a's stream that
// may use them has completed, and returns them with the idle handles g
// takes: the handles to map. Where it fails the moving blocks it did not
// unmap are free again.
func (e *expander) unmapForMove(a *arena, g *growth) ([]*handle, error) {
	handles := g.handles
	if len(g.moving) == 0 {
		return handles, nil
	}
	if _, err := e.streams.wait(context.Background(), []uintptr{a.key.stream}); err != nil {
		e.mu.Lock()
		for _, mv := range g.moving {
			e.arenas.release(mv)
		}
		e.mu.Unlock()
		return handles, err
	}
	moved, err := e.unmapMoving(g.moving, g.movingH)
	handles = append(handles, moved...)
	e.mu.Lock()
	for _, hd := range moved {
		e.ledger.counts.PagesMoved += hd.size / e.gran
	}
	e.mu.Unlock()
	return handles, err
}

// mapAt maps handles one after another from start and sets access to the
// n bytes they cover. Where a call fails it undoes the mappings.
func (e *expander) mapAt(start uintptr, n int64, handles []*handle) error {
	at := start
	for i, hd := range handles {
		if err := e.mapper.Map(at, hd.size, hd.id); err != nil {
			e.unmapAll(handles[:i])
			return markOutOfMemory(prefixed.Wrap("pool", err, "mapping %s", units.FormatBytes(hd.size)))
		}
		hd.ptr = at
		at += uintptr(hd.size)
	}
	if err := e.mapper.SetAccess(start, n); err != nil {
		e.unmapAll(handles)
		return markOutOfMemory(prefixed.Wrap("pool", err, "setting access to %s", units.FormatBytes(n)))
	}
	return nil
}

// undoCreate ends a failed growth: the handles from created on, which it
// made, go back to the source, so that a failed allocation leaves nothing
// it created reserved; the others, held before, are kept idle. Returns err,
// joined with what releasing failed with.
func (e *expander) undoCreate(handles []*handle, created int, err error) error {
	var made []*handle
	for _, hd := range handles[created:] {
		if hd.ptr == 0 { // one still mapped (its unmap failed) is kept stuck
			made = append(made, hd)
		}
	}
	handles = slices.DeleteFunc(handles, func(hd *handle) bool { return slices.Contains(made, hd) })
	return errors.Join(e.keepIdle(handles, err), e.releaseHandles(made))
}

// keepIdle keeps handles idle after a failed growth and returns err. A
// handle still mapped (its unmap failed) is not idle: mapped where the
// arena sees a hole, it is kept apart, counted as reserved, and unmapped
// again before the next growth or release (see unstick).
func (e *expander) keepIdle(handles []*handle, err error) error {
	e.mu.Lock()
	for _, hd := range handles {
		if hd.ptr == 0 {
			e.idle = append(e.idle, hd)
		} else {
			e.stuck = append(e.stuck, hd)
		}
	}
	e.mu.Unlock()
	return err
}

// unstick unmaps again the handles a failed growth left mapped, before
// a growth or a release, and makes idle those the source now unmaps.
// Called with growMu held and mu not held.
func (e *expander) unstick() {
	e.mu.Lock()
	stuck := e.stuck
	e.stuck = nil
	e.mu.Unlock()
	if len(stuck) > 0 {
		e.unmapAll(stuck)
		_ = e.keepIdle(stuck, nil) // keeps those still mapped stuck
	}
}

// reserve adds a reservation of address space to a.
func (e *expander) reserve(a *arena, r int64) error {
	size := max(e.vaSize, e.granules(r)*e.gran)
	ptr, err := e.mapper.ReserveAddress(size)
	if err != nil {
		// Without address space the request cannot be served: to the
		// caller that is running out of memory, and the cache is released
		// and the reservation tried again as for any other.
		return sourceOOM{prefixed.Wrap("pool", err, "reserving %s of address space", units.FormatBytes(size))}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	a.addReservation(ptr, size)
	return nil
}

// isolateFree marks moving every handle lying wholly under a free block of
// a, to be released, and returns the moving blocks with their handles.
// Called with mu held.
func (e *expander) isolateFree(a *arena) (moving []*block, hs []*handle) {
	hs, under := underFree(a, nil, nil)
	for i, hd := range hs {
		moving = append(moving, a.isolate(hd, under[i]))
	}
	return moving, hs
}

// release unmaps the handles under the moving blocks and releases them,
// with every idle handle, to the source. A handle the source would not
// release stays idle. Called with growMu held and mu not held.
func (e *expander) release(moving []*block, hs []*handle) error {
	unmapped, err := e.unmapMoving(moving, hs)
	errs := []error{err}
	e.unstick()
	e.mu.Lock()
	idle := append(e.idle, unmapped...)
	e.idle = nil
	e.mu.Unlock()
	return errors.Join(append(errs, e.releaseHandles(idle))...)
}

// releaseHandles gives unmapped handles back to the source. From the first
// the source will not release on, they stay idle. Called with growMu held
// and mu not held.
func (e *expander) releaseHandles(hs []*handle) error {
	for i, hd := range hs {
		if err := e.mapper.Release(hd.id); err != nil {
			e.mu.Lock()
			e.idle = append(e.idle, hs[i:]...)
			e.mu.Unlock()
			return prefixed.Wrap("pool", err, "releasing %s", units.FormatBytes(hd.size))
		}
		e.mu.Lock()
		e.ledger.counts.SourceFrees++
		e.ledger.handles--
		e.ledger.addReserved(-hd.size)
		e.mu.Unlock()
	}
	return nil
}

// releaseAddress returns reservations of address space that hold nothing
// to the source. One the source will not release is kept, and tried again
// with the next: taken from its arena, it would otherwise be lost.
func (e *expander) releaseAddress(segs []*segment) error {
	e.mu.Lock()
	segs = append(segs, e.unreleased...)
	e.unreleased = nil
	e.mu.Unlock()
	var errs []error
	var kept []*segment
	for _, s := range segs {
		if err := e.mapper.ReleaseAddress(s.ptr, s.size); err != nil {
			errs = append(errs, prefixed.Wrap("pool", err, "releasing address space"))
			kept = append(kept, s)
		}
	}
	e.mu.Lock()
	e.unreleased = append(e.unreleased, kept...)
	e.mu.Unlock()
	return errors.Join(errs...)
}
