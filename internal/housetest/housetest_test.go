package housetest_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/internal/housetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// moduleRoot is the folder of go.mod, two above this package's.
const moduleRoot = "../.."

func TestNoFunctionOutsideTestsIsLong(t *testing.T) {
	_, err := os.Stat(filepath.Join(moduleRoot, "go.mod"))
	require.NoError(t, err, "the module's root")
	long, err := housetest.LongFunctions(moduleRoot, housetest.MaxFunctionLines)
	require.NoError(t, err)
	assert.Empty(t, long, "split them into named steps")
}

func TestLongFunctionsFindsOneOverTheLimitAndSkipsTests(t *testing.T) {
	dir := t.TempDir()
	body := "package p\n\nfunc short() {\n}\n\nfunc long() {\n" + strings.Repeat("\t_ = 1\n", 5) + "}\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p.go"), []byte(body), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p_test.go"), []byte(strings.Replace(body, "long", "longTest", 1)), 0o600))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "testdata"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "testdata", "q.go"), []byte(body), 0o600))
	long, err := housetest.LongFunctions(dir, 6)
	require.NoError(t, err)
	assert.Equal(t, []string{"p.go:6: long spans 7 lines"}, long)
	long, err = housetest.LongFunctions(dir, 7)
	require.NoError(t, err)
	assert.Empty(t, long, "7 lines is within a limit of 7")
}

// TestInternalImportsNothingAboveIt holds the module-root internal/ at the
// bottom of the house: its packages import the standard library, other
// modules and each other, never a package above them, so no arrow runs back
// up (a driver handing its controls down to internal/, say).
func TestInternalImportsNothingAboveIt(t *testing.T) {
	const module = "github.com/gpuscope/gpuscope/"
	fset := token.NewFileSet()
	var up []string
	err := filepath.WalkDir(filepath.Join(moduleRoot, "internal"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(p, module) && !strings.HasPrefix(p, module+"internal/") {
				up = append(up, path+" imports "+p)
			}
		}
		return nil
	})
	require.NoError(t, err)
	assert.Empty(t, up)
}

// TestNoPackageLevelFunctionVariables finds, outside tests, package-level
// variables declared with a function type or a function literal: hooks
// that one package fills for another, invisible where they are called.
// Controls are passed explicitly (an argument, an option, a method).
func TestNoPackageLevelFunctionVariables(t *testing.T) {
	fset := token.NewFileSet()
	var found []string
	err := filepath.WalkDir(moduleRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != moduleRoot && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, v := range packageVars(f) {
			_, typed := v.Type.(*ast.FuncType)
			if typed || slices.ContainsFunc(v.Values, func(e ast.Expr) bool { _, lit := e.(*ast.FuncLit); return lit }) {
				found = append(found, fmt.Sprintf("%s: var %s", fset.Position(v.Pos()), v.Names[0].Name))
			}
		}
		return nil
	})
	require.NoError(t, err)
	assert.Empty(t, found)
}

// packageVars returns f's package-level variable declarations.
func packageVars(f *ast.File) []*ast.ValueSpec {
	var out []*ast.ValueSpec
	for _, decl := range f.Decls {
		if g, ok := decl.(*ast.GenDecl); ok && g.Tok == token.VAR {
			for _, s := range g.Specs {
				out = append(out, s.(*ast.ValueSpec))
			}
		}
	}
	return out
}
