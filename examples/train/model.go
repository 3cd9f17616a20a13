package main

import (
	"errors"
	"math"
	"math/rand/v2"
)

// layer is one linear layer, y = x*w + b, with its Adam moments.
type layer struct {
	in, out int
	w, b    tensor // in x out, out
	mw, vw  tensor // Adam's moments of w
	mb, vb  tensor // and of b
}

// newLayers allocates the model in a (the long-lived scope), with He
// initialization, zero biases and zero moments.
func newLayers(a arena, sizes []int, r *rand.Rand, upload func(tensor, []float32) error) ([]layer, error) {
	ls := make([]layer, len(sizes)-1)
	for i := range ls {
		l := &ls[i]
		l.in, l.out = sizes[i], sizes[i+1]
		for _, p := range []*tensor{&l.w, &l.mw, &l.vw} {
			t, err := a.alloc(l.in * l.out)
			if err != nil {
				return nil, err
			}
			*p = t
		}
		for _, p := range []*tensor{&l.b, &l.mb, &l.vb} {
			t, err := a.alloc(l.out)
			if err != nil {
				return nil, err
			}
			*p = t
		}
		w := make([]float32, l.in*l.out)
		scale := math.Sqrt(2 / float64(l.in))
		for j := range w {
			w[j] = float32(r.NormFloat64() * scale)
		}
		zeros := make([]float32, l.in*l.out)
		err := errors.Join(upload(l.w, w), upload(l.mw, zeros), upload(l.vw, zeros),
			upload(l.b, zeros[:l.out]), upload(l.mb, zeros[:l.out]), upload(l.vb, zeros[:l.out]))
		if err != nil {
			return nil, err
		}
	}
	return ls, nil
}

// params lists the model's tensors, weights, biases and moments.
func params(ls []layer) []tensor {
	var ts []tensor
	for _, l := range ls {
		ts = append(ts, l.w, l.b, l.mw, l.vw, l.mb, l.vb)
	}
	return ts
}

// forward computes the activations of rows inputs x in a: acts[0] is x,
// acts[i+1] the output of layer i (ReLU on all but the last).
func forward(o ops, a arena, ls []layer, x tensor, rows int) ([]tensor, error) {
	acts := []tensor{x}
	for i, l := range ls {
		y, err := a.alloc(rows * l.out)
		if err != nil {
			return nil, err
		}
		if err := o.gemm(false, false, rows, l.out, l.in, acts[i], l.w, 0, y); err != nil {
			return nil, err
		}
		if err := o.biasAct(y, l.b, rows, l.out, i < len(ls)-1); err != nil {
			return nil, err
		}
		acts = append(acts, y)
	}
	return acts, nil
}

// grads are the gradients of one step, one pair per layer.
type grads struct{ w, b []tensor }

func newGrads(a arena, ls []layer) (grads, error) {
	var g grads
	for _, l := range ls {
		w, err := a.alloc(l.in * l.out)
		if err != nil {
			return g, err
		}
		b, err := a.alloc(l.out)
		if err != nil {
			return g, err
		}
		g.w, g.b = append(g.w, w), append(g.b, b)
	}
	return g, nil
}

// backward adds the gradients of the loss whose gradient at the logits is
// dz to g (beta 1), or sets them (beta 0), allocating in a.
func backward(o ops, a arena, ls []layer, acts []tensor, dz tensor, rows int, g grads, beta float32) error {
	d := dz
	for i := len(ls) - 1; i >= 0; i-- {
		l := ls[i]
		if err := o.gemm(true, false, l.in, l.out, rows, acts[i], d, beta, g.w[i]); err != nil {
			return err
		}
		if err := o.biasGrad(g.b[i], d, rows, l.out, beta); err != nil {
			return err
		}
		if i == 0 {
			break
		}
		dx, err := a.alloc(rows * l.in)
		if err != nil {
			return err
		}
		if err := o.gemm(false, true, rows, l.in, l.out, d, l.w, 0, dx); err != nil {
			return err
		}
		if err := o.reluGrad(dx, acts[i]); err != nil {
			return err
		}
		d = dx
	}
	return nil
}
