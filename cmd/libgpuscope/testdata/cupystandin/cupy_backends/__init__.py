"""A stand-in of CuPy's cupy_backends, for testdata/cupystandin's cupy."""
