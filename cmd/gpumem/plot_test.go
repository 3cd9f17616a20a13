package main

import (
	"bytes"
	"cmp"
	"encoding/xml"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPlotWritesOneSelfContainedFile(t *testing.T) {
	dir := t.TempDir()
	html := filepath.Join(dir, "timeline.html")
	var out, errb bytes.Buffer
	require.NoError(t, run([]string{"plot", "-o", html, traceFile("resnet50_train")}, &out, &errb), errb.String())
	page, err := os.ReadFile(html)
	require.NoError(t, err)
	assert.Contains(t, string(page), "<svg", "the HTML holds the SVG")
	assert.Contains(t, string(page), "peak requested 5.37 GiB", "the trace's peak, from the README's 5,762,142,352 bytes")
	assert.Contains(t, string(page), "100 MiB and more", "stacked by size")
	assert.NotContains(t, string(page), "<script", "nothing to run")
	assert.NotContains(t, string(page), "src=", "nothing to fetch")
	assert.NotContains(t, string(page), "href=", "nothing to fetch")

	svg := filepath.Join(dir, "timeline.svg")
	require.NoError(t, run([]string{"plot", "-o", svg, traceFile("mlp_train")}, &out, &errb))
	data, err := os.ReadFile(svg)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(data), "<svg"))

	assert.Error(t, run([]string{"plot", "-o", filepath.Join(dir, "x.png"), traceFile("mlp_train")}, &out, &errb))
	assert.Error(t, run([]string{"plot", traceFile("mlp_train")}, &out, &errb), "-o is needed")
}

func TestPlotStacksByScopeWhereTheTraceHasIt(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "scoped.csv")
	require.NoError(t, os.WriteFile(trace, []byte(`action,addr,size,stream,scope
alloc,1,4096,0,weights
alloc,2,8192,0,batch
free_requested,2,8192,0,batch
alloc,3,1024,0,batch
`), 0o600))
	out := filepath.Join(dir, "p.svg")
	var o, e bytes.Buffer
	require.NoError(t, run([]string{"plot", "-o", out, trace}, &o, &e), e.String())
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Contains(t, string(data), ">weights<")
	assert.Contains(t, string(data), ">batch<")
	assert.NotContains(t, string(data), "under 1 MiB", "by scope, not by size")
}

// The largest scopes of a trace are found in memory bounded by what is
// live: a scope that ends is kept only while its peak could still count.
func TestTopScopesAreExactInBoundedMemory(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	sp := newScopePeaks(maxGroups)
	peak, now := map[string]int64{}, map[string]int64{}
	type alloc struct {
		g    string
		size int64
	}
	var live []alloc
	most := 0
	for i := range 20_000 {
		if len(live) > 0 && r.IntN(2) == 0 {
			k := r.IntN(len(live))
			a := live[k]
			live = append(live[:k], live[k+1:]...)
			sp.free(a.g, a.size)
			now[a.g] -= a.size
			continue
		}
		g := fmt.Sprint("scope", i%3000)
		size := int64(1 + r.IntN(1<<20))
		live = append(live, alloc{sp.alloc(g, size), size})
		now[g] += size
		peak[g] = max(peak[g], now[g])
		most = max(most, len(sp.peak))
	}
	names := make([]string, 0, len(peak))
	for g := range peak {
		names = append(names, g)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(peak[b], peak[a]), cmp.Compare(a, b)) })
	want := map[string]string{}
	for _, g := range names[:maxGroups-1] {
		want[g] = g
	}
	assert.Equal(t, want, sp.top())
	assert.Less(t, most, 3000/4, "scopes held: the live ones and a few more, not all 3000")
}

// Names from a trace are drawn as valid XML, however odd: control
// characters, bytes that are no UTF-8, markup, and a name of kilobytes.
func TestPlotDrawsAnyNameAsValidXML(t *testing.T) {
	odd := []string{"a\x01b", "bad\xff\xfeutf8", "<script>&", strings.Repeat("long", 2500)}
	var b strings.Builder
	b.WriteString("action,addr,size,stream,scope\n")
	for i, g := range odd {
		fmt.Fprintf(&b, "alloc,%d,4096,0,\"%s\"\n", i+1, g)
	}
	dir := t.TempDir()
	tr := filepath.Join(dir, "odd<&>.csv")
	require.NoError(t, os.WriteFile(tr, []byte(b.String()), 0o600))
	for _, out := range []string{"p.svg", "p.html"} {
		out = filepath.Join(dir, out)
		code, _, errb := gpumem(t, nil, "plot", "-o", out, tr)
		require.Zero(t, code, errb)
		data := mustRead(t, out)
		dec := xml.NewDecoder(bytes.NewReader(data))
		dec.Strict = !strings.HasSuffix(out, ".html") // the page's doctype is HTML's
		for {
			_, err := dec.Token()
			if err == io.EOF {
				break
			}
			require.NoError(t, err, out)
		}
		assert.Less(t, len(data), 64<<10, "a long name is cut")
	}
}

// plot says what it wrote, where a replay prints its figures: the file,
// the trace and the peaks the figure marks.
func TestPlotSaysWhatItWrote(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "mlp.svg")
	code, out, errb := gpumem(t, nil, "plot", "-o", svg, traceFile("mlp_train"))
	require.Zero(t, code, errb)
	assert.Empty(t, errb)
	assert.Equal(t, "wrote "+svg+": mlp_train.csv.gz, 329 events; peak requested 467.94 MiB, peak reserved 494.00 MiB\n", out)
	assert.FileExists(t, svg)
}
