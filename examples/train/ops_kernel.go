package main

import (
	_ "embed"
	"errors"
	"fmt"

	"github.com/gpuscope/gpuscope/gpu"
)

// trainPTX is kernels/train.cu compiled by nvcc; see that file.
//
//go:embed kernels/train.ptx
var trainPTX []byte

// kernelOps runs the step with our kernels, queued on one stream.
type kernelOps struct {
	st *gpu.Stream
	fn map[string]*gpu.Function
}

// loadKernels loads the PTX in s (unloaded when s ends) and finds its
// kernels. On a device that runs no kernels (the host device) it fails
// with an error that errors.Is gpu.ErrNotSupported.
func loadKernels(s *gpu.Scope, st *gpu.Stream, ptx []byte) (*kernelOps, error) {
	mod, err := s.LoadModule(ptx)
	if err != nil {
		return nil, err
	}
	k := &kernelOps{st: st, fn: map[string]*gpu.Function{}}
	for _, name := range []string{"sgemm", "bias_act", "relu_grad", "bias_grad", "softmax_xent", "adam"} {
		if k.fn[name], err = mod.Function(name); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// launch1 launches name with one thread per element of n.
func (k *kernelOps) launch1(name string, n int, args ...any) error {
	const block = 256
	return k.fn[name].Launch(gpu.Dim{X: (n + block - 1) / block}, gpu.Dim{X: block}, 0, k.st, args...)
}

func flag01(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (k *kernelOps) gemm(ta, tb bool, m, n, kk int, a, b tensor, beta float32, c tensor) error {
	if err := errors.Join(checkShape("gemm a", a, m*kk), checkShape("gemm b", b, kk*n), checkShape("gemm c", c, m*n)); err != nil {
		return err
	}
	grid := gpu.Dim{X: (n + 63) / 64, Y: (m + 63) / 64}
	return k.fn["sgemm"].Launch(grid, gpu.Dim{X: 16, Y: 16}, 0, k.st,
		flag01(ta), flag01(tb), m, n, kk, a.arg(), b.arg(), beta, c.arg())
}

func (k *kernelOps) biasAct(y, b tensor, rows, cols int, relu bool) error {
	return k.launch1("bias_act", rows*cols, y.arg(), b.arg(), rows, cols, flag01(relu))
}

func (k *kernelOps) reluGrad(dy, y tensor) error {
	if dy.n != y.n {
		return fmt.Errorf("train: reluGrad of %d elements with %d outputs", dy.n, y.n)
	}
	return k.launch1("relu_grad", dy.n, dy.arg(), y.arg(), dy.n)
}

func (k *kernelOps) biasGrad(db, dy tensor, rows, cols int, beta float32) error {
	return k.launch1("bias_grad", cols, db.arg(), dy.arg(), rows, cols, beta)
}

func (k *kernelOps) softmaxXent(logits, labels, dz, loss, correct tensor, rows, cols int, scale float32) error {
	return k.launch1("softmax_xent", rows, logits.arg(), labels.arg(), dz.arg(), loss.arg(), correct.arg(), rows, cols, scale)
}

func (k *kernelOps) adam(w, g, m, v tensor, h adamStep) error {
	return k.launch1("adam", w.n, w.arg(), g.arg(), m.arg(), v.arg(), w.n, h.lr, h.beta1, h.beta2, h.eps, h.c1, h.c2)
}
