package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/zerodrop/zerodrop/handoff/systemd"
	"golang.org/x/sys/unix"
)

// fdStore plays systemd's part in a restart through the fd store: it reads
// FDSTORE=1 messages on a notify socket, keeps the first fd stored under each
// name (systemd merges duplicates of one socket), and passes them to every
// process it starts in LISTEN_FDS and LISTEN_FDNAMES.
type fdStore struct {
	path  string
	conn  *net.UnixConn
	mu    sync.Mutex
	fds   map[string]*os.File
	names []string
	done  chan struct{}
}

func newFDStore(dir string) (*fdStore, error) {
	path := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return nil, err
	}
	s := &fdStore{path: path, conn: conn, fds: map[string]*os.File{}, done: make(chan struct{})}
	go s.serve()
	return s, nil
}

// serve reads notifications until the socket is closed.
func (s *fdStore) serve() {
	defer close(s.done)
	buf, oob := make([]byte, 4096), make([]byte, unix.CmsgSpace(4*16))
	for {
		n, oobn, _, _, err := s.conn.ReadMsgUnix(buf, oob)
		if err != nil {
			return
		}
		s.handle(string(buf[:n]), oob[:oobn])
	}
}

// handle keeps the fds of an FDSTORE=1 message and closes any other.
func (s *fdStore) handle(msg string, oob []byte) {
	var fds []int
	if cmsgs, err := unix.ParseSocketControlMessage(oob); err == nil {
		for _, m := range cmsgs {
			if rights, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, rights...)
			}
		}
	}
	lines := strings.Split(msg, "\n")
	name := ""
	store := false
	for _, l := range lines {
		store = store || l == "FDSTORE=1"
		if v, ok := strings.CutPrefix(l, "FDNAME="); ok {
			name = v
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, fd := range fds {
		if _, dup := s.fds[name]; store && name != "" && !dup {
			s.fds[name] = os.NewFile(uintptr(fd), name)
			s.names = append(s.names, name)
			continue
		}
		unix.Close(fd)
	}
}

// files returns the stored fds in store order, and their names.
func (s *fdStore) files() ([]*os.File, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fs := make([]*os.File, len(s.names))
	for i, n := range s.names {
		fs[i] = s.fds[n]
	}
	return fs, append([]string(nil), s.names...)
}

// await waits until name is stored, for readyTimeout at most.
func (s *fdStore) await(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		s.mu.Lock()
		_, ok := s.fds[name]
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fd store: nothing stored as %q: %w", name, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// close closes the socket and every stored fd.
func (s *fdStore) close() error {
	err := s.conn.Close()
	<-s.done
	os.Remove(s.path)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.fds {
		err = errors.Join(err, f.Close())
	}
	s.fds, s.names = nil, nil
	return err
}

// systemdContender restarts like systemctl restart of a Type=notify service
// with FileDescriptorStoreMax=: stop the process, then start a new one with
// the stored listener. The socket stays open in the store: connections wait
// in its queue while no process runs.
type systemdContender struct {
	env   *runEnv
	store *fdStore
	cur   *proc
}

func (c *systemdContender) start(ctx context.Context, env *runEnv) (err error) {
	c.env = env
	if c.store, err = newFDStore(env.dir); err != nil {
		return err
	}
	if err = c.startNext(ctx); err == nil {
		err = c.store.await(ctx, "http")
	}
	return err
}

// startNext starts a worker with the stored fds.
func (c *systemdContender) startNext(ctx context.Context) (err error) {
	files, names := c.store.files()
	env := []string{systemd.EnvNotifySocket + "=" + c.store.path}
	if len(files) > 0 {
		env = append(env, fmt.Sprintf("%s=%d", systemd.EnvListenFDs, len(files)),
			systemd.EnvListenFDNames+"="+strings.Join(names, ":"))
	}
	c.cur, err = c.env.startWorker(ctx, "systemd", c.env.nextGen(), env, files...)
	return err
}

func (c *systemdContender) restart(ctx context.Context, mark func(string)) error {
	mark("restart")
	if err := c.cur.stop(ctx); err != nil {
		return err
	}
	return c.startNext(ctx)
}

func (c *systemdContender) stop(ctx context.Context) error {
	var err error
	if c.cur != nil {
		err = c.cur.stop(ctx)
	}
	if c.store != nil {
		err = errors.Join(err, c.store.close())
	}
	return err
}
