// Package cli is pipeshard's command-line interface: a thin layer that
// parses flags and environment, calls the library packages, and prints.
//
// Each command is a [Command] with its own flag set, help text and
// examples. Exit codes (documented in docs/cli.md):
//
//	0  success
//	1  the command failed (the message says why)
//	2  usage error: unknown command, bad flag or flag value
//	130 interrupted (Ctrl-C)
//
// Every flag can also be set by an environment variable named
// PIPESHARD_ + the flag name in upper case with dashes as underscores
// (PIPESHARD_THREADS=2); a flag on the command line wins.
package cli
