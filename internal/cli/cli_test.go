package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestExitCodes(t *testing.T) {
	tests := []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"--help"}, ExitOK, "Commands:"},
		{[]string{"run", "--help"}, ExitOK, "Examples:"},
		{[]string{}, ExitUsage, "needs a command"},
		{[]string{"nope"}, ExitUsage, `unknown command "nope"`},
		{[]string{"run", "--bogus"}, ExitUsage, "bogus"},
		{[]string{"run"}, ExitUsage, "--model is required"},
		{[]string{"run", "--model", "/nonexistent/m.bin", "--prompt-ids", "1"}, ExitFailure, "/nonexistent/m.bin"},
		{[]string{"model", "pull"}, ExitUsage, "one model name"},
		{[]string{"model", "pull", "gpt-17"}, ExitFailure, `unknown model "gpt-17"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := Main(t.Context(), tt.args, &out, &errb)
			if code != tt.code {
				t.Errorf("exit %d, want %d; stderr %q", code, tt.code, errb.String())
			}
			if !strings.Contains(out.String()+errb.String(), tt.out) {
				t.Errorf("output %q lacks %q", out.String()+errb.String(), tt.out)
			}
		})
	}
}

func TestEnvironmentSetsFlags(t *testing.T) {
	t.Setenv("PIPESHARD_QUANT", "q5")
	var out, errb bytes.Buffer
	code := Main(t.Context(), []string{"run", "--model", "x", "--prompt-ids", "1"}, &out, &errb)
	if code != ExitUsage || !strings.Contains(errb.String(), `"q5"`) {
		t.Fatalf("PIPESHARD_QUANT=q5: exit %d, %q", code, errb.String())
	}
}

// TestEveryCommandHasHelp: every command, group or leaf, has a one-line
// summary and at least one example in its --help.
func TestEveryCommandHasHelp(t *testing.T) {
	var walk func(path string, cs []*Command)
	walk = func(path string, cs []*Command) {
		for _, c := range cs {
			p := path + " " + c.Name
			if c.Short == "" {
				t.Errorf("%s: no summary", p)
			}
			if len(c.Examples) == 0 {
				t.Errorf("%s: no example in its help", p)
			}
			walk(p, c.Sub)
		}
	}
	walk("pipeshard", registry)
}
