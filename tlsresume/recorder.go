package tlsresume

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
)

// Recorder is the socket under a server's tls.Conn (see Capture.Wrap). It
// follows the TLS records crossing it in both directions, and keeps what
// Prove needs to pin the record layer's state down exactly:
//
//   - the connection's client random (from its ClientHello), which names its
//     secrets in the Capture, and its cipher suite (from the ServerHello);
//   - in each direction, the first record protected with the application
//     traffic secret (found by opening each encrypted record at sequence
//     number 0 until one authenticates: the handshake's own are a few), then
//     every later record, counted: the next sequence number;
//   - every record the peer sends is opened (its KeyUpdates followed, its
//     application data followed as HTTP/1.1 requests); of ours, those small enough to
//     be a KeyUpdate are opened (crypto/tls sends one only when asked, in a
//     22-byte record), the rest counted; a copy of the last record in each
//     direction.
//
// Anything it cannot follow (a record that fails to open where one must, an
// alert, a handshake message other than KeyUpdate or NewSessionTicket, a
// TLS 1.2 session, a suite whose AEAD is not registered, a short write)
// makes the connection unprovable for good.
//
// Its Read, Write and Close are crypto/tls's: do not call them yourself.
type Recorder struct {
	net.Conn
	capture *Capture

	mu        sync.Mutex
	random    [32]byte
	hello     bool
	shello    bool // the server's first handshake record was seen (suiteOf)
	claimed   bool
	suite     *suite
	in, out   direction
	req       requests // the HTTP/1.1 requests read (in's application data)
	broken    error
	inRead    bool // crypto/tls waits in Read: it holds no whole record
	idle      bool // net/http's StateIdle
	deadlines int  // SetReadDeadline calls since idle
	frozen    bool // proven: from now on no byte passes either way
	extra     []byte
	released  chan struct{}
	closeOnce sync.Once
}

// direction is what a Recorder follows of one direction's records.
type direction struct {
	hdr     [recordHeaderLen]byte
	hn      int
	payload []byte // a record arriving in pieces, so far
	scratch []byte // plaintext buffer, reused
	first   []byte // the application traffic secret, until h
	h       *half  // the application keys, once a record authenticated with them
	prev    []byte // the secret before the last KeyUpdate
	trials  int
	last    []byte // the last whole record under h (or prev, lastPrev)
	lastSeq uint64
	// lastPrev: the last record was a KeyUpdate, under prev.
	lastPrev bool
}

// maxTrials bounds the encrypted records opened at sequence number 0 in
// search of the first application record: the handshake's (server flight,
// client Finished) are a handful.
const maxTrials = 16

// smallWrite is the largest record of ours that Recorder opens: a KeyUpdate
// padded a little.
const smallWrite = 64

// keepBuffer is the largest record buffer kept between records.
const keepBuffer = 4096

// errHandedOver is what crypto/tls gets from a Recorder that was taken.
var errHandedOver = errors.New("tls connection handed over")

// Read reads from the socket for crypto/tls, following the records.
func (r *Recorder) Read(p []byte) (int, error) {
	r.mu.Lock()
	if r.frozen {
		r.mu.Unlock()
		return 0, errHandedOver
	}
	r.inRead = true
	r.mu.Unlock()
	n, err := r.Conn.Read(p)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inRead = false
	if r.frozen {
		r.extra = append(r.extra, p[:n]...)
		return 0, errHandedOver
	}
	r.feed(&r.in, true, p[:n])
	return n, err
}

// Write writes crypto/tls's records, following them; once proven it writes
// nothing.
func (r *Recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	if r.frozen {
		r.mu.Unlock()
		return 0, &net.OpError{Op: "write", Net: "tcp", Source: r.LocalAddr(), Addr: r.RemoteAddr(), Err: errHandedOver}
	}
	r.feed(&r.out, false, p)
	r.mu.Unlock()
	n, err := r.Conn.Write(p)
	if n < len(p) {
		r.mu.Lock()
		r.fail(fmt.Errorf("short write: %d of %d bytes", n, len(p)))
		r.mu.Unlock()
	}
	return n, err
}

// Close closes the socket, unless the connection has been proven: then it
// tells Take that crypto/tls has let go.
func (r *Recorder) Close() error {
	r.mu.Lock()
	frozen := r.frozen
	r.mu.Unlock()
	if frozen {
		r.closeOnce.Do(func() { close(r.released) })
		return nil
	}
	r.forget()
	return r.Conn.Close()
}

// CloseWrite shuts the socket's write side (a lingering close), unless the
// connection has been proven: then Close follows.
func (r *Recorder) CloseWrite() error {
	r.mu.Lock()
	frozen := r.frozen
	r.mu.Unlock()
	cw, ok := r.Conn.(interface{ CloseWrite() error })
	if frozen || !ok {
		return errHandedOver
	}
	return cw.CloseWrite()
}

// SyscallConn is the socket's.
func (r *Recorder) SyscallConn() (syscall.RawConn, error) {
	sc, ok := r.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}

// Stop makes r follow no more records and erases its secrets, for a
// connection that will not be handed over (HTTP/2, say): it then costs
// nothing but a lock per read and write. It cannot be proven afterwards.
func (r *Recorder) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail(errors.New("stopped"))
	r.forgetLocked()
}

// forget erases every secret the Recorder holds or the Capture keeps for it.
func (r *Recorder) forget() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgetLocked()
}

func (r *Recorder) forgetLocked() {
	clear(r.req.line)
	r.req.line = nil
	for _, d := range []*direction{&r.in, &r.out} {
		if d.h != nil {
			d.h.zero()
		}
		clear(d.prev)
		clear(d.first)
		clear(d.last)
		clear(d.payload)
		clear(d.scratch[:cap(d.scratch)])
		d.h, d.prev, d.first, d.last, d.payload, d.scratch = nil, nil, nil, nil, nil, nil
	}
	if r.hello {
		r.capture.forget(r.random)
	}
}

// fail marks the state unprovable; the first reason stays. Called with r.mu.
func (r *Recorder) fail(err error) {
	if r.broken == nil {
		r.broken = err
	}
}

// feed follows the bytes p of direction d. Whole records in p are followed
// in place; only the last one is copied (as d.last). Called with r.mu.
func (r *Recorder) feed(d *direction, read bool, p []byte) {
	var pending []byte // the last record followed in place in p, to keep
	for len(p) > 0 && r.broken == nil {
		if d.hn == 0 && len(p) >= recordHeaderLen {
			n := int(p[3])<<8 | int(p[4])
			if n <= maxCiphertext && len(p) >= recordHeaderLen+n {
				copy(d.hdr[:], p)
				if r.record(d, read, p[recordHeaderLen:recordHeaderLen+n]) {
					pending = p[:recordHeaderLen+n]
				}
				p = p[recordHeaderLen+n:]
				continue
			}
		}
		if d.hn < recordHeaderLen {
			m := copy(d.hdr[d.hn:], p)
			d.hn += m
			p = p[m:]
			continue
		}
		n := int(d.hdr[3])<<8 | int(d.hdr[4])
		if n > maxCiphertext {
			r.fail(fmt.Errorf("record of %d bytes", n))
			return
		}
		m := min(n-len(d.payload), len(p))
		d.payload = append(d.payload, p[:m]...)
		p = p[m:]
		if len(d.payload) == n {
			if r.record(d, read, d.payload) {
				d.keepLast(d.hdr[:], d.payload)
				pending = nil
			}
			d.hn, d.payload = 0, d.payload[:0]
			if cap(d.payload) > keepBuffer {
				d.payload = nil // an idle connection keeps no 16 KiB buffer
			}
		}
	}
	if pending != nil && r.broken == nil {
		d.keepLast(pending[:recordHeaderLen], pending[recordHeaderLen:])
	}
}
