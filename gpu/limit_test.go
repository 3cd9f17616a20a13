package gpu_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
)

func TestLimitsCountAgainstEveryAncestor(t *testing.T) {
	dev := testDevice(t, 0)
	err := gpu.WithScope(context.Background(), dev, func(outer *gpu.Scope) error {
		_, err := outer.Alloc(1000) // takes 1024
		require.NoError(t, err)
		return gpu.WithScope(outer.Context(), dev, func(in *gpu.Scope) error {
			_, err := in.Alloc(1500) // 1536
			require.NoError(t, err)
			_, err = in.Alloc(1000)
			require.ErrorIs(t, err, gpu.ErrOutOfMemory)
			var le *gpu.LimitError
			require.ErrorAs(t, err, &le)
			assert.Equal(t, "outer", le.Path, "the outer limit refused it")
			assert.Equal(t, int64(2560), le.Live)
			_, err = in.Alloc(512)
			assert.NoError(t, err, "exactly at the limit is allowed")
			return nil
		}, gpu.Limit(1<<20))
	}, gpu.Limit(3072), gpu.Name("outer"))
	require.NoError(t, err)
}

func TestLimitsCountWhatTheDeviceGives(t *testing.T) {
	dev := testDevice(t, 0)
	err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		n := 0
		for ; n < 4096; n++ {
			if _, err := s.Alloc(1); err != nil {
				require.ErrorIs(t, err, gpu.ErrOutOfMemory)
				break
			}
		}
		assert.Equal(t, 8, n, "a byte takes 512 bytes of the device: 8 fit in 4096")
		return nil
	}, gpu.Limit(4096))
	require.NoError(t, err)
}

func TestChildReservationsCountAgainstAncestorLimits(t *testing.T) {
	dev := testDevice(t, 0)
	err := gpu.WithScope(context.Background(), dev, func(parent *gpu.Scope) error {
		for i := range 6 {
			err := gpu.WithScope(parent.Context(), dev, func(*gpu.Scope) error {
				assert.Equal(t, int64(32<<20), parent.Stats().Live, "child %d's reservation is the parent's", i)
				return nil
			}, gpu.Reserve(32<<20))
			require.NoError(t, err, "one child at a time fits")
			assert.Zero(t, parent.Stats().Live, "child %d gave its reservation back", i)
		}
		// Six children, each inside the last, holding 32 MiB each at once.
		var open func(depth int) error
		open = func(depth int) error {
			if depth == 6 {
				return nil
			}
			return gpu.WithScope(parent.Context(), dev, func(*gpu.Scope) error { return open(depth + 1) }, gpu.Reserve(32<<20))
		}
		err := open(0)
		require.ErrorIs(t, err, gpu.ErrOutOfMemory, "six reservations of 32 MiB do not fit a limit of 100 MiB")
		var le *gpu.LimitError
		require.ErrorAs(t, err, &le)
		assert.Equal(t, "parent", le.Path)
		assert.Equal(t, int64(96<<20), parent.Stats().Peak, "three were held, the fourth refused")
		return nil
	}, gpu.Limit(100<<20), gpu.Name("parent"))
	require.NoError(t, err)
}

func TestPeakCountsOnlyAllocationsThatHeld(t *testing.T) {
	dev := openHost(t, gpu.HostMemory(64<<20))
	parent, err := dev.NewScope(gpu.Limit(1 << 20))
	require.NoError(t, err)
	defer parent.Close()
	require.NoError(t, gpu.WithScope(parent.Context(), dev, func(s *gpu.Scope) error {
		_, err := s.Alloc(2 << 20)
		require.ErrorIs(t, err, gpu.ErrOutOfMemory, "the parent's limit refuses it")
		_, err = s.Alloc(1 << 30)
		require.ErrorIs(t, err, gpu.ErrOutOfMemory, "the device refuses it")
		assert.Equal(t, gpu.ScopeStats{}, gpu.ScopeStats{Live: s.Stats().Live, Peak: s.Stats().Peak})
		return nil
	}))
	err = gpu.WithScope(parent.Context(), dev, func(*gpu.Scope) error { return nil }, gpu.Reserve(2<<20))
	require.ErrorIs(t, err, gpu.ErrOutOfMemory, "the parent's limit refuses the reservation")
	assert.Zero(t, parent.Stats().Peak, "no allocation held")

	b, err := parent.Alloc(512 << 10)
	require.NoError(t, err)
	require.NoError(t, parent.Free(b))
	assert.Equal(t, int64(512<<10), parent.Stats().Peak, "one that held counts")
}

func TestAScopeInsideAnotherDevicesScopeStillHasItsOwnDevicesParent(t *testing.T) {
	a, b := openHost(t), openHost(t)
	err := gpu.WithScope(context.Background(), a, func(outer *gpu.Scope) error {
		return gpu.WithScope(outer.Context(), b, func(other *gpu.Scope) error {
			return gpu.WithScope(other.Context(), a, func(inner *gpu.Scope) error {
				assert.Equal(t, "outer/inner", inner.Path(), "a child of the nearest scope of its device")
				_, err := inner.Alloc(2 << 20)
				assert.ErrorIs(t, err, gpu.ErrOutOfMemory, "the outer scope's limit holds")
				return nil
			}, gpu.Name("inner"))
		})
	}, gpu.Name("outer"), gpu.Limit(1<<20))
	require.NoError(t, err)
}

// What Limit's doc says: a scope's own reservation counts against its own
// limit, and an allocation its reservation serves is not charged again.
func TestAScopesOwnReservationCountsAgainstItsLimitOnce(t *testing.T) {
	dev := testDevice(t, 0)
	err := gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
		assert.Equal(t, int64(3<<20), s.Stats().Live, "the reservation is charged")
		_, err := s.Alloc(3 << 20)
		require.NoError(t, err)
		assert.Equal(t, int64(3<<20), s.Stats().Live, "served by the reservation: not charged again")
		_, err = s.Alloc(2 << 20)
		var le *gpu.LimitError
		require.ErrorAs(t, err, &le, "3 MiB reserved and 2 MiB more pass the 4 MiB limit")
		_, err = s.Alloc(1 << 20)
		assert.NoError(t, err, "exactly at the limit")
		return nil
	}, gpu.Reserve(3<<20), gpu.Limit(4<<20))
	require.NoError(t, err)
}

// A limit under which a scope could hold nothing is refused, and so is one
// of 0, each saying what would work.
func TestALimitThatCanHoldNothingIsRefused(t *testing.T) {
	dev := openHost(t)
	run := func(opts ...gpu.ScopeOption) error {
		return gpu.WithScope(context.Background(), dev, func(*gpu.Scope) error { return nil }, opts...)
	}
	for _, c := range []struct {
		limit int64
		msg   string
	}{
		{0, "gpu: invalid size: Limit(0): a limit must be positive; leave Limit out for none"},
		{-1, "gpu: invalid size: Limit(-1): a limit must be positive; leave Limit out for none"},
		{1, "gpu: invalid size: Limit(1): below 512 bytes, the least an allocation takes (the pool rounds each up to a multiple of 512), " +
			"so the scope could hold nothing; give at least 512"},
		{511, "gpu: invalid size: Limit(511): below 512 bytes"},
	} {
		err := run(gpu.Limit(c.limit))
		require.ErrorIs(t, err, gpu.ErrInvalidSize, "Limit(%d)", c.limit)
		assert.ErrorContains(t, err, c.msg)
	}
	assert.NoError(t, run(gpu.Limit(512)))
	assert.EqualError(t, run(gpu.Reserve(0)), "gpu: invalid size: Reserve(0): a reservation must be positive; leave Reserve out for none")
}
