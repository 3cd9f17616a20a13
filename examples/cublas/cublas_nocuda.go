//go:build !cuda

package main

import (
	"errors"
	"io"
)

// run fails: cuBLAS needs a GPU, which only a CUDA build opens.
func run(io.Writer) error {
	return errors.New("cuBLAS needs a CUDA build: go run -tags cuda ./examples/cublas on a machine with a GPU")
}
