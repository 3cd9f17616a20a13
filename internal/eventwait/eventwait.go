// Package eventwait waits for a driver's event until a context is done:
// the one loop that a pool's waits for other streams' work and a
// device's Sleep share.
package eventwait

import (
	"context"
	"time"
)

// Events are the two calls on an event that a wait makes: a driver's, or a
// pool's source's.
type Events interface {
	// EventDone reports, without blocking, whether ev has completed.
	EventDone(ev uintptr) (bool, error)
	// WaitEvent blocks until ev has completed.
	WaitEvent(ev uintptr) error
}

// The pauses between queries of an event while ctx can be done: short at
// first, for work about to complete, doubling up to maxPause.
const (
	firstPause = 20 * time.Microsecond
	maxPause   = 10 * time.Millisecond
)

// Wait waits for ev: with the blocking wait where ctx can never be done,
// else by querying it with a growing pause until it has completed or ctx
// is done, when it returns ctx's cause.
func Wait(ctx context.Context, src Events, ev uintptr) error {
	if ctx.Done() == nil {
		return src.WaitEvent(ev)
	}
	pause := firstPause
	for {
		done, err := src.EventDone(ev)
		if err != nil || done {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
		pause = min(2*pause, maxPause)
	}
}
