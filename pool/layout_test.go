package pool_test

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fileUses parses the non-test files of the package in dir and returns,
// for each file, the set of other files whose names it uses: the
// package-level names (types, functions, variables, constants) and the
// methods and struct fields declared there.
func fileUses(t *testing.T, dir string) map[string]map[string]bool {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		// The source importer type-checks the standard library from
		// source through the go command: a machine that runs only the
		// compiled tests (the GPU machine) cannot, and the files it checks
		// are the same everywhere.
		t.Skip("checking which files use which needs the Go toolchain, to type-check imports")
	}
	fset, files := parseDir(t, dir)
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	pkg, err := conf.Check(files[0].Name.Name, fset, files, info)
	require.NoError(t, err)
	uses := map[string]map[string]bool{}
	for _, f := range files {
		uses[filepath.Base(fset.Position(f.Pos()).Filename)] = map[string]bool{}
	}
	for id, obj := range info.Uses {
		if obj.Pkg() != pkg || !declaredAtTop(pkg, obj) {
			continue
		}
		user := filepath.Base(fset.Position(id.Pos()).Filename)
		home := filepath.Base(fset.Position(obj.Pos()).Filename)
		if user != home {
			uses[user][home] = true
		}
	}
	return uses
}

// declaredAtTop reports whether obj is a package-level name, a method or
// a struct field: a name one file can take from another.
func declaredAtTop(pkg *types.Package, obj types.Object) bool {
	switch o := obj.(type) {
	case *types.Var:
		return o.IsField() || o.Parent() == pkg.Scope()
	case *types.Func:
		return true // functions and methods are declared only at the top
	default:
		return obj.Parent() == pkg.Scope()
	}
}

// layers orders the files so that each uses only files after it, and
// returns the files that use each other, directly or around a cycle,
// where there is no such order.
func layers(uses map[string]map[string]bool) (order, cycle []string) {
	const (
		unvisited = iota
		visiting
		done
	)
	state := map[string]int{}
	var stack []string
	var visit func(f string) bool
	visit = func(f string) bool {
		switch state[f] {
		case visiting:
			cycle = append(slices.Clone(stack[slices.Index(stack, f):]), f)
			return false
		case done:
			return true
		}
		state[f] = visiting
		stack = append(stack, f)
		deps := make([]string, 0, len(uses[f]))
		for d := range uses[f] {
			deps = append(deps, d)
		}
		sort.Strings(deps)
		for _, d := range deps {
			if !visit(d) {
				return false
			}
		}
		stack = stack[:len(stack)-1]
		state[f] = done
		order = append(order, f)
		return true
	}
	files := make([]string, 0, len(uses))
	for f := range uses {
		files = append(files, f)
	}
	sort.Strings(files)
	for _, f := range files {
		if !visit(f) {
			return nil, cycle
		}
	}
	slices.Reverse(order)
	return order, nil
}

func TestFilesStackInLayers(t *testing.T) {
	t.Run("no two of pool's files use each other's names", func(t *testing.T) {
		uses := fileUses(t, ".")
		order, cycle := layers(uses)
		require.Empty(t, cycle, "files that use each other's names, each the next one's: %s", strings.Join(cycle, " -> "))
		t.Logf("top to bottom: %s", strings.Join(order, ", "))
		for f, used := range uses {
			require.False(t, used["pool.go"], "%s uses the coordinator's names: pool.go must be the top", f)
		}
	})
	t.Run("the check finds files that use each other", func(t *testing.T) {
		_, cycle := layers(map[string]map[string]bool{
			"a.go": {"b.go": true},
			"b.go": {"c.go": true},
			"c.go": {"a.go": true},
		})
		require.Equal(t, []string{"a.go", "b.go", "c.go", "a.go"}, cycle)
	})
}

// parseDir parses the non-test files of the package in dir.
func parseDir(t *testing.T, dir string) (*token.FileSet, []*ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	var files []*ast.File
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		require.NoError(t, err)
		files = append(files, f)
	}
	return fset, files
}

// exported lists what pool exports: what its users call. A change here is
// a change of the API, to make on purpose.
var exported = []string{
	"Alignment", "Block", "Block.Ptr", "Block.Size", "Block.Stream",
	"BlockAllocated", "BlockCached", "BlockFree", "BlockInfo", "BlockMoving", "BlockPending", "BlockUnmapped",
	"DefaultGrowthStep", "ErrClosed", "ErrInvalidBlock", "ErrInvalidSize", "ErrOutOfMemory",
	"EventSource", "Expand", "ExpandAlways", "ExpandAuto", "ExpandNever", "Expansion",
	"GrowthStep",
	"MaxReserved", "MaxReservedFraction", "MaxSize", "MaxSplitSize", "New", "NewRegion",
	"OOMError", "OOMError.Error", "OOMError.Text", "OOMError.Unwrap", "Option", "PageMapper",
	"Pool", "Pool.Alloc", "Pool.AllocCharged", "Pool.AllocContext", "Pool.Charge", "Pool.Close", "Pool.EmptyCache",
	"Pool.Expandable", "Pool.Free", "Pool.MaxReserved", "Pool.Observe", "Pool.RecordUse",
	"Pool.ResetPeaks", "Pool.RetireStream", "Pool.SetMaxReserved", "Pool.SetMaxReservedFraction",
	"Pool.Snapshot", "Pool.Stats", "Pool.WaitForUses",
	"Region", "Region.Alloc", "Region.CloseIfEmpty", "Region.Free",
	"ReleaseThreshold", "Rounded", "SegmentInfo", "Shards", "Snapshot", "Source", "Stats",
}

func TestExportedNames(t *testing.T) {
	_, files := parseDir(t, ".")
	var got []string
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				name := d.Name.Name
				if d.Recv != nil {
					recv := d.Recv.List[0].Type
					if star, ok := recv.(*ast.StarExpr); ok {
						recv = star.X
					}
					if !recv.(*ast.Ident).IsExported() {
						continue // a method of an unexported type: no user can name it
					}
					name = recv.(*ast.Ident).Name + "." + name
				}
				got = append(got, name)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							got = append(got, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								got = append(got, n.Name)
							}
						}
					}
				}
			}
		}
	}
	sort.Strings(got)
	want := slices.Clone(exported)
	sort.Strings(want)
	require.Equal(t, want, got, "pool's exported names changed: update the list in this test if that was meant")
}
