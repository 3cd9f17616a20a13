package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"html"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpuscope/gpuscope/internal/sim"
	"github.com/gpuscope/gpuscope/internal/trace"
	"github.com/gpuscope/gpuscope/internal/units"
	"github.com/gpuscope/gpuscope/pool"
)

const plotUsage = `usage: gpumem plot [flags] -o OUT.svg|OUT.html FILE
       gpumem plot [flags] -o OUT.svg|OUT.html -     (the trace on standard input)

plot draws a trace's memory over its events: the bytes requested, stacked
by size (or by scope, where the trace has that column), and what gpuscope's
pool reserves replaying it on a simulated device with its default
settings, both peaks marked. An .html page adds the figures as text.
`

// plotOptions are the flags of plot.
type plotOptions struct {
	out   string
	width int
}

func (o *plotOptions) declare(fs *flag.FlagSet) {
	fs.StringVar(&o.out, "o", "", "the `file` to write: .svg, or .html (the SVG in a page with the figures)")
	intVar(fs, &o.width, "width", 1200, 200, 20_000, "the plot's width in `pixels`")
}

// plotPasses is how many times plot reads a trace: to count its events,
// to find its largest scopes, and to draw it.
const plotPasses = 3

// run draws a trace: the bytes requested over its events, stacked by size
// class (or by scope, where the trace has the scope column), and the bytes
// gpuscope's pool reserves replaying it on the simulated source, with both
// peaks marked.
func (o *plotOptions) run(c *call) error {
	if len(c.args) != 1 {
		return usageErrorf("plot", "plot needs one trace FILE (or - for standard input), %s", gotArgs(c))
	}
	if o.out == "" {
		return usageErrorf("plot", "plot needs -o OUT.svg or OUT.html, before or after the trace FILE")
	}
	if !strings.HasSuffix(o.out, ".svg") && !strings.HasSuffix(o.out, ".html") {
		return usageErrorf("plot", "-o %q: want a .svg or .html file", o.out)
	}
	file := c.args[0]
	if err := overwrites("plot", "-o", o.out, file); err != nil {
		return err
	}
	in, err := openInput(c.ctx, file, c.stdin, plotPasses, c.stderr)
	if err != nil {
		return err
	}
	tl, err := traceTimeline(in.open, o.width)
	if err = errors.Join(err, in.close()); err != nil {
		return fmt.Errorf("%s: %w", inputName(file), err)
	}
	name := filepath.Base(file)
	if file == "-" {
		name = inputName(file)
	}
	page := tl.svg(name, o.width)
	if strings.HasSuffix(o.out, ".html") {
		page = tl.html(name, page)
	}
	if err := os.WriteFile(o.out, []byte(page), 0o644); err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.stdout, "wrote %s: %s, %d events; peak requested %s, peak reserved %s\n",
		o.out, name, tl.events, units.FormatBytes(tl.peakRequested), units.FormatBytes(tl.peakReserved))
	return err
}

// timeline is a trace drawn in columns: for each, the bytes requested by
// group and the bytes reserved, where the requested total was largest.
type timeline struct {
	groups        []string // the stacking order, largest first
	cols          []column
	events        int
	peakRequested int64
	peakReserved  int64
	peakAt        int // the event of the requested peak
}

type column struct {
	first, last int // events
	byGroup     map[string]int64
	total       int64
	reserved    int64
}

// maxGroups is the most groups a plot stacks: the scopes with the largest
// peaks, and the rest together as otherGroup. More could not be told
// apart, and each adds its own area to the SVG.
const maxGroups = 10

// otherGroup stacks the scopes past the largest maxGroups-1.
const otherGroup = "other scopes"

// sizeGroup names the size class of a request.
func sizeGroup(ev event) string {
	switch n := ev.Size; {
	case n < 1<<20:
		return "under 1 MiB"
	case n < 10<<20:
		return "1 to 10 MiB"
	case n < 100<<20:
		return "10 to 100 MiB"
	}
	return "100 MiB and more"
}

// traceTimeline replays the trace once on the simulated source (default
// pool settings, one shard: deterministic) and samples it into width
// columns. It reads the trace up to plotPasses times: to count the
// events, to find the largest scopes where it has scopes, then to draw.
func traceTimeline(open openEvents, width int) (*timeline, error) {
	n, allocs, byScope, err := countEvents(open)
	if err != nil {
		return nil, err
	}
	if allocs == 0 {
		return nil, errEmptyTrace
	}
	groupOf := sizeGroup
	if byScope {
		top, err := topScopes(open, maxGroups)
		if err != nil {
			return nil, err
		}
		groupOf = func(ev event) string {
			if g, ok := top[cmp.Or(ev.Scope, "(no scope)")]; ok {
				return g // the name the table holds: one copy, however many allocations
			}
			return otherGroup
		}
	}
	src := sim.New(0, 0)
	p, err := pool.New(src, pool.Shards(1))
	if err != nil {
		return nil, err
	}
	defer p.Close()
	evs, closeEvents, err := open()
	if err != nil {
		return nil, err
	}
	defer closeEvents()
	r := &plotReplay{p: p, groupOf: groupOf, live: map[uint64]plotBlock{}, byGroup: map[string]int64{}, bounds: newTraceBounds(), seen: map[string]bool{}}
	defer r.freeLive()
	tl := &timeline{events: n}
	per := max(1, (n+width-1)/width)
	var cur column
	for i := 0; ; {
		ev, err := evs.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		drawn, err := r.apply(ev)
		if err != nil {
			return nil, err
		}
		if !drawn {
			continue
		}
		tl.note(&cur, i, r.bounds.bytes, p.Stats().Reserved, r.byGroup)
		i++
		if i%per == 0 {
			tl.cols = append(tl.cols, cur)
			cur = column{}
		}
	}
	if cur.byGroup != nil {
		tl.cols = append(tl.cols, cur)
	}
	tl.sortGroups(r.seen)
	return tl, nil
}

// plotReplay is a trace played on a pool for a plot: the bytes requested
// now, in all and by group.
type plotReplay struct {
	p       *pool.Pool
	groupOf func(event) string
	live    map[uint64]plotBlock
	byGroup map[string]int64
	bounds  *traceBounds    // the bytes live, in bounds.bytes
	seen    map[string]bool // the groups that allocated
}

type plotBlock struct {
	b     pool.Block
	group string
}

// apply plays ev on the pool. It reports false for an event the plot does
// not draw: not an alloc or a free, or a free of an address never allocated.
func (r *plotReplay) apply(ev event) (bool, error) {
	switch ev.Action {
	case trace.Alloc:
		if _, ok := r.live[ev.Addr]; ok {
			return false, fmt.Errorf("trace line %d: alloc at %d, which is live", ev.Line, ev.Addr)
		}
		if err := r.bounds.alloc(ev); err != nil {
			return false, err
		}
		b, err := r.p.AllocContext(context.Background(), ev.Size, uintptr(ev.Stream))
		if err != nil {
			return false, fmt.Errorf("trace line %d: %w", ev.Line, err)
		}
		g := r.groupOf(ev)
		r.live[ev.Addr] = plotBlock{b, g}
		r.byGroup[g] += ev.Size
		r.seen[g] = true
		return true, nil
	case trace.Free:
		lb, ok := r.live[ev.Addr]
		if !ok {
			return false, nil
		}
		if err := r.p.Free(lb.b); err != nil {
			return false, fmt.Errorf("trace line %d: %w", ev.Line, err)
		}
		delete(r.live, ev.Addr)
		r.byGroup[lb.group] -= lb.b.Size()
		r.bounds.free(lb.b.Size())
		return true, nil
	}
	return false, nil
}

// freeLive frees what the trace left allocated.
func (r *plotReplay) freeLive() {
	for _, lb := range r.live {
		_ = r.p.Free(lb.b)
	}
}

// note records in cur, and in the peaks, the bytes requested and reserved
// after event i; a column keeps the groups of its largest request.
func (tl *timeline) note(cur *column, i int, requested, reserved int64, byGroup map[string]int64) {
	if requested > tl.peakRequested {
		tl.peakRequested, tl.peakAt = requested, i
	}
	tl.peakReserved = max(tl.peakReserved, reserved)
	if cur.byGroup == nil {
		*cur = column{first: i, byGroup: map[string]int64{}}
	}
	if requested >= cur.total {
		cur.total = requested
		clear(cur.byGroup)
		for g, v := range byGroup {
			cur.byGroup[g] = v
		}
	}
	cur.reserved = max(cur.reserved, reserved)
	cur.last = i
}

// sortGroups sets the stacking order: the groups seen, by their peak in
// any column, largest first.
func (tl *timeline) sortGroups(seen map[string]bool) {
	for g := range seen {
		tl.groups = append(tl.groups, g)
	}
	peak := map[string]int64{}
	for _, c := range tl.cols {
		for g, v := range c.byGroup {
			peak[g] = max(peak[g], v)
		}
	}
	slices.SortFunc(tl.groups, func(a, b string) int { return cmp.Or(cmp.Compare(peak[b], peak[a]), cmp.Compare(a, b)) })
}

// topScopes returns the scopes whose live bytes peak highest, at most
// n of them, or n-1 where the trace has more (the rest are drawn as
// otherGroup). Its memory is bounded by the trace's live allocations.
func topScopes(open openEvents, n int) (map[string]string, error) {
	evs, closeEvents, err := open()
	if err != nil {
		return nil, err
	}
	defer closeEvents()
	type liveAlloc struct {
		size  int64
		scope string
	}
	live := map[uint64]liveAlloc{}
	bounds, sp := newTraceBounds(), newScopePeaks(n)
	for {
		ev, err := evs.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		switch ev.Action {
		case trace.Alloc:
			if _, ok := live[ev.Addr]; ok {
				return nil, fmt.Errorf("trace line %d: alloc at %d, which is live", ev.Line, ev.Addr)
			}
			if err := bounds.alloc(ev); err != nil {
				return nil, err
			}
			g := sp.alloc(cmp.Or(ev.Scope, "(no scope)"), ev.Size)
			live[ev.Addr] = liveAlloc{ev.Size, g}
		case trace.Free:
			if a, ok := live[ev.Addr]; ok {
				bounds.free(a.size)
				sp.free(a.scope, a.size)
				delete(live, ev.Addr)
			}
		}
	}
	return sp.top(), nil
}

// scopePeaks follows each scope's live bytes and their peak in memory
// bounded by the scopes live, plus n: a scope with nothing live is kept
// only while its peak is among the n largest of such scopes. One dropped
// can never end among the n largest (the n kept only grow, and sort
// before it), so the top n are exact.
type scopePeaks struct {
	n       int
	names   map[string]string // a live scope's name, held once however many allocations name it
	now     map[string]int64  // the bytes live of each scope with allocations live
	peak    map[string]int64  // the peaks of the scopes in now and in retired
	retired map[string]bool   // scopes with nothing live, kept for their peak: at most n
	dropped bool              // a retired scope was dropped: there are more than n
}

func newScopePeaks(n int) *scopePeaks {
	return &scopePeaks{n: n, names: map[string]string{}, now: map[string]int64{}, peak: map[string]int64{}, retired: map[string]bool{}}
}

// alloc counts size bytes more live in scope g, and returns g's name as
// the table holds it.
func (s *scopePeaks) alloc(g string, size int64) string {
	if held, ok := s.names[g]; ok {
		g = held
	} else {
		s.names[g] = g
	}
	delete(s.retired, g)
	s.now[g] += size
	s.peak[g] = max(s.peak[g], s.now[g])
	return g
}

// free counts size bytes of scope g freed; a scope left with nothing
// live retires.
func (s *scopePeaks) free(g string, size int64) {
	if s.now[g] -= size; s.now[g] > 0 {
		return
	}
	delete(s.now, g)
	delete(s.names, g)
	s.retired[g] = true
	if len(s.retired) <= s.n {
		return
	}
	last := ""
	for r := range s.retired {
		if last == "" || s.sortsBefore(last, r) {
			last = r
		}
	}
	delete(s.retired, last)
	delete(s.peak, last)
	s.dropped = true
}

// sortsBefore orders scopes as the plot stacks them: by peak, largest
// first, then by name.
func (s *scopePeaks) sortsBefore(a, b string) bool {
	return cmp.Or(cmp.Compare(s.peak[b], s.peak[a]), cmp.Compare(a, b)) < 0
}

// top returns the n scopes that peaked highest, or n-1 where there are
// more (the rest are drawn as otherGroup), each mapped to its name.
func (s *scopePeaks) top() map[string]string {
	names := make([]string, 0, len(s.peak))
	for g := range s.peak {
		names = append(names, g)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(s.peak[b], s.peak[a]), cmp.Compare(a, b)) })
	if len(names) > s.n || s.dropped && len(names) == s.n {
		names = names[:s.n-1]
	}
	top := map[string]string{}
	for _, g := range names {
		top[g] = g
	}
	return top
}

// countEvents counts a trace's allocs and frees, n, and its allocs, and
// reports whether any alloc names its scope.
func countEvents(open openEvents) (n, allocs int, byScope bool, err error) {
	evs, closeEvents, err := open()
	if err != nil {
		return 0, 0, false, err
	}
	defer func() { err = errors.Join(err, closeEvents()) }()
	for {
		ev, err := evs.Next()
		if err == io.EOF {
			return n, allocs, byScope, nil
		}
		if err != nil {
			return 0, 0, false, err
		}
		if ev.Action == trace.Alloc || ev.Action == trace.Free {
			n++
			byScope = byScope || ev.Scope != ""
		}
		if ev.Action == trace.Alloc {
			allocs++
		}
	}
}

// maxLabel is the most characters of a name a plot shows.
const maxLabel = 60

// label writes a name from the trace or the command line for the SVG and
// the page: at most maxLabel characters, valid UTF-8 without control
// characters (which XML does not allow), escaped.
func label(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '\uFFFD'
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	if r := []rune(s); len(r) > maxLabel {
		s = string(r[:maxLabel-1]) + "…"
	}
	return html.EscapeString(s)
}

var palette = []string{"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"}

// svg draws the timeline.
func (tl *timeline) svg(name string, width int) string {
	const height, left, right, top, bottom = 460, 90, 190, 40, 50
	pw, ph := float64(width-left-right), float64(height-top-bottom)
	ymax := float64(max(tl.peakReserved, tl.peakRequested, 1)) * 1.08
	x := func(col int) float64 { return float64(left) + float64(col)/float64(max(1, len(tl.cols)))*pw }
	y := func(v int64) float64 { return float64(top) + ph - float64(v)/ymax*ph }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`, width, height)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="14" font-weight="bold">%s: memory over %d events</text>`, left, label(name), tl.events)
	for k := 0; k <= 5; k++ {
		v := int64(ymax * float64(k) / 5)
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#eee"/>`, left, float64(left)+pw, y(v), y(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`, left-6, y(v)+4, units.FormatBytes(v))
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%d</text>`, float64(left)+pw*float64(k)/5, height-bottom+16, tl.events*k/5)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">events (allocations and frees)</text>`, float64(left)+pw/2, height-bottom+34)
	// Stacked areas of requested bytes, bottom group first.
	base := make([]int64, len(tl.cols))
	for gi, g := range tl.groups {
		var pts []string
		for c := range tl.cols {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(c), y(base[c]+tl.cols[c].byGroup[g])))
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(c+1), y(base[c]+tl.cols[c].byGroup[g])))
		}
		for c := len(tl.cols) - 1; c >= 0; c-- {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(c+1), y(base[c])))
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(c), y(base[c])))
		}
		color := palette[gi%len(palette)]
		fmt.Fprintf(&b, `<polygon points="%s" fill="%s" fill-opacity="0.85"/>`, strings.Join(pts, " "), color)
		for c := range tl.cols {
			base[c] += tl.cols[c].byGroup[g]
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`,
			width-right+12, top+gi*18, color, width-right+30, top+gi*18+10, label(g))
	}
	var line []string
	for c := range tl.cols {
		line = append(line, fmt.Sprintf("%.1f,%.1f %.1f,%.1f", x(c), y(tl.cols[c].reserved), x(c+1), y(tl.cols[c].reserved)))
	}
	fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="#222" stroke-width="1.5"/>`, strings.Join(line, " "))
	ly := top + len(tl.groups)*18 + 10
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#222" stroke-width="1.5"/><text x="%d" y="%d">reserved (gpuscope)</text>`,
		width-right+12, width-right+24, ly+6, ly+6, width-right+30, ly+10)
	for _, m := range []struct {
		label string
		v     int64
		color string
		dy    float64 // the label above the line, or below
	}{{"peak requested", tl.peakRequested, "#d62728", 13}, {"peak reserved", tl.peakReserved, "#222", -4}} {
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="5,4"/>`, left, float64(left)+pw, y(m.v), y(m.v), m.color)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="%s">%s %s</text>`, float64(left)+pw-4, y(m.v)+m.dy, m.color, m.label, units.FormatBytes(m.v))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// html wraps the SVG in a page, with the figures as text: no script, no
// fetch, one file.
func (tl *timeline) html(name, svg string) string {
	ratio := 0.0
	if tl.peakRequested > 0 {
		ratio = float64(tl.peakReserved) / float64(tl.peakRequested)
	}
	return fmt.Sprintf(`<!doctype html>
<html><head><meta charset="utf-8"><title>%s</title></head>
<body style="font-family:sans-serif">
%s
<p>%d events. Peak requested %s (at event %d); gpuscope's pool, replaying it on a simulated device with its default settings, reserves %s at its peak (%.4f x).</p>
</body></html>
`, label(name), svg, tl.events, units.FormatBytes(tl.peakRequested), tl.peakAt, units.FormatBytes(tl.peakReserved), ratio)
}
