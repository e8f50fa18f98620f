package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// Exit codes.
const (
	ExitOK          = 0
	ExitFailure     = 1
	ExitUsage       = 2
	ExitInterrupted = 130
)

// ErrUsage marks an error in how a command was called.
var ErrUsage = errors.New("usage")

// usagef returns a usage error.
func usagef(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUsage, fmt.Sprintf(format, args...))
}

// Env is what a command runs with: its streams. Commands write results to
// Stdout and progress and diagnostics to Stderr.
type Env struct {
	Stdout io.Writer
	Stderr io.Writer
}

// Command is one (sub)command.
type Command struct {
	Name     string
	Short    string // one line for the parent's list
	Usage    string // the argument synopsis after the name
	Long     string
	Examples []string
	Flags    func(fs *flag.FlagSet) // declares the flags
	Run      func(ctx context.Context, env *Env, fs *flag.FlagSet) error
	Sub      []*Command
}

// Root returns the command tree.
func Root() *Command {
	return &Command{
		Name:  "pipeshard",
		Short: "serve large language models from swarms of ordinary PCs",
		Long: `pipeshard cuts a model by layer into content-addressed shards, runs each
shard on a volunteer PC, and streams every token's hidden state through a
route of nodes found on a libp2p DHT.`,
		Sub: commands(),
	}
}

// commands lists the top-level commands; each file of this package adds
// its own through register.
var registry []*Command

func register(c *Command) { registry = append(registry, c) }

func commands() []*Command {
	cs := append([]*Command(nil), registry...)
	sort.Slice(cs, func(i, j int) bool { return cs[i].Name < cs[j].Name })
	return cs
}

// Main runs the CLI with args (without the program name) and returns the
// exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	env := &Env{Stdout: stdout, Stderr: stderr}
	root := Root()
	err := root.exec(ctx, env, args, "pipeshard")
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.Is(err, ErrUsage):
		fmt.Fprintf(stderr, "pipeshard: %v\n", err)
		return ExitUsage
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		fmt.Fprintln(stderr, "pipeshard: interrupted")
		return ExitInterrupted
	default:
		fmt.Fprintf(stderr, "pipeshard: %v\n", err)
		return ExitFailure
	}
}

func (c *Command) exec(ctx context.Context, env *Env, args []string, path string) error {
	if len(c.Sub) > 0 {
		if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			c.help(env.Stdout, path)
			if len(args) == 0 && c.Run == nil {
				return usagef("%s needs a command", path)
			}
			return flag.ErrHelp
		}
		for _, s := range c.Sub {
			if s.Name == args[0] {
				return s.exec(ctx, env, args[1:], path+" "+s.Name)
			}
		}
		if c.Run == nil {
			return usagef("unknown command %q for %s (see %s --help)", args[0], path, path)
		}
	}
	fs := flag.NewFlagSet(path, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if c.Flags != nil {
		c.Flags(fs)
	}
	// Flags may stand before, between or after the arguments.
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				c.help(env.Stdout, path)
				return err
			}
			return usagef("%v (see %s --help)", err, path)
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		if args[0] == "--" {
			positional = append(positional, args[1:]...)
			break
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
	fs.Parse(append([]string{"--"}, positional...))
	if err := applyEnv(fs); err != nil {
		return err
	}
	return c.Run(ctx, env, fs)
}

// applyEnv sets every flag not given on the command line from
// PIPESHARD_<NAME> when that variable is set.
func applyEnv(fs *flag.FlagSet) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil || len(f.Name) < 2 {
			return
		}
		key := "PIPESHARD_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(key); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = usagef("%s=%q: %v", key, v, e)
			}
		}
	})
	return err
}

func (c *Command) help(w io.Writer, path string) {
	fmt.Fprintf(w, "%s: %s\n\nUsage:\n  %s %s\n", path, c.Short, path, c.Usage)
	if c.Long != "" {
		fmt.Fprintf(w, "\n%s\n", c.Long)
	}
	if len(c.Sub) > 0 {
		fmt.Fprintf(w, "\nCommands:\n")
		for _, s := range c.Sub {
			fmt.Fprintf(w, "  %-10s %s\n", s.Name, s.Short)
		}
	}
	if c.Flags != nil {
		fs := flag.NewFlagSet(path, flag.ContinueOnError)
		c.Flags(fs)
		fmt.Fprintf(w, "\nFlags (each also settable as PIPESHARD_<NAME>):\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
	if len(c.Examples) > 0 {
		fmt.Fprintf(w, "\nExamples:\n")
		for _, e := range c.Examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
}
