// usecapi is a Go program that hands a scope to a C library in the context
// form, as a user of gpu/capi writes it: TestAProgramOfCapiLinksNoLibrary
// builds it and reads its symbols.
package main

import (
	"fmt"
	"os"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/gpu/capi"
)

func main() {
	dev, err := gpu.OpenHost()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer dev.Close()
	s, err := dev.NewScope()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer s.Close()
	a, err := capi.For(s)
	fmt.Println(a.Alloc != nil, err)
}
