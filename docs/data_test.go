package docs_test

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docs/data holds what the docs cite now, one folder per run, each with a
// README that says the commit, the command and the machine. A run that a
// newer one supersedes leaves the tree (git keeps it); these tests hold
// every folder added later to the same rule.

// mention matches a path under docs/data written out in full: in a
// README, in code spans, in Go comments.
var mention = regexp.MustCompile("docs/data/[^\\s)\\]\"'`,;]+")

// dataCitations returns what README.md, docs/*.md and the Go files under
// root cite under docs/data, as slash paths from root: a file, a folder
// (everything under it) or a pattern with * (path.Match).
func dataCitations(root string) (map[string]bool, error) {
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	pages = append(pages, filepath.Join(root, "README.md"))
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() && rel != "." && (strings.HasPrefix(d.Name(), ".") || rel == "docs/data") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") {
			pages = append(pages, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	cited := map[string]bool{}
	for _, page := range pages {
		text, err := os.ReadFile(page)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		dir, _ := filepath.Rel(root, filepath.Dir(page))
		for _, m := range link.FindAllStringSubmatch(string(text), -1) {
			if !strings.Contains(m[1], "://") {
				cited[clean(path.Join(filepath.ToSlash(dir), m[1]))] = true
			}
		}
		for _, m := range mention.FindAllString(string(text), -1) {
			cited[clean(strings.TrimRight(m, ".:"))] = true
		}
	}
	return cited, nil
}

func clean(target string) string {
	target, _, _ = strings.Cut(target, "#")
	return strings.TrimSuffix(path.Clean(target), "/")
}

// uncitedData returns the files under root/docs/data that no citation
// covers. A run folder's README.md is covered when anything else in its
// folder is cited: it says where the cited files came from.
func uncitedData(root string, cited map[string]bool) ([]string, error) {
	covered := func(file string) bool {
		for c := range cited {
			if !strings.HasPrefix(c, "docs/data/") {
				// A link to docs/data or above (measurements.md's
				// [data/](data)) names no run: it covers nothing.
				continue
			}
			if c == file || strings.HasPrefix(file, c+"/") {
				return true
			}
			if ok, _ := path.Match(c, file); ok {
				return true
			}
		}
		return false
	}
	runCited := map[string]bool{}
	var files []string
	err := filepath.WalkDir(filepath.Join(root, "docs", "data"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		files = append(files, rel)
		if covered(rel) {
			runCited[run(rel)] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var uncited []string
	for _, f := range files {
		if covered(f) || (f == run(f)+"/README.md" && runCited[run(f)]) {
			continue
		}
		uncited = append(uncited, f)
	}
	sort.Strings(uncited)
	return uncited, nil
}

// run returns the run folder a file under docs/data belongs to.
func run(file string) string {
	parts := strings.SplitN(file, "/", 4)
	if len(parts) < 4 {
		return file
	}
	return strings.Join(parts[:3], "/")
}

func TestEveryDataFileIsCitedByADoc(t *testing.T) {
	cited, err := dataCitations("..")
	require.NoError(t, err)
	uncited, err := uncitedData("..", cited)
	require.NoError(t, err)
	for _, f := range uncited {
		t.Errorf("%s: no doc cites it; cite it, or remove it (git keeps it)", f)
	}
}

func TestEveryRunFolderSaysWhereItCameFrom(t *testing.T) {
	runs, err := os.ReadDir("data")
	require.NoError(t, err)
	for _, r := range runs {
		if !r.IsDir() {
			t.Errorf("docs/data/%s: a file outside a run folder", r.Name())
			continue
		}
		_, err := os.Stat(filepath.Join("data", r.Name(), "README.md"))
		assert.NoError(t, err, "docs/data/%s has a README (commit, command, machine)", r.Name())
	}
}

// The repository is code first: the measurements it keeps stay small, at
// most 120 files and 1.5 MB, read as 1,500,000 bytes (the stricter of
// 1.5e6 and 1.5 MiB).
const (
	maxDataFiles = 120
	maxDataBytes = 1_500_000
)

func TestTheDataStaysSmall(t *testing.T) {
	files, bytes := 0, int64(0)
	err := filepath.WalkDir("data", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		files++
		bytes += info.Size()
		return nil
	})
	require.NoError(t, err)
	assert.LessOrEqual(t, files, maxDataFiles, "files under docs/data")
	assert.LessOrEqual(t, bytes, int64(maxDataBytes), "bytes under docs/data")
}

func TestTheCitationCheckFindsWhatNoDocCites(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	}
	write("README.md", "figures in [a](docs/data/run-a/x.txt) and docs/data/run-b/\n")
	write("docs/page.md", "[curve](data/run-d/curve.jsonl#L2), [all](data/run-e/out_*.json)\n")
	write("pool/costs.go", "package pool\n\n// From docs/data/run-f/calls.txt.\n")
	for _, f := range []string{
		"run-a/README.md", "run-a/x.txt", "run-a/y.txt",
		"run-b/README.md", "run-b/deep/w.txt",
		"run-c/README.md",
		"run-d/README.md", "run-d/curve.jsonl",
		"run-e/README.md", "run-e/out_1.json", "run-e/in_1.json",
		"run-f/README.md", "run-f/calls.txt",
	} {
		write("docs/data/"+f, "x\n")
	}

	cited, err := dataCitations(root)
	require.NoError(t, err)
	uncited, err := uncitedData(root, cited)
	require.NoError(t, err)
	assert.Equal(t, []string{"docs/data/run-a/y.txt", "docs/data/run-c/README.md", "docs/data/run-e/in_1.json"}, uncited)
}
