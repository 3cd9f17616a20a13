package scope_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// api is every name package scope exports, with the methods and fields of
// its exported types: what package gpu and gputest call. A name added to
// the package is added here too, on purpose.
var api = []string{
	"AllocationInfo", "AllocationInfo.Ptr", "AllocationInfo.Ref", "AllocationInfo.Size", "AllocationInfo.Stack",
	"ErrClosed", "ErrFreed", "ErrNotKept", "ErrWrongScope",
	"Info", "Info.Allocations", "Info.ID", "Info.Name", "Info.Path", "Info.Resources", "Info.Scope", "Info.Stack", "Info.Stats",
	"LimitError", "LimitError.Error", "LimitError.Is", "LimitError.Limit", "LimitError.Live", "LimitError.Path", "LimitError.Requested",
	"NewTree",
	"Options", "Options.Limit", "Options.Name", "Options.Reserve", "Options.Stream", "Options.Wait", "Options.Zeroed",
	"Owned", "Owned.Disown",
	"Ref", "Ref.Ptr", "Ref.RecordUse", "Ref.UseAt", "Ref.UseOn",
	"Resource", "Resource.Bytes", "Resource.End", "Resource.Final", "Resource.Kind",
	"ResourceInfo", "ResourceInfo.Bytes", "ResourceInfo.ID", "ResourceInfo.Kind", "ResourceInfo.Stack",
	"Scope", "Scope.Alloc", "Scope.Allocations", "Scope.Children", "Scope.Close", "Scope.Closed", "Scope.Context",
	"Scope.End", "Scope.Err", "Scope.Free", "Scope.Info", "Scope.IsZero", "Scope.Keep", "Scope.OwnResource",
	"Scope.Path", "Scope.Stats", "Scope.WaitsForMemory", "Scope.Zeroed",
	"Stats", "Stats.Allocations", "Stats.Children", "Stats.Limit", "Stats.Live", "Stats.Peak", "Stats.Reserved",
	"Tree", "Tree.Close", "Tree.Device", "Tree.OnRelease", "Tree.Open", "Tree.RecordStacks", "Tree.Roots",
	"Tree.Scopes", "Tree.SetScrub",
}

func TestExportedNamesAreTheListedOnes(t *testing.T) {
	got := exportedNames(t, ".")
	want := append([]string(nil), api...)
	sort.Strings(want)
	assert.Equal(t, want, got, "an exported name was added or removed: update api if it is meant")
}

// exportedNames returns the exported names of the package in dir, from
// its non-test files: top-level names, and Type.Name for the methods and
// fields of exported types.
func exportedNames(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		names = append(names, fileExports(f)...)
	}
	sort.Strings(names)
	return names
}

// fileExports returns the exported names one file declares.
func fileExports(f *ast.File) []string {
	var names []string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil {
				names = append(names, d.Name.Name)
				continue
			}
			recv := d.Recv.List[0].Type
			if s, ok := recv.(*ast.StarExpr); ok {
				recv = s.X
			}
			if id, ok := recv.(*ast.Ident); ok && id.IsExported() {
				names = append(names, id.Name+"."+d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				names = append(names, specExports(s)...)
			}
		}
	}
	return names
}

// specExports returns the exported names of one type, const or var spec.
func specExports(s ast.Spec) []string {
	var names []string
	switch s := s.(type) {
	case *ast.ValueSpec:
		for _, n := range s.Names {
			if n.IsExported() {
				names = append(names, n.Name)
			}
		}
	case *ast.TypeSpec:
		if !s.Name.IsExported() {
			return nil
		}
		names = append(names, s.Name.Name)
		if st, ok := s.Type.(*ast.StructType); ok {
			for _, fld := range st.Fields.List {
				for _, n := range fld.Names {
					if n.IsExported() {
						names = append(names, s.Name.Name+"."+n.Name)
					}
				}
			}
		}
	}
	return names
}
