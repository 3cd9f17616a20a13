// Package housetest checks, over the module's whole source, rules of the
// house that no one package's test can see: no function longer than a
// limit.
package housetest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
)

// MaxFunctionLines is the most lines a function outside tests may span,
// from its signature to its closing brace.
const MaxFunctionLines = 80

// LongFunctions returns, for each function declared in a Go file under
// root (tests, testdata and hidden folders aside, every build tag
// included) that spans more than max lines, "file:line: name spans N
// lines", the file relative to root.
func LongFunctions(root string, max int) ([]string, error) {
	var long []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, decl := range f.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Body != nil {
				start, end := fset.Position(fd.Pos()).Line, fset.Position(fd.End()).Line
				if n := end - start + 1; n > max {
					long = append(long, fmt.Sprintf("%s:%d: %s spans %d lines", rel, start, fd.Name.Name, n))
				}
			}
		}
		return nil
	})
	return long, err
}
