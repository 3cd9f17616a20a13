package main

import (
	"errors"
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// hostOps runs the step on the host device: the device's memory is the
// program's (Slice.UseHost), matrix products go through gonum's pure-Go
// BLAS and the rest are Go loops.
type hostOps struct{}

// use calls fn with the elements of ts, each held live while fn runs.
func use(ts []tensor, fn func(v [][]float32) error) error {
	vs := make([][]float32, 0, len(ts))
	var hold func(i int) error
	hold = func(i int) error {
		if i == len(ts) {
			return fn(vs)
		}
		if ts[i].raw != 0 {
			return errors.New("train: the host device holds no raw device addresses")
		}
		return ts[i].s.UseHost(func(v []float32) error {
			vs = append(vs, v)
			return hold(i + 1)
		})
	}
	return hold(0)
}

func general(v []float32, rows, cols int) blas32.General {
	return blas32.General{Rows: rows, Cols: cols, Stride: cols, Data: v[:rows*cols]}
}

func (hostOps) gemm(ta, tb bool, m, n, k int, a, b tensor, beta float32, c tensor) error {
	if err := errors.Join(checkShape("gemm a", a, m*k), checkShape("gemm b", b, k*n), checkShape("gemm c", c, m*n)); err != nil {
		return err
	}
	return use([]tensor{a, b, c}, func(v [][]float32) error {
		ga, ta2 := general(v[0], m, k), blas.NoTrans
		if ta {
			ga, ta2 = general(v[0], k, m), blas.Trans
		}
		gb, tb2 := general(v[1], k, n), blas.NoTrans
		if tb {
			gb, tb2 = general(v[1], n, k), blas.Trans
		}
		blas32.Gemm(ta2, tb2, 1, ga, gb, beta, general(v[2], m, n))
		return nil
	})
}

func (hostOps) biasAct(y, b tensor, rows, cols int, relu bool) error {
	return use([]tensor{y, b}, func(v [][]float32) error {
		y, b := v[0][:rows*cols], v[1][:cols]
		for i := 0; i < len(y); i += cols {
			row := y[i : i+cols]
			for j := range row {
				x := row[j] + b[j]
				if relu && x < 0 {
					x = 0
				}
				row[j] = x
			}
		}
		return nil
	})
}

func (hostOps) reluGrad(dy, y tensor) error {
	return use([]tensor{dy, y}, func(v [][]float32) error {
		for i, x := range v[1][:dy.n] {
			if x <= 0 {
				v[0][i] = 0
			}
		}
		return nil
	})
}

func (hostOps) biasGrad(db, dy tensor, rows, cols int, beta float32) error {
	return use([]tensor{db, dy}, func(v [][]float32) error {
		db, dy := v[0][:cols], v[1][:rows*cols]
		if beta == 0 {
			clear(db)
		} else {
			for j := range db {
				db[j] *= beta
			}
		}
		for i := 0; i < len(dy); i += cols {
			for j, x := range dy[i : i+cols] {
				db[j] += x
			}
		}
		return nil
	})
}

func (hostOps) softmaxXent(logits, labels, dz, loss, correct tensor, rows, cols int, scale float32) error {
	return use([]tensor{logits, labels, dz, loss, correct}, func(v [][]float32) error {
		for i := range rows {
			z, d := v[0][i*cols:(i+1)*cols], v[2][i*cols:(i+1)*cols]
			y := int(v[1][i])
			arg, mx := 0, z[0]
			for j, x := range z {
				if x > mx {
					arg, mx = j, x
				}
			}
			var sum float64
			for _, x := range z {
				sum += math.Exp(float64(x - mx))
			}
			v[3][i] = float32(math.Log(sum) - float64(z[y]-mx))
			v[4][i] = 0
			if arg == y {
				v[4][i] = 1
			}
			for j, x := range z {
				p := float32(math.Exp(float64(x-mx)) / sum)
				if j == y {
					p--
				}
				d[j] = scale * p
			}
		}
		return nil
	})
}

func (hostOps) adam(w, g, m, v tensor, h adamStep) error {
	return use([]tensor{w, g, m, v}, func(s [][]float32) error {
		w, g, m, v := s[0][:w.n], s[1][:w.n], s[2][:w.n], s[3][:w.n]
		for i, gi := range g {
			mi := h.beta1*m[i] + (1-h.beta1)*gi
			vi := h.beta2*v[i] + (1-h.beta2)*gi*gi
			m[i], v[i] = mi, vi
			w[i] -= h.lr * (mi * h.c1) / (float32(math.Sqrt(float64(vi*h.c2))) + h.eps)
		}
		return nil
	})
}
