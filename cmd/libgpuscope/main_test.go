package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(removeLibrary{m})
}

// removeLibrary removes the libraries the tests built once they are done.
type removeLibrary struct{ m *testing.M }

func (r removeLibrary) Run() int {
	defer func() {
		for _, b := range []*built{&library, &cudaLibrary} {
			if b.dir != "" {
				_ = os.RemoveAll(b.dir)
			}
		}
	}()
	return r.m.Run()
}
