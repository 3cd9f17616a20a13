package main

import (
	"fmt"

	"github.com/gpuscope/gpuscope/gpu"
)

// tensor is n float32 on the device: a slice owned by a scope, or, in the
// benchmark's baseline that allocates with the driver directly, a raw
// device address.
type tensor struct {
	s   gpu.Slice[float32]
	raw uintptr
	n   int
}

// arg is the tensor as a kernel argument: the slice (the launch checks it
// is live and records its use) or the raw address.
func (t tensor) arg() any {
	if t.raw != 0 {
		return t.raw
	}
	return t.s
}

// ops are the computations of a training step. Two implement them: the
// kernels of kernels/train.cu on a GPU, and gonum's BLAS plus Go loops on
// the host device. Matrices are row-major.
type ops interface {
	// gemm sets c = op(a) * op(b) + beta*c, op(a) m x k, op(b) k x n; a
	// is stored k x m where ta, b n x k where tb.
	gemm(ta, tb bool, m, n, k int, a, b tensor, beta float32, c tensor) error
	// biasAct adds b to each of the rows of y, then applies max(0, y) if relu.
	biasAct(y, b tensor, rows, cols int, relu bool) error
	// reluGrad zeroes dy where the ReLU's output y is 0.
	reluGrad(dy, y tensor) error
	// biasGrad sets db = beta*db + the column sums of dy.
	biasGrad(db, dy tensor, rows, cols int, beta float32) error
	// softmaxXent computes, for each row of logits and its label (a class
	// index as a float), the cross-entropy loss, whether the prediction is
	// right (1 or 0), and the loss's gradient times scale.
	softmaxXent(logits, labels, dz, loss, correct tensor, rows, cols int, scale float32) error
	// adam takes one Adam step on w with gradient g and moments m, v.
	adam(w, g, m, v tensor, h adamStep) error
}

// adamStep is Adam's hyper-parameters at one step; c1 and c2 undo the bias
// of the moments (1/(1-beta1^t), 1/(1-beta2^t)).
type adamStep struct {
	lr, beta1, beta2, eps, c1, c2 float32
}

// checkShape returns an error unless t holds at least n elements.
func checkShape(what string, t tensor, n int) error {
	if t.n < n {
		return fmt.Errorf("train: %s holds %d elements, needs %d", what, t.n, n)
	}
	return nil
}
