// The C program of testdata/cthreads.c, its main renamed for Run.
#define main cthreads_main
#include "../../testdata/cthreads.c"
