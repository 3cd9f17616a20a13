package handles_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/internal/handles"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestAddNumbersFromTheSharedCounter(t *testing.T) {
	streams, events := map[uintptr]string{0: "default"}, map[uintptr]int{}
	last := uintptr(1)
	assert.Equal(t, uintptr(2), handles.Add(streams, &last, "s"))
	assert.Equal(t, uintptr(3), handles.Add(events, &last, 7))
	assert.Equal(t, "s", streams[2])
	assert.Equal(t, 7, events[3])
}

func TestTakeRemovesOnceAndNeverTheDefault(t *testing.T) {
	m := map[uint64]string{0: "default", 5: "five"}
	v, ok := handles.Take(m, 5)
	assert.True(t, ok)
	assert.Equal(t, "five", v)
	_, ok = handles.Take(m, 5)
	assert.False(t, ok, "taken already")
	v, ok = handles.Take(m, 0)
	assert.False(t, ok, "the default object is never taken")
	assert.Equal(t, "", v)
	assert.Contains(t, m, uint64(0))
}
