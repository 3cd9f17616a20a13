package trace

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// Writer writes a trace: Header, then one line per event. It buffers; Flush
// writes what is buffered. It is not safe for concurrent use.
type Writer struct {
	w *bufio.Writer
}

// NewWriter returns a Writer to w that has written nothing yet.
func NewWriter(w io.Writer) *Writer { return &Writer{w: bufio.NewWriterSize(w, 64<<10)} }

// WriteHeader writes the header line.
func (w *Writer) WriteHeader() error {
	_, err := w.w.WriteString(Header + "\n")
	return err
}

// Write writes ev as a line of the five columns Header names:
// action,addr,size,stream,scope, the scope quoted as CSV needs and empty
// where ev has none, so that every line has as many fields as the header
// (pandas and other CSV readers align them). Its Line is not written.
func (w *Writer) Write(ev Event) error {
	if !Known(ev.Action) {
		return fmt.Errorf("trace: writing unknown action %q", ev.Action)
	}
	if ev.Size < 0 {
		return fmt.Errorf("trace: writing a negative size, %d", ev.Size)
	}
	_, err := fmt.Fprintf(w.w, "%s,%d,%d,%d,%s\n", ev.Action, ev.Addr, ev.Size, ev.Stream, csvField(ev.Scope))
	return err
}

// Flush writes what is buffered to the underlying writer.
func (w *Writer) Flush() error { return w.w.Flush() }

// csvField quotes s where encoding/csv would: it holds a comma, a quote, a
// line break, or starts with a space or the comment character.
func csvField(s string) string {
	if s == "" || !strings.ContainsAny(s, ",\"\r\n") && s[0] != ' ' && s[0] != '\t' && s[0] != '#' {
		return s
	}
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}
