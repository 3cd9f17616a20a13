// Command gpumem works with device-memory traces.
//
//	gpumem replay [flags] FILE|-
//	gpumem plot [flags] -o OUT.svg|OUT.html FILE|-
//	gpumem summary [flags] FILE|-
//	gpumem stress [flags]
//	gpumem help [COMMAND]
//
// replay replays an allocation trace (CSV, plain or gzip, in the format of
// docs/trace-format.md) through gpuscope's pool and prints one JSON object:
// peak requested and reserved bytes, their ratio, the calls made to the
// source, and nanoseconds per operation. By default it runs on a simulated
// device that hands out address ranges without touching memory. plot
// draws a trace's memory over its events; summary prints what a trace
// holds (its peak, what it leaves live, its largest scopes). A program
// records its own trace with gpu's Device.StartRecording.
//
// stress opens and closes nested scopes from many goroutines for a while
// and checks that no memory is left; compute-sanitizer runs it on a GPU.
//
// A mistake in the arguments is one line on stderr, and a line that says
// where the command's help is; exit status 1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
)

// main runs gpumem. A first interrupt ends the run's context, so that a
// replay stops between chunks and removes what it kept; it also gives the
// signal its default back, so that a second one ends a run blocked on its
// input.
func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	go func() {
		<-ctx.Done()
		stop()
	}()
	code := exit(&call{ctx: ctx, stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:])
	stop()
	os.Exit(code)
}

// call is one run of gpumem: what it reads and writes, and, once a
// command's flags are parsed, its positional arguments and the flags
// given.
type call struct {
	ctx            context.Context // ends the run: a replay stops between chunks, stress stops its loops
	stdin          io.Reader
	stdout, stderr io.Writer
	args           []string        // positional arguments
	strayUnit      string          // an argument that reads as a unit a space parted from a flag's number, or "" (strayUnit)
	given          map[string]bool // flags given, by name
}

// exitOutOfMemory is replay's exit status when allocations of the trace
// ran out of memory: the JSON is printed as usual, and a note on stderr.
const exitOutOfMemory = 3

// exitStatus is an error that ends gpumem with a status other than 1.
type exitStatus struct {
	code int
	err  error
}

func (e *exitStatus) Error() string { return e.err.Error() }
func (e *exitStatus) Unwrap() error { return e.err }

// exit runs gpumem on args and returns its exit status, having said on
// stderr, in one line, what went wrong; a mistake in the arguments adds a
// line that says where the help is.
func exit(c *call, args []string) int {
	err := dispatch(c, args)
	if err == nil {
		return 0
	}
	fmt.Fprintln(c.stderr, "gpumem:", oneLine(err.Error()))
	if ue, ok := errors.AsType[*usageError](err); ok {
		fmt.Fprintln(c.stderr, hint(ue.cmd))
	}
	if st, ok := errors.AsType[*exitStatus](err); ok {
		return st.code
	}
	return 1
}

// hint says where the help for cmd is ("": gpumem's own).
func hint(cmd string) string {
	if cmd == "" {
		return "gpumem: run 'gpumem help' for the commands"
	}
	return fmt.Sprintf("gpumem: run 'gpumem help %s' for its usage and flags", cmd)
}

// oneLine joins the lines of a message (errors.Join writes one a line).
func oneLine(msg string) string {
	return strings.Join(strings.FieldsFunc(msg, func(r rune) bool { return r == '\n' || r == '\r' }), "; ")
}

// run runs gpumem on args with nothing on standard input: the tests'
// entry point.
func run(args []string, stdout, stderr io.Writer) error {
	return dispatch(&call{ctx: context.Background(), stdin: strings.NewReader(""), stdout: stdout, stderr: stderr}, args)
}

// A command is one of gpumem's commands: its options, which declare
// their flags, and its run once they are parsed.
type command interface {
	declare(fs *flag.FlagSet)
	run(c *call) error
}

// commands are gpumem's commands, in the order help lists them.
var commands = []struct {
	name, summary string
	usage         string // the first lines of its help: synopsis and what it does
	takesFile     bool   // whether it reads a trace FILE
	make          func() command
}{
	{"replay", "replay a trace through gpuscope's pool; print its figures as JSON", replayUsage, true, func() command { return new(replayOptions) }},
	{"plot", "draw a trace's memory over its events, as SVG or HTML", plotUsage, true, func() command { return new(plotOptions) }},
	{"summary", "print what a trace holds: its events, peak, scopes", summaryUsage, true, func() command { return new(summaryOptions) }},
	{"stress", "open and end nested scopes from many goroutines; check nothing is left", stressUsage, false, func() command { return new(stressOptions) }},
}

// dispatch runs the command args name.
func dispatch(c *call, args []string) error {
	if len(args) == 0 {
		return usageErrorf("", "no command given")
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		return help(c.stdout, args[1:])
	}
	for _, cmd := range commands {
		if cmd.name == args[0] {
			return runCommand(c, cmd.name, cmd.make(), args[1:])
		}
	}
	return usageErrorf("", "unknown command %q; the commands are %s", args[0], andList(commandNames()))
}

func commandNames() []string {
	names := make([]string, len(commands))
	for i, cmd := range commands {
		names[i] = cmd.name
	}
	return append(names, "help")
}

// runCommand parses args as cmd's flags and positional arguments and runs
// it; -h, -help or --help among the flags print its help instead.
func runCommand(c *call, name string, cmd command, args []string) error {
	fs := flagSet(name, cmd)
	positional, err := parseArgs(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return help(c.stdout, []string{name})
	}
	if err != nil {
		return &usageError{cmd: name, err: errors.New(dashes(err.Error()))}
	}
	c.args, c.given, c.strayUnit = positional, map[string]bool{}, strayUnit(args)
	fs.Visit(func(f *flag.Flag) { c.given[f.Name] = true })
	return cmd.run(c)
}

// flagName is a flag as package flag's errors write it, with one dash:
// "for flag -name", "not defined: -name", "an argument: -name".
var flagName = regexp.MustCompile(`(for flag|not defined:|an argument:) -([a-zA-Z0-9][\w.-]+)`)

// dashes spells the flags in a message of package flag as gpumem's help
// and errors do: --name (a one-letter flag keeps its one dash).
func dashes(msg string) string { return flagName.ReplaceAllString(msg, "$1 --$2") }

// flagSet returns cmd's flags, which print nothing themselves: gpumem
// says what is wrong, once.
func flagSet(name string, cmd command) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	cmd.declare(fs)
	return fs
}

// usageError is a command's arguments not being what it takes: gpumem
// says what is wrong, and where the command's help is.
type usageError struct {
	cmd string // "": gpumem's own arguments
	err error
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usageErrorf returns a usageError of cmd that says what is wrong.
func usageErrorf(cmd, format string, args ...any) error {
	return &usageError{cmd: cmd, err: fmt.Errorf(format, args...)}
}

// parseArgs parses args with fs, flags before or after the positional
// arguments (a "--" ends the flags), and returns the positional ones.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

const topUsage = `gpumem works with device-memory traces.

usage: gpumem COMMAND [flags] [FILE]

commands:
%s
A command's usage and flags: gpumem help COMMAND, or gpumem COMMAND -h.
A trace (docs/trace-format.md): your program's from gpu's Device.StartRecording,
a PyTorch program's from its memory history by scripts/torch2trace.py.
`

// help prints gpumem's help (no args), or the help of the command args
// name: its usage, what it does and its flags.
func help(w io.Writer, args []string) error {
	if len(args) == 1 && slices.Contains([]string{"help", "-h", "-help", "--help"}, args[0]) {
		args = nil // help's own help is gpumem's
	}
	if len(args) == 0 {
		var list strings.Builder
		for _, cmd := range commands {
			fmt.Fprintf(&list, "  %-7s %s\n", cmd.name, cmd.summary)
		}
		fmt.Fprintf(&list, "  %-7s %s\n", "help", "this, or a command's help: gpumem help COMMAND")
		fmt.Fprintf(w, topUsage, list.String())
		return nil
	}
	if len(args) > 1 {
		return usageErrorf("", "help takes one command, got %d words", len(args))
	}
	for _, cmd := range commands {
		if cmd.name == args[0] {
			fmt.Fprint(w, cmd.usage)
			if cmd.takesFile {
				fmt.Fprintf(w, "\nflags (before or after FILE; a \"--\" ends them):\n")
			} else {
				fmt.Fprintf(w, "\nflags:\n")
			}
			printFlags(w, flagSet(cmd.name, cmd.make()))
			return nil
		}
	}
	return usageErrorf("", "help %q: no such command; the commands are %s", args[0], andList(commandNames()))
}

// printFlags writes fs's flags as the help lists them: spelt as the help
// texts and the errors spell them (--name; -o, the one letter), the word
// for the value, what the flag does, and its default where it has one.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		value, usage := flag.UnquoteUsage(f)
		dashes := "--"
		if len(f.Name) == 1 {
			dashes = "-"
		}
		fmt.Fprintf(w, "  %s%s %s\n    \t%s", dashes, f.Name, value, usage)
		if f.DefValue != "" && f.DefValue != "0" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}
