package scope_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/pool"
	"github.com/gpuscope/gpuscope/scope"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(sim.Wrap(m))
}

func newTree(t testing.TB, opts ...pool.Option) *scope.Tree {
	t.Helper()
	p, err := pool.New(sim.New(0, 0), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, p.Close()) })
	return scope.NewTree(p, "sim", scope.TreeOptions{})
}
