package closing_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/internal/closing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestOnceClosesAndTakesOnlyOnce(t *testing.T) {
	var mu sync.Mutex
	closed := false
	made := map[int]string{1: "stream"}
	var taken map[int]string
	take := func() { taken, made = made, map[int]string{} }

	assert.True(t, closing.Once(&mu, &closed, take), "the first call closes")
	assert.True(t, closed)
	assert.Equal(t, map[int]string{1: "stream"}, taken)
	assert.Empty(t, made)

	taken = nil
	assert.False(t, closing.Once(&mu, &closed, take), "a second call finds it closed")
	assert.Nil(t, taken, "and takes nothing")
}

func TestOnceTakesUnderTheLock(t *testing.T) {
	var mu sync.Mutex
	closed := false
	closing.Once(&mu, &closed, func() {
		assert.False(t, mu.TryLock(), "take runs with the lock held")
	})
	assert.True(t, mu.TryLock(), "and Once lets it go")
}
