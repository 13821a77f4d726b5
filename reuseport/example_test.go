package reuseport_test

import (
	"context"
	"fmt"
	"net"
	"net/http"

	"github.com/zerodrop/zerodrop/reuseport"
)

// Listen makes a plain-TCP SO_REUSEPORT listener that http.Server can serve.
func ExampleListen() {
	l, err := reuseport.Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	for _, v := range l.Digest().Values {
		if v.Name == "SO_REUSEPORT" || v.Name == "SO_PROTOCOL" {
			fmt.Printf("%s=%s\n", v.Name, v.Value)
		}
	}
	srv := &http.Server{Handler: http.NotFoundHandler()}
	go srv.Serve(l)
	srv.Close()
	// Output:
	// SO_PROTOCOL=6
	// SO_REUSEPORT=1
}

// A Config with the Require policy refuses to listen while a closing member
// would reset its queue. Compile-only: whether it listens depends on the
// machine's net.ipv4.tcp_migrate_req, which only root can set.
func ExampleConfig_Listen() {
	cfg := reuseport.Config{
		Migration: reuseport.MigrationRequire,
		Options:   reuseport.Options{Backlog: 1024, NoDelay: true},
	}
	l, err := cfg.Listen(context.Background(), "tcp", ":8080")
	if err != nil {
		fmt.Println(err) // e.g. ErrMigrationDisabled, with the sysctl command to run
		return
	}
	defer l.Close()
}

// Control fits a caller's own net.ListenConfig. It refuses the MPTCP socket Go
// 1.24+ tries first, so the listener ends up plain TCP.
func ExampleConfig_Control() {
	cfg := reuseport.Config{Options: reuseport.Options{NoDelay: true}}
	lc := net.ListenConfig{Control: cfg.Control}
	l, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Close()
	fmt.Println("listening")
	// Output: listening
}
