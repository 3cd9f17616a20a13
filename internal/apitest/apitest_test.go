package apitest_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/gpuscope/gpuscope/internal/apitest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestExportedListsWhatAnotherPackageCanName(t *testing.T) {
	got, err := apitest.Exported("testdata/sample")
	require.NoError(t, err)
	assert.Equal(t, []string{"const Limit", "func New", "method T.Do", "type Pair", "type T"}, got)
}

// fakeT records what Check reports.
type fakeT struct{ errs []string }

func (f *fakeT) Errorf(format string, args ...any) {
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}
func (f *fakeT) FailNow() {}

func TestCheckFailsOnANameAddedOrGone(t *testing.T) {
	ft := &fakeT{}
	apitest.Check(ft, "testdata/sample", []string{"type T", "func New", "method T.Do", "type Pair", "const Limit"})
	assert.Empty(t, ft.errs, "the same names, in another order")

	ft = &fakeT{}
	apitest.Check(ft, "testdata/sample", []string{"const Limit", "func New", "type Pair", "type T"})
	require.Len(t, ft.errs, 1)
	assert.Contains(t, ft.errs[0], "method T.Do", "a name the list lacks")

	ft = &fakeT{}
	apitest.Check(ft, "testdata/sample", []string{"const Limit", "func New", "method T.Do", "type Pair", "type T", "func Removed"})
	require.Len(t, ft.errs, 1)
	assert.Contains(t, ft.errs[0], "func Removed", "a name the package lacks")
}

func TestFieldsListsTheExportedFieldsOfStructs(t *testing.T) {
	names := []string{"const Limit", "func New", "method T.Do", "type Pair", "type T"}
	fields := []string{"field Pair.Left", "field Pair.Right", "field Pair.T", "field T.Name"}
	got, err := apitest.Exported("testdata/sample", apitest.Fields())
	require.NoError(t, err)
	assert.Equal(t, []string{
		"const Limit", "field Pair.Left", "field Pair.Right", "field Pair.T", "field T.Name",
		"func New", "method T.Do", "type Pair", "type T",
	}, got)

	ft := &fakeT{}
	apitest.Check(ft, "testdata/sample", slices.Concat(names, fields), apitest.Fields())
	assert.Empty(t, ft.errs, "the names and the fields")

	ft = &fakeT{}
	apitest.Check(ft, "testdata/sample", slices.Concat(names, fields[:3]), apitest.Fields())
	require.Len(t, ft.errs, 1)
	assert.Contains(t, ft.errs[0], "field T.Name", "a field the list lacks")

	ft = &fakeT{}
	apitest.Check(ft, "testdata/sample", slices.Concat(names, fields))
	require.Len(t, ft.errs, 1)
	assert.Contains(t, ft.errs[0], "field T.Name", "fields listed where they are not asked for")
}
