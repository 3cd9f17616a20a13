//go:build cuda

package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
)

var ptxFile = flag.String("ptx", "", "PTX to test instead of the built-in kernels/train.ptx")

// pair is one tensor on the GPU and its twin on the host device.
type pair struct{ g, h tensor }

// TestKernelsMatchTheHostOps runs every kernel of kernels/train.cu and the
// host's gonum and Go loops on the same inputs, at sizes that are not
// multiples of the kernels' tiles, and compares the results.
func TestKernelsMatchTheHostOps(t *testing.T) {
	ptx := trainPTX
	if *ptxFile != "" {
		var err error
		ptx, err = os.ReadFile(*ptxFile)
		require.NoError(t, err)
	}
	gdev, err := gpu.Open(0)
	require.NoError(t, err)
	defer func() { require.NoError(t, gdev.Close()) }()
	hdev, err := gpu.OpenHost(gpu.HostMemory(64 << 20))
	require.NoError(t, err)
	defer func() { require.NoError(t, hdev.Close()) }()
	r := rand.New(rand.NewPCG(7, 7))
	ctx := context.Background()

	require.NoError(t, gpu.WithScope(ctx, gdev, func(top *gpu.Scope) error {
		st, err := top.NewStream()
		if err != nil {
			return err
		}
		k, err := loadKernels(top, st, ptx)
		if err != nil {
			return err
		}
		return gpu.WithScope(top.Context(), gdev, func(gs *gpu.Scope) error {
			return gpu.WithScope(ctx, hdev, func(hs *gpu.Scope) error {
				mk := func(n int, gen func(i int) float32) pair {
					v := make([]float32, n)
					for i := range v {
						v[i] = gen(i)
					}
					g, err := gpu.Alloc[float32](gs, n)
					require.NoError(t, err)
					h, err := gpu.Alloc[float32](hs, n)
					require.NoError(t, err)
					require.NoError(t, g.CopyFromHost(v))
					require.NoError(t, h.CopyFromHost(v))
					return pair{tensor{s: g, n: n}, tensor{s: h, n: n}}
				}
				normal := func(int) float32 { return float32(r.NormFloat64()) }
				same := func(what string, p pair) {
					require.NoError(t, st.Synchronize())
					g, h := make([]float32, p.g.n), make([]float32, p.h.n)
					require.NoError(t, p.g.s.CopyToHost(g))
					require.NoError(t, p.h.s.CopyToHost(h))
					for i := range g {
						if d := math.Abs(float64(g[i] - h[i])); d > 1e-4*(1+math.Abs(float64(h[i]))) || math.IsNaN(float64(g[i])) {
							t.Fatalf("%s: element %d is %v on the GPU, %v on the host", what, i, g[i], h[i])
						}
					}
				}
				host := hostOps{}
				const m, n, kk = 70, 130, 45
				for _, ta := range []bool{false, true} {
					for _, tb := range []bool{false, true} {
						for _, beta := range []float32{0, 0.5} {
							a, b, c := mk(m*kk, normal), mk(kk*n, normal), mk(m*n, normal)
							require.NoError(t, k.gemm(ta, tb, m, n, kk, a.g, b.g, beta, c.g))
							require.NoError(t, host.gemm(ta, tb, m, n, kk, a.h, b.h, beta, c.h))
							same(fmt.Sprintf("gemm ta=%v tb=%v beta=%v", ta, tb, beta), c)
						}
					}
				}
				const rows, cols = 37, 50
				for _, relu := range []bool{false, true} {
					y, b := mk(rows*cols, normal), mk(cols, normal)
					require.NoError(t, k.biasAct(y.g, b.g, rows, cols, relu))
					require.NoError(t, host.biasAct(y.h, b.h, rows, cols, relu))
					same(fmt.Sprintf("biasAct relu=%v", relu), y)
				}
				dy, y := mk(rows*cols, normal), mk(rows*cols, func(i int) float32 { return float32(max(0, r.NormFloat64())) })
				require.NoError(t, k.reluGrad(dy.g, y.g))
				require.NoError(t, host.reluGrad(dy.h, y.h))
				same("reluGrad", dy)
				for _, beta := range []float32{0, 1} {
					db := mk(cols, normal)
					require.NoError(t, k.biasGrad(db.g, dy.g, rows, cols, beta))
					require.NoError(t, host.biasGrad(db.h, dy.h, rows, cols, beta))
					same(fmt.Sprintf("biasGrad beta=%v", beta), db)
				}
				const classes = 10
				logits := mk(300*classes, func(int) float32 { return float32(3 * r.NormFloat64()) })
				labels := mk(300, func(int) float32 { return float32(r.IntN(classes)) })
				dz, loss, correct := mk(300*classes, normal), mk(300, normal), mk(300, normal)
				require.NoError(t, k.softmaxXent(logits.g, labels.g, dz.g, loss.g, correct.g, 300, classes, 0.25))
				require.NoError(t, host.softmaxXent(logits.h, labels.h, dz.h, loss.h, correct.h, 300, classes, 0.25))
				same("softmaxXent gradient", dz)
				same("softmaxXent loss", loss)
				same("softmaxXent correct", correct)
				w, g := mk(1000, normal), mk(1000, normal)
				mo, v := mk(1000, normal), mk(1000, func(int) float32 { return float32(r.Float64()) })
				h := adamStep{lr: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8, c1: 1 / (1 - 0.9*0.9), c2: 1 / (1 - 0.999*0.999)}
				require.NoError(t, k.adam(w.g, g.g, mo.g, v.g, h))
				require.NoError(t, host.adam(w.h, g.h, mo.h, v.h, h))
				same("adam w", w)
				same("adam m", mo)
				same("adam v", v)
				return nil
			})
		}, gpu.OnStream(st))
	}))
}
