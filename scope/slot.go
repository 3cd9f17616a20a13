package scope

import (
	"errors"
	"sync/atomic"

	"github.com/gpuscope/gpuscope/pool"
)

// An allocation's word (slot.word) holds, from the top, the generation
// of the slot's current use, its state, and the count of its holders
// (between acquire and leave: a WithPtr whose fn runs, a Ptr, a
// RecordUse): one atomic word, so that acquire checks all three at once.
const (
	live     uint64 = iota
	freed           // by Scope.Free
	released        // by the end of its scope
	evicted         // by the end of its scope, evicted (Scope.TryEvict)
	asleep          // its scope's domain is asleep (Scope.Sleep): live again at Wake

	genBits    = 48
	stateBits  = 3
	usersBits  = 64 - genBits - stateBits
	usersMask  = 1<<usersBits - 1
	stateMask  = 1<<stateBits - 1
	stateShift = usersBits
	genShift   = usersBits + stateBits
	genMask    = 1<<genBits - 1
)

func packWord(gen, state uint64) uint64 { return gen<<genShift | state<<stateShift }
func genOf(w uint64) uint64             { return w >> genShift }
func stateOf(w uint64) uint64           { return w >> stateShift & stateMask }

// nextGen returns the generation after g: 48 bits, never 0, which no Ref
// of a made allocation has.
func nextGen(g uint64) uint64 {
	if g = (g + 1) & genMask; g == 0 {
		g = 1
	}
	return g
}

// slot is one entry of a Tree's slot table: the memory of one
// allocation at a time. Slots are reused; a [Ref] names one use of one.
type slot struct {
	word  atomic.Uint64 // gen, state and holders; see packWord
	owner atomic.Pointer[node]
	tree  *Tree // set at the slot's first use; slots never change trees

	ptr        uintptr
	size       int64
	charged    int64          // size rounded as the pool rounds it: what the scopes were charged
	block      pool.Block     // when from the pool
	region     *pool.Region   // when from a reservation
	reservedIn *node          // the scope whose reservation holds it
	dom        *domain        // the sleepable domain whose pool holds it; nil: the tree's pool
	stream     atomic.Uintptr // the stream its owner orders work on: Keep changes it while WithPtr may read it
	touches    atomic.Bool    // its owner is evictable: a use records when its owner was last used
	stack      []uintptr

	link links[slot] // on the owner's list, guarded by the owner's mu
}

// clear forgets what the slot held, keeping its word (see recycle).
func (sl *slot) clear() {
	sl.ptr, sl.size, sl.charged, sl.block, sl.region, sl.reservedIn, sl.dom, sl.stack = 0, 0, 0, pool.Block{}, nil, nil, nil, nil
}

// Ref returns the name of the allocation the slot holds now. Called with
// the owner's mu held.
func (sl *slot) Ref() Ref {
	return Ref{slot: sl, gen: genOf(sl.word.Load()), ptr: sl.ptr}
}

// touch records a use of the allocation as its owner's latest (see
// Scope.LastUse). Called while the allocation is held.
func (sl *slot) touch() {
	if o := sl.owner.Load(); o != nil {
		o.lastUse.Store(sl.tree.clock.Add(1))
	}
}

// claim makes the allocation unusable, if nobody holds it, until unclaim
// or mark: acquire waits meanwhile, as it does when the holders' count is
// full. It reports whether the allocation was live and unheld.
func (sl *slot) claim() bool {
	w := sl.word.Load()
	return stateOf(w) == live && w&usersMask == 0 && sl.word.CompareAndSwap(w, w|usersMask)
}

// unclaim undoes claim, leaving the allocation live.
func (sl *slot) unclaim() { sl.word.Add(^uint64(usersMask - 1)) }

// leave ends a hold counted by acquire. The last one to leave an
// allocation that is no longer live wakes the release waiting for it.
func (sl *slot) leave() {
	if w := sl.word.Add(^uint64(0)); w&usersMask == 0 && stateOf(w) != live {
		sl.tree.useMu.Lock()
		sl.tree.useDone.Broadcast()
		sl.tree.useMu.Unlock()
	}
}

// mark moves the allocation from live to state to, keeping the count of
// holders, and reports whether it was live.
func (sl *slot) mark(to uint64) bool { return sl.markFrom(live, to) }

// markFrom moves the allocation from state from to state to, keeping the
// count of holders, and reports whether it was in state from.
func (sl *slot) markFrom(from, to uint64) bool {
	for {
		w := sl.word.Load()
		if stateOf(w) != from {
			return false
		}
		if sl.word.CompareAndSwap(w, w&^(stateMask<<stateShift)|to<<stateShift) {
			return true
		}
	}
}

// waitForHolder waits until no caller holds sl (between acquire and
// leave). Its state is no longer live, so that none comes.
func (t *Tree) waitForHolder(sl *slot) {
	if sl.word.Load()&usersMask != 0 {
		t.waitForLeave(sl)
	}
}

// waitForLeave is waitForHolder's wait, out of line.
func (t *Tree) waitForLeave(sl *slot) {
	t.useMu.Lock()
	for sl.word.Load()&usersMask != 0 {
		t.useDone.Wait() // the last holder to leave wakes it (see leave)
	}
	t.useMu.Unlock()
}

// releaseMemory returns the memory of a marked allocation. No new holder
// can come; it waits for those there to leave, which the contract says
// they do before the scope ends (a copy, a kernel launch). Memory of a
// sleepable domain goes back to the domain's pool, while no Sleep or Wake
// changes it, and is not scrubbed where the domain is asleep: nothing is
// mapped under it. A Free's (alone: not one of a scope's end, which
// gives back once for all, domain.giveBackAsleep) has the pool give back
// what it then holds free, where the domain is asleep.
func (sl *slot) releaseMemory(t *Tree, alone bool) error {
	t.waitForHolder(sl)
	if d := sl.dom; d != nil {
		return sl.releaseToDomain(t, d, alone)
	}
	return sl.releaseTo(t, t.pool, true)
}

// releaseToDomain is releaseMemory for an allocation of domain d, while
// no Sleep or Wake changes its memory.
func (sl *slot) releaseToDomain(t *Tree, d *domain, alone bool) error {
	d.memMu.RLock()
	defer d.memMu.RUnlock()
	asleep := d.asleep.Load()
	err := sl.releaseTo(t, d.pool, !asleep)
	if asleep && alone {
		err = errors.Join(err, d.pool.EmptyCache())
	}
	return err
}

// releaseTo returns the memory of a marked allocation that nobody holds
// to p, scrubbing it first where the tree scrubs and it is mapped.
func (sl *slot) releaseTo(t *Tree, p *pool.Pool, mapped bool) error {
	var scrubbed error
	if t.scrub != nil && mapped {
		stream := sl.stream.Load()
		if sl.region == nil {
			// Work on another stream that used the memory (its first
			// owner's, after a Keep; a RecordUse) is not ordered before
			// the zeros: wait for it, so that the zeros come last.
			scrubbed = p.WaitForUses(sl.block, stream)
		}
		scrubbed = errors.Join(scrubbed, t.scrub(sl.ptr, sl.size, stream))
	}
	var err error
	if sl.region != nil {
		// The last release from a closed scope's reservation returns it.
		err = errors.Join(scrubbed, sl.region.Free(sl.ptr), sl.reservedIn.releaseReservationIfEmpty())
	} else {
		err = errors.Join(scrubbed, p.Free(sl.block))
	}
	if t.onRelease != nil {
		t.onRelease()
	}
	return err
}
