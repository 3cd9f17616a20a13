package gputest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/gputest"
)

func TestSteady(t *testing.T) {
	dev := openHost(t)
	keep, err := dev.NewScope(gpu.Name("cache"))
	require.NoError(t, err)
	defer keep.Close()

	t.Run("a loop that keeps one buffer per iteration fails", func(t *testing.T) {
		ft := &fakeT{}
		gputest.Steady(ft, 2, 5, func() error {
			_, err := keep.Alloc(1000)
			return err
		})
		require.Len(t, ft.errs, 1)
		assert.Contains(t, ft.errs[0], "grew in 5 of 5 iterations")
		assert.Contains(t, ft.errs[0], "+1000 B")
		assert.Contains(t, ft.errs[0], `Scope "cache" on device host:0 grew by 4.88 KiB`)
	})
	t.Run("a loop that frees passes", func(t *testing.T) {
		ft := &fakeT{}
		gputest.Steady(ft, 2, 5, func() error {
			return gpu.WithScope(context.Background(), dev, func(s *gpu.Scope) error {
				_, err := s.Alloc(1000)
				return err
			})
		})
		assert.Empty(t, ft.errs)
	})
	t.Run("an error stops it", func(t *testing.T) {
		ft := &fakeT{}
		gputest.Steady(ft, 0, 3, func() error { return errors.New("boom") })
		require.Len(t, ft.errs, 1)
		assert.Contains(t, ft.errs[0], "boom")
	})
	t.Run("bad arguments", func(t *testing.T) {
		ft := &fakeT{}
		gputest.Steady(ft, 0, 1, func() error { return nil })
		assert.Len(t, ft.errs, 1)
	})
}

func TestSteadySeesLeaksIntoReservationsAndKeeps(t *testing.T) {
	dev := openHost(t)
	t.Run("into a scope's own reservation", func(t *testing.T) {
		reserved, err := dev.NewScope(gpu.Name("reserved"), gpu.Reserve(1<<20))
		require.NoError(t, err)
		defer reserved.Close()
		ft := &fakeT{}
		gputest.Steady(ft, 1, 4, func() error {
			_, err := reserved.Alloc(1000) // from the reservation: the pool sees nothing new
			return err
		})
		require.Len(t, ft.errs, 1)
		assert.Contains(t, ft.errs[0], `Scope "reserved" on device host:0 grew by`)
	})
	t.Run("kept into a reserving parent", func(t *testing.T) {
		parent, err := dev.NewScope(gpu.Name("parent"), gpu.Reserve(1<<20))
		require.NoError(t, err)
		defer parent.Close()
		ft := &fakeT{}
		gputest.Steady(ft, 1, 4, func() error {
			return gpu.WithScope(parent.Context(), dev, func(c *gpu.Scope) error {
				b, err := c.Alloc(1000)
				if err != nil {
					return err
				}
				return c.Keep(b)
			})
		})
		require.Len(t, ft.errs, 1)
		assert.Contains(t, ft.errs[0], `Scope "parent" on device host:0 grew by`)
	})
}
