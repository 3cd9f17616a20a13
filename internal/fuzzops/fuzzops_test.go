package fuzzops_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/internal/fuzzops"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEachChoiceTakesOneByte(t *testing.T) {
	p := fuzzops.New([]byte{7, 200, 3, 9}, 3)
	assert.Equal(t, 0, p.Next(1), "one choice takes no byte")
	assert.Equal(t, 1, p.Next(3), "7 mod 3")
	assert.Equal(t, 200, p.Next(1000), "a byte chooses among at most 256")
	assert.False(t, p.Done())
	assert.Equal(t, 2, p.Pos())
	assert.Equal(t, 3, p.Next(4))
	assert.True(t, p.Done(), "cut to 3 bytes")
	assert.Equal(t, 0, p.Next(4), "a spent input chooses 0")
}

func TestRandomIsTheSameForTheSameSeed(t *testing.T) {
	a := fuzzops.Random(1, 7, 300)
	assert.Len(t, a, 300)
	assert.Equal(t, a, fuzzops.Random(1, 7, 300))
	assert.NotEqual(t, a, fuzzops.Random(2, 7, 300))
}
