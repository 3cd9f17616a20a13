package foreign

import (
	"bytes"
	"fmt"
	"path"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/internal/trace"
)

// Point 3 of issue 37, the timeline: a recording of the device
// (gpu.Device.StartRecording, which `gpumem plot` draws by scope) names
// the scope begun from C that each allocation of a library's belongs to,
// nested and on a library's stream, by the path the Snapshot shows and
// the name the Summary shows.
func TestARecordingNamesTheScopesBegunFromC(t *testing.T) {
	d := hostDevice(t)
	st, err := d.root.scope.NewStream() // a library's stream
	require.NoError(t, err)
	var recorded bytes.Buffer
	rec, err := d.gpu.StartRecording(&recorded)
	require.NoError(t, err)

	torch, err := Begin(0, 0, "torch")
	require.NoError(t, err)
	p, err := Alloc(0, torch, 4096, 0)
	require.NoError(t, err)
	q, err := Alloc(0, torch, 1<<20, st.ID())
	require.NoError(t, err)
	cupy, err := Begin(0, torch, "cupy")
	require.NoError(t, err)
	r, err := Alloc(0, cupy, 8192, 0)
	require.NoError(t, err)
	snap, err := d.gpu.Snapshot()
	require.NoError(t, err)
	summary := d.gpu.Summary()
	for _, x := range []uintptr{r, q, p} {
		require.NoError(t, Free(0, x, -1, 0))
	}
	require.NoError(t, End(cupy, false))
	require.NoError(t, End(torch, false))
	require.NoError(t, rec.Stop())

	events, err := trace.ReadAll(&recorded)
	require.NoError(t, err)
	var allocs []string
	for _, ev := range events {
		if ev.Action == trace.Alloc {
			allocs = append(allocs, ev.Scope)
		}
	}
	onStream := fmt.Sprintf("%s/torch/stream %#x", RootName, st.ID())
	require.Equal(t, []string{RootName + "/torch", onStream, RootName + "/torch/cupy"}, allocs, "%s", recorded.String())
	inSnapshot := map[string]bool{}
	for _, s := range snap.Scopes {
		inSnapshot[s.Path] = true
	}
	for _, p := range allocs {
		assert.True(t, inSnapshot[p], "%q is no scope of the snapshot", p)
		assert.Contains(t, summary, path.Base(p))
	}
}
