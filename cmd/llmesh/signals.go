package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// untilSignal returns a context canceled by the first SIGINT or SIGTERM,
// and a function that stops listening. A second signal exits the process
// at once: an operator who asks twice does not want to wait for streams
// to finish.
func untilSignal(stderr io.Writer) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	stopped := make(chan struct{})
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case s := <-ch:
			fmt.Fprintf(stderr, "llmesh: %s: shutting down gracefully (again to force)\n", s)
			cancel()
		case <-stopped:
			return
		}
		select {
		case s := <-ch:
			fmt.Fprintf(stderr, "llmesh: %s: forced exit\n", s)
			os.Exit(1)
		case <-stopped:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(stopped)
		cancel()
	}
}

// reloads returns a channel that receives on every SIGHUP.
func reloads() <-chan os.Signal {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	return ch
}
