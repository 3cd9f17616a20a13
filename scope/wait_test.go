package scope_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/scope"
)

// In a synctest bubble the clock moves only while every goroutine sleeps:
// a wait that polls with time.Sleep moves it, one woken by a signal does
// not.
func TestEndingWaitsForUsesAndChildrenWithoutPolling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := newTree(t)
		parent, err := tr.Open(context.Background(), scope.Scope{}, scope.Options{Name: "parent"})
		require.NoError(t, err)
		child, err := tr.Open(context.Background(), parent, scope.Options{Name: "child"})
		require.NoError(t, err)
		r, err := child.Alloc(4096)
		require.NoError(t, err)
		start := time.Now()

		inUse, release := make(chan struct{}), make(chan struct{})
		used := make(chan error)
		go func() {
			used <- r.Use(func(uintptr) error { close(inUse); <-release; return nil })
		}()
		<-inUse
		childEnded, parentEnded := make(chan error), make(chan error)
		go func() { childEnded <- child.Close() }() // waits for the Use
		synctest.Wait()
		go func() { parentEnded <- parent.Close() }() // waits for the child to leave
		synctest.Wait()
		select {
		case <-parentEnded:
			t.Fatal("the parent ended before its child had")
		default:
		}

		close(release)
		require.NoError(t, <-used)
		require.NoError(t, <-childEnded)
		require.NoError(t, <-parentEnded)
		assert.Zero(t, time.Since(start), "the waits were woken, not polled")
	})
}
