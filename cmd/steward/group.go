package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
)

// subcommand is one "steward <group> <name>" command; an error wrapping errUsage is a usage error.
type subcommand func(ctx context.Context, args []string, stdout io.Writer) error

// runGroup runs the subcommand args[0] of a command group and returns the exit status: 0 on
// success, 1 on failure, 2 on a usage error (usage is printed then, and for -h).
func runGroup(ctx context.Context, group, usage string, cmds map[string]subcommand, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	err := fmt.Errorf("%w: unknown %s command %q", errUsage, group, args[0])
	if cmd, ok := cmds[args[0]]; ok {
		err = cmd(ctx, args[1:], stdout)
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage), errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(stderr, "steward %s: %v\n", group, err)
		fmt.Fprint(stderr, usage)
		return 2
	default:
		fmt.Fprintf(stderr, "steward %s %s: %v\n", group, args[0], err)
		return 1
	}
}
