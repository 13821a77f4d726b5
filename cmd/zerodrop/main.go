package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: zerodrop <command> [flags]

commands:
  doctor   show the reuseport groups of this network namespace, their queues,
           net.ipv4.tcp_migrate_req and the kernel counters, and what is wrong
  upgrade  start the next generation of a server that hands its sockets over
           (package handoff) and exit 0 only once it serves
  help     print this text

Run "zerodrop <command> -h" for the flags of a command.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches to a subcommand and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "doctor":
		return doctorMain(ctx, args[1:], stdout, stderr, linuxKernel())
	case "upgrade":
		return upgradeMain(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "zerodrop: unknown command %q\n\n%s", args[0], usage)
	return exitUsage
}
