package main

import (
	"math"
	"math/rand/v2"
)

// teacher labels points: a point x of in standard normal coordinates is of
// the class c whose column of the fixed random matrix w gives the largest
// x·w[:,c]. The label is a function of the point, so a model can reach
// 100% accuracy, and chance is 1/classes: where between the two a model
// lands is easy to judge.
type teacher struct {
	in, classes int
	w           []float64 // in x classes
}

func newTeacher(in, classes int, seed uint64) *teacher {
	r := rand.New(rand.NewPCG(seed, 1))
	t := &teacher{in: in, classes: classes, w: make([]float64, in*classes)}
	for i := range t.w {
		t.w[i] = r.NormFloat64()
	}
	return t
}

// sample fills x (rows x in) with fresh points from r and y with their
// classes, as floats (what the kernels read).
func (t *teacher) sample(r *rand.Rand, x, y []float32) {
	for i := range y {
		row := x[i*t.in : (i+1)*t.in]
		for j := range row {
			row[j] = float32(r.NormFloat64())
		}
		best, arg := math.Inf(-1), 0
		for c := range t.classes {
			var s float64
			for j, v := range row {
				s += float64(v) * t.w[j*t.classes+c]
			}
			if s > best {
				best, arg = s, c
			}
		}
		y[i] = float32(arg)
	}
}
