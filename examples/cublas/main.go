// Command cublas multiplies matrices with cuBLAS, whose workspace comes
// from a gpuscope scope (cublasSetWorkspace), and checks the products
// against the same computation in Go. The workspace, the matrices and the
// stream the GEMMs run on all belong to scopes: the Summary shows them by
// name while the GEMMs run, and nothing is left once the scopes end.
//
//	go run -tags cuda ./examples/cublas   # on a GPU
//
// cuBLAS is opened at run time (dlopen of libcublas.so, or the path in
// $CUBLAS_LIB), so the build needs nothing beyond what -tags cuda needs.
// Without CUDA the command says so and exits with status 1: cuBLAS has no
// host-memory twin.
package main

import "github.com/gpuscope/gpuscope/examples/internal/demo"

func main() { demo.Main("cublas", run) }
