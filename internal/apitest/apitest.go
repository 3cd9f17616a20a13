// Package apitest lists a package's exported API, so that a package's test
// can hold it against a list kept in the test and additions are deliberate.
package apitest

import (
	"go/ast"
	"go/build"
	"go/doc"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Option changes what Exported lists, and so what Check holds a package to.
type Option interface{ apply(*options) }

// options is what the Options ask for.
type options struct {
	fields bool // list the exported fields of exported struct types
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// Fields lists, besides, the exported fields of exported struct types as
// "field T.F", an embedded field under its type's name: for a package whose
// users fill in or read its structs. Fields of struct types nested in a
// field, and fields promoted from an embedded type, are not listed.
func Fields() Option { return optionFunc(func(o *options) { o.fields = true }) }

// Exported returns the exported names of the package in dir, as built by
// default (no build tags): "const X", "var X", "func X", "type T", and
// "method T.M" for the exported methods of exported types, sorted; opts
// add to them.
func Exported(dir string, opts ...Option) ([]string, error) {
	var o options
	for _, opt := range opts {
		opt.apply(&o)
	}
	pkg, err := build.ImportDir(dir, 0)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range pkg.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	p, err := doc.NewFromFiles(fset, files, pkg.ImportPath)
	if err != nil {
		return nil, err
	}
	var out []string
	values := func(kind string, vs []*doc.Value) {
		for _, v := range vs {
			for _, n := range v.Names {
				if token.IsExported(n) {
					out = append(out, kind+" "+n)
				}
			}
		}
	}
	funcs := func(fs []*doc.Func) {
		for _, f := range fs {
			out = append(out, "func "+f.Name)
		}
	}
	values("const", p.Consts)
	values("var", p.Vars)
	funcs(p.Funcs)
	for _, t := range p.Types {
		out = append(out, "type "+t.Name)
		values("const", t.Consts)
		values("var", t.Vars)
		funcs(t.Funcs)
		for _, m := range t.Methods {
			out = append(out, "method "+t.Name+"."+m.Name)
		}
		if o.fields {
			out = append(out, fields(t)...)
		}
	}
	slices.Sort(out)
	return out, nil
}

// fields returns "field T.F" for each exported field of t, where t is a
// struct type; an embedded field is named by its type.
func fields(t *doc.Type) []string {
	var out []string
	for _, spec := range t.Decl.Specs {
		ts, ok := spec.(*ast.TypeSpec)
		if !ok || ts.Name.Name != t.Name {
			continue
		}
		st, ok := ts.Type.(*ast.StructType)
		if !ok {
			continue
		}
		for _, f := range st.Fields.List {
			names := f.Names
			if len(names) == 0 {
				names = []*ast.Ident{embeddedName(f.Type)}
			}
			for _, n := range names {
				if n != nil && n.IsExported() {
					out = append(out, "field "+t.Name+"."+n.Name)
				}
			}
		}
	}
	return out
}

// embeddedName returns the name an embedded field of type typ goes by: its
// type's name without pointer, package or type arguments (T for *pkg.T[A]).
func embeddedName(typ ast.Expr) *ast.Ident {
	switch typ := typ.(type) {
	case *ast.Ident:
		return typ
	case *ast.SelectorExpr:
		return typ.Sel
	case *ast.StarExpr:
		return embeddedName(typ.X)
	case *ast.IndexExpr:
		return embeddedName(typ.X)
	case *ast.IndexListExpr:
		return embeddedName(typ.X)
	}
	return nil
}

// Check fails t unless the package in dir exports exactly want (in any
// order), the names as Exported with opts lists them. On a mismatch it says
// which names were added and which are gone.
func Check(t require.TestingT, dir string, want []string, opts ...Option) {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	got, err := Exported(dir, opts...)
	require.NoError(t, err)
	want = slices.Sorted(slices.Values(want))
	var added, gone []string
	for _, n := range got {
		if !slices.Contains(want, n) {
			added = append(added, n)
		}
	}
	for _, n := range want {
		if !slices.Contains(got, n) {
			gone = append(gone, n)
		}
	}
	assert.Empty(t, added, "exported but not in the test's list: add them there if users need them")
	assert.Empty(t, gone, "in the test's list but not exported")
}
