package handoff

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zerodrop/zerodrop/reuseport"
	"go.uber.org/zap"
)

var (
	errEOF   = io.EOF
	errReset = syscall.ECONNRESET
	errPipe  = syscall.EPIPE
)

// expect turns an error frame into a *RemoteError and an unexpected frame
// into a protocol error.
func expect(f *frame, typ string) error {
	switch f.Type {
	case typ:
		return nil
	case typeError:
		return &RemoteError{Code: f.Code, Message: f.Message}
	}
	return &FrameError{Type: f.Type, Err: ErrProtocol, Detail: "expected " + typ}
}

// code maps an error to the code of the error frame that reports it.
func code(err error) string {
	switch {
	case errors.Is(err, ErrVersion):
		return codeVersion
	case errors.Is(err, ErrPeerRefused):
		return codePermission
	case errors.Is(err, ErrValidation):
		return codeValidation
	case errors.Is(err, ErrProtocol), errors.Is(err, ErrFDCount), errors.Is(err, ErrFrameTooLarge), errors.Is(err, ErrTruncated):
		return codeProtocol
	}
	return codeInternal
}

// hello is our hello frame.
func (u *Upgrader) hello(role string, gen uint64) *frame {
	return &frame{Type: typeHello, Version: Version, Role: role, PID: os.Getpid(), UID: uint32(os.Geteuid()), Generation: gen}
}

// inherit runs the successor's side of the protocol up to the last ack. On
// success the connection stays open for Ready; on failure it is closed, and
// so is every fd received.
func (u *Upgrader) inherit(nc *net.UnixConn) (err error) {
	start := time.Now()
	c, err := newConn(nc, u.cfg.Timeout)
	if err != nil {
		nc.Close()
		return err
	}
	defer func() {
		if err != nil {
			if !predecessorGone(err) && !errors.As(err, new(*RemoteError)) {
				c.send(&frame{Type: typeError, Code: code(err), Message: err.Error()}, nil)
			}
			c.Close()
		}
	}()
	cred, err := c.peerCred()
	if err != nil {
		return err
	}
	if err := allowed(cred, u.cfg.AllowUIDs); err != nil {
		return err
	}
	if err := c.send(u.hello(roleSuccessor, 0), nil); err != nil {
		return err
	}
	f, _, err := c.recv(0)
	if err != nil {
		return err
	}
	if err := expect(f, typeHello); err != nil {
		return err
	}
	if f.Version != Version {
		return &FrameError{Type: typeHello, Err: ErrVersion, Detail: fmt.Sprintf("predecessor speaks version %d, we speak %d", f.Version, Version)}
	}
	u.gen = f.Generation + 1
	u.log.Info("connected to predecessor", zap.String("event", "handoff.connected"), zap.Int32("peer_pid", cred.Pid), zap.Uint32("peer_uid", cred.Uid), zap.Uint64("generation", u.gen))
	socks, err := u.receive(c)
	if err != nil {
		return err
	}
	u.inh = make(map[string]*socket, len(socks))
	for _, s := range socks {
		u.inh[s.info.Name] = s
	}
	u.pred = c
	u.log.Info("received sockets", zap.String("event", "handoff.received"), zap.Int("count", len(socks)), zap.Duration("took", time.Since(start)))
	return nil
}

// receive reads the offer and the fd batches, validates each fd and acks
// each batch. On error every fd received is closed.
func (u *Upgrader) receive(c *conn) (socks []*socket, err error) {
	f, _, err := c.recv(0)
	if err != nil {
		return nil, err
	}
	if err := expect(f, typeOffer); err != nil {
		return nil, err
	}
	offer := f.Sockets
	fds := make([]int, 0, len(offer))
	digests := make([]*reuseport.Digest, 0, len(offer))
	defer func() {
		if err != nil {
			closeFDs(fds)
		}
	}()
	for len(fds) < len(offer) {
		b, got, err := c.recv(BatchFDs)
		fds = append(fds, got...)
		if err != nil {
			return nil, err
		}
		if err := expect(b, typeFDs); err != nil {
			return nil, err
		}
		first, want := len(fds)-len(got), min(BatchFDs, len(offer)-(len(fds)-len(got)))
		if b.First != first || b.Count != want || len(got) != want {
			return nil, &FrameError{Type: typeFDs, Err: ErrFDCount,
				Detail: fmt.Sprintf("batch first=%d count=%d with %d fds, expected first=%d count=%d of %d offered", b.First, b.Count, len(got), first, want, len(offer))}
		}
		ds, err := validateBatch(got, offer[first:first+want])
		if err != nil {
			return nil, err
		}
		digests = append(digests, ds...)
		if err := c.send(&frame{Type: typeAck, Received: len(fds)}, nil); err != nil {
			return nil, err
		}
	}
	socks = make([]*socket, len(offer))
	for i := range offer {
		socks[i] = &socket{info: offer[i], fd: fds[i], digest: digests[i]}
		u.log.Debug("validated", zap.String("event", "handoff.validated"), zap.String("name", offer[i].Name), zap.String("kind", offer[i].Kind), zap.String("address", offer[i].Address))
	}
	return socks, nil
}

// validateBatch validates fds[i] against infos[i] on up to GOMAXPROCS
// goroutines (reading a digest takes some 20 getsockopt calls per fd), and
// returns the first error in offer order.
func validateBatch(fds []int, infos []socketInfo) ([]*reuseport.Digest, error) {
	ds := make([]*reuseport.Digest, len(fds))
	errs := make([]error, len(fds))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(fds)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < len(fds); i = int(next.Add(1)) - 1 {
				ds[i], errs[i] = validate(fds[i], &infos[i])
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return ds, nil
}
