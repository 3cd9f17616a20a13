package eventwait_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/internal/eventwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// events is an event that completes after done queries, or never (-1).
type events struct {
	done, queries, waits int
}

func (e *events) EventDone(uintptr) (bool, error) {
	e.queries++
	return e.done >= 0 && e.queries > e.done, nil
}

func (e *events) WaitEvent(uintptr) error { e.waits++; return nil }

func TestAContextThatCanNeverBeDoneWaitsWithTheBlockingCall(t *testing.T) {
	e := &events{done: -1}
	assert.NoError(t, eventwait.Wait(context.Background(), e, 1))
	assert.Equal(t, 1, e.waits)
	assert.Zero(t, e.queries)
}

func TestAContextThatCanBeDoneQueriesUntilTheEventCompletes(t *testing.T) {
	e := &events{done: 3}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	assert.NoError(t, eventwait.Wait(ctx, e, 1))
	assert.Equal(t, 4, e.queries)
	assert.Zero(t, e.waits)
}

func TestAWaitEndsWithItsContext(t *testing.T) {
	e := &events{done: -1}
	cause := errors.New("given up")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	assert.ErrorIs(t, eventwait.Wait(ctx, e, 1), cause)
	assert.Equal(t, 1, e.queries, "asked once, then the context said stop")
}
