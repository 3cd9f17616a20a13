// Package cuda is the gpuscope driver for NVIDIA GPUs, on gorgonia.org/cu.
// It compiles only with the build tag cuda: importing gorgonia.org/cu runs
// cuInit in an init function and exits the process where there is no
// driver, so a default build never links it.
//
// Every driver call runs on a locked OS thread with the device's primary
// context made current first, so callers need not know which context is
// current where. Errors keep the CUDA result: errors.As finds an *Error.
//
// A binary built with this package runs only where libcuda.so.1 and a GPU
// are present; scripts/gpu-test.sh checks that before it runs the tests.
package cuda
