package grpcdrain_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop"
	grpcdrain "github.com/zerodrop/zerodrop/grpcdrain"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/ticket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

const mWho = "/zerodrop.test.Resume/Who"

// resumeDesc answers Who with "<pid> <resumed>": this process's pid and
// whether the call's TLS connection resumed a session (the server's
// DidResume).
var resumeDesc = grpc.ServiceDesc{
	ServiceName: "zerodrop.test.Resume",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Who",
		Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var in []byte
			if err := dec(&in); err != nil {
				return nil, err
			}
			resumed := false
			if p, ok := peer.FromContext(ctx); ok {
				if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
					resumed = ti.State.DidResume
				}
			}
			return []byte(fmt.Sprintf("%d %v", os.Getpid(), resumed)), nil
		},
	}},
}

// tlsGenerationMain is one generation of a gRPC service over TLS (the
// certificate in ZD_CERT and ZD_KEY) built on grpcdrain.Serve with the
// handoff socket ZD_SOCK: its session-ticket keys are installed into the
// tls.Config before grpc's credentials take it, and given to Serve
// (Config.Handoff.TicketKeys), unless ZD_NO_TICKETS is set. It prints "serving
// <generation> <pid> <addr>" and "report <generation> <cause>".
func tlsGenerationMain() {
	cert, err := tls.LoadX509KeyPair(os.Getenv("ZD_CERT"), os.Getenv("ZD_KEY"))
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(1)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
	opts := zerodrop.Config{
		Handoff:   handoff.Config{Path: os.Getenv("ZD_SOCK")},
		Successor: zerodrop.ReExec,
		Grace:     10 * time.Second,
		OnServing: func(gen uint64, addrs []net.Addr) { fmt.Printf("serving %d %d %s\n", gen, os.Getpid(), addrs[0]) },
	}
	if os.Getenv("ZD_NO_TICKETS") == "" {
		keys, err := ticket.New()
		if err == nil {
			err = keys.Install(cfg)
		}
		if err != nil {
			fmt.Printf("error %v\n", err)
			os.Exit(1)
		}
		defer keys.Close()
		opts.Handoff.TicketKeys = keys
	}
	s := grpcdrain.New(grpcdrain.Config{}, grpc.Creds(credentials.NewTLS(cfg)))
	s.GRPC().RegisterService(&resumeDesc, struct{}{})
	rep, err := grpcdrain.Serve(context.Background(), s, []string{os.Getenv("ZD_ADDR")}, opts)
	if err != nil {
		fmt.Printf("error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		os.Exit(1)
	}
	fmt.Printf("report %d %s\n", rep.Generation, strings.ReplaceAll(rep.Cause, " ", "_"))
}

// who makes one call on a new TLS connection (a new ClientConn sharing
// cache) and returns the pid that answered and whether it resumed.
func who(t *testing.T, addr string, cert *netnstest.Cert, cache tls.ClientSessionCache) (int, bool) {
	t.Helper()
	cc := cert.Client()
	cc.ClientSessionCache = cache
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(credentials.NewTLS(cc)),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype(codecName)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []byte
	if err := conn.Invoke(ctx, mWho, []byte("x"), &out); err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(out))
	pid, err := strconv.Atoi(f[0])
	if err != nil || len(f) != 2 {
		t.Fatalf("answer %q", out)
	}
	return pid, f[1] == "true"
}

// TestServeTLSResumes: grpcdrain serves TLS through the grpc.Creds the
// caller gives New (it has no TLS of its own), so the caller installs the
// session-ticket keys into the tls.Config before credentials.NewTLS takes
// it (a clone: ticket.Keys' hooks follow clones) and gives them to Serve,
// which hands them to the successor with the socket. A grpc-go client that
// got a ticket from generation 1 then resumes its session at generation 2
// (the server's DidResume) on a new connection. The control, without keys
// given to Serve, resumes nothing across the handoff.
func TestServeTLSResumes(t *testing.T) {
	for _, keys := range []bool{true, false} {
		t.Run(map[bool]string{true: "keys handed over", false: "control without keys"}[keys], func(t *testing.T) {
			netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
				cert := netnstest.NewCert(t)
				bin := netnstest.ExecutableCopy(t)
				addr := "127.0.0.1:8080"
				env := []string{"ZERODROP_TEST_HELPER=tls-generation", "ZD_SOCK=" + filepath.Join(t.TempDir(), "handoff.sock"),
					"ZD_ADDR=" + addr, "ZD_CERT=" + cert.CertFile, "ZD_KEY=" + cert.KeyFile}
				if !keys {
					env = append(env, "ZD_NO_TICKETS=1")
				}
				s := netnstest.StartSubreaped(t, bin, env, "-test.run=^$")
				pid1 := pidOf(t, strings.Fields(s.Expect(t, "serving 1 ")))
				cache := tls.NewLRUClientSessionCache(4)
				if pid, resumed := who(t, addr, cert, cache); pid != pid1 || resumed {
					t.Fatalf("first call: pid %d resumed %v, want pid %d, a full handshake", pid, resumed, pid1)
				}
				if pid, resumed := who(t, addr, cert, cache); pid != pid1 || !resumed {
					t.Fatalf("second call: pid %d resumed %v, want pid %d resuming its own session", pid, resumed, pid1)
				}
				if err := syscall.Kill(pid1, syscall.SIGHUP); err != nil {
					t.Fatal(err)
				}
				pid2 := pidOf(t, strings.Fields(s.Expect(t, "serving 2 ")))
				s.Expect(t, "report 1 successor_ready")
				pid, resumed := who(t, addr, cert, cache)
				if pid != pid2 || resumed != keys {
					t.Errorf("after the handoff: pid %d resumed %v, want pid %d resumed %v", pid, resumed, pid2, keys)
				}
				s.StopLast(t, []int{pid1, pid2}, "report 2 ")
			})
		})
	}
}
