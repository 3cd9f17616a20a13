package gputest_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
)

func TestVerifyTestMain(t *testing.T) {
	dev := openHost(t)
	var exit int
	var out bytes.Buffer
	verifyTestMain := func(m gputest.TestingM, opts ...gputest.Option) {
		gputest.VerifyTestMainTo(func(c int) { exit = c }, &out, m, opts...)
	}

	verifyTestMain(fakeM{code: 0}, fast())
	assert.Equal(t, 0, exit)

	var leaked *gpu.Scope
	verifyTestMain(fakeM{code: 0, run: func() {
		leaked, _ = dev.NewScope(gpu.Name("leaky"))
		_, _ = leaked.Alloc(10)
	}}, fast())
	assert.Equal(t, 1, exit)
	assert.Contains(t, out.String(), `[Scope "leaky"`)
	assert.Contains(t, out.String(), "allocated at:", "VerifyTestMain records stacks")
	require.NoError(t, leaked.Close())

	verifyTestMain(fakeM{code: 3}, fast())
	assert.Equal(t, 3, exit, "a failed run keeps its code")

	var cleaned int = -1
	verifyTestMain(fakeM{code: 0}, fast(), gputest.Cleanup(func(c int) { cleaned = c }))
	assert.Equal(t, 0, cleaned)
}
