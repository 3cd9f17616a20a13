package pool

import (
	"context"
	"errors"
	"fmt"
)

// MaxReserved returns the most bytes the pool reserves; 0 means no cap.
func (p *Pool) MaxReserved() int64 { return p.limit.Load() }

// SetMaxReserved changes the cap on the bytes the pool reserves while it
// runs, as PyTorch's set_per_process_memory_fraction and CuPy's set_limit
// do; 0 removes the cap. Lowering the cap below what the pool reserves gives
// back at once what is cached (as [Pool.EmptyCache] does, waiting first for
// the work of other streams on freed blocks) and makes later growth fail
// with ErrOutOfMemory while it would pass the cap. Live blocks are never
// touched: the pool may stay above the cap until they are freed, and gives
// back what they held when EmptyCache or a later SetMaxReserved runs.
//
// A negative cap is an error that changes nothing; so is a call after
// Close. The error otherwise is what giving back memory failed with (the
// new cap holds all the same). Safe for concurrent use with allocations.
func (p *Pool) SetMaxReserved(bytes int64) error {
	if bytes < 0 {
		return fmt.Errorf("%w: SetMaxReserved(%d): the cap must not be negative (0 removes it)", ErrInvalidSize, bytes)
	}
	if p.closed.Load() {
		return ErrClosed
	}
	// Under growMu no growth is half done: each one after this sees the
	// new cap from its start.
	p.growMu.Lock()
	defer p.growMu.Unlock()
	p.mu.Lock()
	p.limit.Store(bytes)
	over := bytes > 0 && p.reserved > bytes
	p.mu.Unlock()
	if !over {
		return nil
	}
	return errors.Join(p.waitPending(context.Background()), p.releaseCachedLocked(context.Background()))
}

// SetMaxReservedFraction is [Pool.SetMaxReserved] with the cap given as a
// fraction in (0, 1] of the device's total memory, as the source reported it
// when the pool was made.
func (p *Pool) SetMaxReservedFraction(f float64) error {
	if !(f > 0 && f <= 1) {
		return fmt.Errorf("pool: SetMaxReservedFraction(%v): must be in (0, 1]", f)
	}
	if p.total <= 0 {
		return fmt.Errorf("pool: SetMaxReservedFraction needs the device's total memory, and the source reported %d", p.total)
	}
	return p.SetMaxReserved(max(int64(f*float64(p.total)), 1))
}
