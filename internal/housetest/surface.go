package housetest

import (
	"errors"
	"go/ast"
	"go/build"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
)

// MaxPublicDeclarations is the most exported declarations the public
// packages may hold together (see PublicDeclarations). A new name makes
// room for itself: a name that says less goes.
const MaxPublicDeclarations = 259

// PublicDeclarations returns, for each public package under root (all but
// internal/, cmd/, examples/, testdata and hidden folders), by its folder
// relative to root, how many exported declarations `go doc -all` prints
// for it in a default build: each func, type and method, and each const or
// var declaration, a parenthesized group counting once. Files that use cgo
// count as the others do.
func PublicDeclarations(root string) (map[string]int, error) {
	out := map[string]int{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || slices.Contains([]string{"internal", "testdata", "cmd", "examples"}, name)) {
			return filepath.SkipDir
		}
		n, err := exportedDeclarations(path)
		var noGo *build.NoGoError
		if errors.As(err, &noGo) {
			return nil // a folder of folders, or of tests only
		}
		if err == nil && n > 0 {
			out[filepath.ToSlash(rel)] = n
		}
		return err
	})
	return out, err
}

// exportedDeclarations counts what go doc -all prints for the package in dir.
func exportedDeclarations(dir string) (int, error) {
	pkg, err := build.ImportDir(dir, 0)
	if err != nil {
		return 0, err
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range slices.Concat(pkg.GoFiles, pkg.CgoFiles) { // a cgo package's exports are as public
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			return 0, err
		}
		files = append(files, f)
	}
	p, err := doc.NewFromFiles(fset, files, pkg.ImportPath)
	if err != nil {
		return 0, err
	}
	n := len(p.Consts) + len(p.Vars) + len(p.Funcs)
	for _, t := range p.Types {
		n += 1 + len(t.Consts) + len(t.Vars) + len(t.Funcs) + len(t.Methods)
	}
	return n, nil
}
