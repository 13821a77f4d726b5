package tlsresume

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// Record layer constants (RFC 8446 §5).
const (
	recordHeaderLen = 5
	maxPlaintext    = 1 << 14
	maxCiphertext   = maxPlaintext + 256

	typeAlert       = 21
	typeHandshake   = 22
	typeApplication = 23

	hsKeyUpdate = 24
)

// Conn continues a TLS 1.3 session at the record layer: a net.Conn whose
// Read and Write carry application data, protected with the traffic keys
// and sequence numbers of a State. It handles KeyUpdate in both directions
// (RFC 8446 §4.6.3), alerts and close_notify; a record that does not
// authenticate at the next sequence number (tampered, replayed, reordered,
// dropped) ends the connection with a bad_record_mac alert, and any
// handshake message other than KeyUpdate with unexpected_message. Conn never
// renegotiates, resumes or sends tickets: the session's handshake is over.
//
// Read and Write may be called concurrently with each other; Close may be
// called at any time, and more than once.
type Conn struct {
	conn net.Conn

	rmu   sync.Mutex
	in    *half
	raw   []byte // bytes read, not yet a whole record
	plain []byte // application data decrypted, not yet returned
	rerr  error  // sticky

	wmu       sync.Mutex
	out       *half
	werr      error // sticky
	closeOnce sync.Once
	closeErr  error
	padding   int // zero bytes after the content type of each record (tests)

	cs tls.ConnectionState
}

// ConnectionState describes the session as far as the State told: TLS 1.3,
// its suite, SNI and ALPN, handshake complete. It has no certificates (a
// connection with client certificates is never handed over) and no
// exporter.
func (c *Conn) ConnectionState() tls.ConnectionState { return c.cs }

// New continues the session of st on c, taking ownership of both: st's
// secrets are moved into the Conn and zeroed in st, and Close closes c.
// On error, st is zeroed and c is left to the caller.
func New(c net.Conn, st *State) (*Conn, error) {
	defer st.Zero()
	s, err := suiteByID(st.Suite)
	if err != nil {
		return nil, err
	}
	if len(st.Unread) > maxUnread || len(st.Plain) > maxUnread {
		return nil, fmt.Errorf("new: %w: %d unread bytes", ErrBadState, len(st.Unread))
	}
	rs := append([]byte(nil), st.ReadSecret...)
	in, err := newHalf(s, rs, st.ReadSeq)
	if err != nil {
		clear(rs)
		return nil, err
	}
	ws := append([]byte(nil), st.WriteSecret...)
	out, err := newHalf(s, ws, st.WriteSeq)
	if err != nil {
		clear(ws)
		in.zero()
		return nil, err
	}
	raw := make([]byte, len(st.Unread), max(len(st.Unread), 4096))
	copy(raw, st.Unread)
	cs := tls.ConnectionState{
		Version: tls.VersionTLS13, HandshakeComplete: true, CipherSuite: s.id,
		ServerName: st.ServerName, NegotiatedProtocol: st.NegotiatedProtocol,
	}
	var plain []byte
	if len(st.Plain) > 0 {
		plain = append([]byte(nil), st.Plain...)
	}
	return &Conn{conn: c, in: in, out: out, raw: raw, plain: plain, cs: cs}, nil
}

// Read reads application data. It returns io.EOF after the peer's
// close_notify, and an *AlertError after any other alert, received or sent.
func (c *Conn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for len(c.plain) == 0 {
		if c.rerr != nil {
			return 0, c.rerr
		}
		if len(p) == 0 {
			return 0, nil
		}
		if err := c.readRecord(); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return 0, err // a deadline: the record is read on the next call
			}
			c.rerr = err
			c.in.zero()
		}
	}
	n := copy(p, c.plain)
	c.plain = c.plain[n:]
	return n, nil
}

// readRecord reads, authenticates and handles one record.
func (c *Conn) readRecord() error {
	if err := c.fill(recordHeaderLen); err != nil {
		return err
	}
	hdr := c.raw[:recordHeaderLen]
	n := int(binary.BigEndian.Uint16(hdr[3:]))
	if hdr[0] != typeApplication {
		return c.fatal(alertUnexpectedMessage, fmt.Errorf("record of outer type %d after the handshake", hdr[0]))
	}
	if n > maxCiphertext {
		return c.fatal(alertRecordOverflow, fmt.Errorf("record of %d bytes", n))
	}
	if err := c.fill(recordHeaderLen + n); err != nil {
		return err
	}
	if c.in.seq == ^uint64(0) {
		return c.fatal(alertInternalError, errors.New("read sequence number exhausted"))
	}
	pt, err := c.in.aead.Open(nil, c.in.nonce(), c.raw[recordHeaderLen:recordHeaderLen+n], hdr)
	c.raw = c.raw[:copy(c.raw, c.raw[recordHeaderLen+n:])]
	if err != nil {
		return c.fatal(alertBadRecordMAC, fmt.Errorf("record %d: %w", c.in.seq, err))
	}
	c.in.seq++
	typ, content, err := innerPlaintext(pt)
	if err != nil {
		return c.fatal(alertUnexpectedMessage, err)
	}
	if len(content) > maxPlaintext {
		return c.fatal(alertRecordOverflow, fmt.Errorf("plaintext of %d bytes", len(content)))
	}
	switch typ {
	case typeApplication:
		c.plain = content
		return nil
	case typeAlert:
		return c.alert(content)
	case typeHandshake:
		return c.handshake(content)
	}
	return c.fatal(alertUnexpectedMessage, fmt.Errorf("record of content type %d", typ))
}

// innerPlaintext splits TLSInnerPlaintext into its type and content,
// removing the padding (RFC 8446 §5.4).
func innerPlaintext(pt []byte) (typ byte, content []byte, err error) {
	i := len(pt) - 1
	for i >= 0 && pt[i] == 0 {
		i--
	}
	if i < 0 {
		return 0, nil, errors.New("record with no content type")
	}
	return pt[i], pt[:i], nil
}

// fill reads until c.raw holds n bytes.
func (c *Conn) fill(n int) error {
	for len(c.raw) < n {
		if cap(c.raw) < n {
			c.raw = append(c.raw[:cap(c.raw)], make([]byte, n-cap(c.raw))...)[:len(c.raw)]
		}
		m, err := c.conn.Read(c.raw[len(c.raw):cap(c.raw)])
		c.raw = c.raw[:len(c.raw)+m]
		if len(c.raw) >= n {
			return nil
		}
		if err != nil {
			if errors.Is(err, io.EOF) && len(c.raw) > 0 {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// alert handles an alert record's content.
func (c *Conn) alert(content []byte) error {
	if len(content) != 2 {
		return c.fatal(alertDecodeError, fmt.Errorf("alert of %d bytes", len(content)))
	}
	if content[1] == alertCloseNotify {
		return io.EOF
	}
	if content[1] == alertUserCanceled {
		return nil // a warning; close_notify follows (RFC 8446 §6.1)
	}
	err := &AlertError{Alert: content[1], Remote: true}
	c.wmu.Lock()
	if c.werr == nil {
		c.werr = err
	}
	c.wmu.Unlock()
	return err
}

// handshake handles a handshake record: one KeyUpdate, alone in its record
// (RFC 8446 §5.1: a message before a key change ends its record), is all a
// peer may send once the handshake is over (we request no client
// certificate after it).
func (c *Conn) handshake(msg []byte) error {
	if len(msg) < 4 || msg[0] != hsKeyUpdate {
		return c.fatal(alertUnexpectedMessage, errors.New("handshake message after the handshake"))
	}
	if len(msg) != 5 || msg[1] != 0 || msg[2] != 0 || msg[3] != 1 {
		return c.fatal(alertDecodeError, errors.New("KeyUpdate of a bad length or not alone in its record"))
	}
	if msg[4] > 1 {
		return c.fatal(alertIllegalParameter, fmt.Errorf("KeyUpdate request_update %d", msg[4]))
	}
	if err := c.in.update(); err != nil {
		return c.fatal(alertInternalError, err)
	}
	if msg[4] == 1 {
		c.wmu.Lock()
		defer c.wmu.Unlock()
		return c.updateLocked(false)
	}
	return nil
}

// UpdateKeys sends a KeyUpdate and moves our direction to the next traffic
// secret; with requestPeer, it asks the peer to do the same for its own.
func (c *Conn) UpdateKeys(requestPeer bool) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.updateLocked(requestPeer)
}

func (c *Conn) updateLocked(requestPeer bool) error {
	if c.werr != nil {
		return c.werr
	}
	req := byte(0)
	if requestPeer {
		req = 1
	}
	if err := c.sendLocked(typeHandshake, []byte{hsKeyUpdate, 0, 0, 1, req}); err != nil {
		return err
	}
	if err := c.out.update(); err != nil {
		c.werr = err
		return err
	}
	return nil
}

// fatal sends alert (if we can still write), and returns the error that
// ends the connection.
func (c *Conn) fatal(alert uint8, cause error) error {
	err := &AlertError{Alert: alert, Err: cause}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr == nil {
		c.sendLocked(typeAlert, []byte{2, alert}) //nolint:errcheck // the connection ends either way
		c.werr = err
	}
	return err
}

// Write writes application data, in records of at most 16 KiB.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return 0, c.werr
	}
	var buf []byte
	n := 0
	for len(p) > 0 {
		m := min(len(p), maxPlaintext)
		var err error
		if buf, err = c.sealLocked(buf, typeApplication, p[:m]); err != nil {
			return 0, err
		}
		p, n = p[m:], n+m
	}
	if n == 0 {
		return 0, nil
	}
	if _, err := c.conn.Write(buf); err != nil {
		c.werr = err
		return 0, err
	}
	return n, nil
}

// sendLocked writes one record of type typ.
func (c *Conn) sendLocked(typ byte, content []byte) error {
	buf, err := c.sealLocked(nil, typ, content)
	if err != nil {
		return err
	}
	if _, err := c.conn.Write(buf); err != nil {
		c.werr = err
		return err
	}
	return nil
}

// sealLocked appends to buf the record protecting content as type typ at
// the next write sequence number.
func (c *Conn) sealLocked(buf []byte, typ byte, content []byte) ([]byte, error) {
	if c.out.seq == ^uint64(0) {
		c.werr = errors.New("write sequence number exhausted")
		return nil, c.werr
	}
	ct := len(content) + 1 + c.padding + c.out.aead.Overhead()
	start := len(buf)
	buf = append(buf, make([]byte, recordHeaderLen+ct)...)
	rec := buf[start:]
	rec[0], rec[1], rec[2], rec[3], rec[4] = typeApplication, 3, 3, byte(ct>>8), byte(ct)
	inner := append(rec[recordHeaderLen:recordHeaderLen], content...)
	inner = append(inner, typ)
	inner = append(inner, make([]byte, c.padding)...)
	c.out.aead.Seal(inner[:0], c.out.nonce(), inner, rec[:recordHeaderLen])
	c.out.seq++
	return buf, nil
}

// Close sends close_notify (within 5 seconds) unless the connection has
// failed or a Write is in progress (Close then breaks it), closes the socket
// and erases the keys. It is safe to call twice, and concurrently with Read
// and Write.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		// A Write in progress (blocked on a peer that does not read) means
		// Close is breaking it, as with tls.Conn: no close_notify then.
		if c.wmu.TryLock() {
			if c.werr == nil {
				c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck // best effort
				c.sendLocked(typeAlert, []byte{1, alertCloseNotify})     //nolint:errcheck // best effort
				c.werr = net.ErrClosed
			}
			c.wmu.Unlock()
		}
		c.closeErr = c.conn.Close()
		c.wmu.Lock()
		if c.werr == nil {
			c.werr = net.ErrClosed
		}
		c.out.zero()
		c.wmu.Unlock()
		c.rmu.Lock()
		if c.rerr == nil {
			c.rerr = net.ErrClosed
		}
		c.in.zero()
		clear(c.raw)
		clear(c.plain)
		c.plain = nil
		c.rmu.Unlock()
	})
	return c.closeErr
}

// CloseWrite sends close_notify: we write no more (the socket stays open,
// as tls.Conn.CloseWrite does).
func (c *Conn) CloseWrite() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return c.werr
	}
	err := c.sendLocked(typeAlert, []byte{1, alertCloseNotify})
	if err == nil {
		c.werr = errClosedWrite
	}
	return err
}

var errClosedWrite = errors.New("tls: CloseWrite called")

// Export hands the session on (a Conn handed over again): it returns the
// socket and the State to continue it, with plain (application data read
// from c and not consumed) before what c itself still holds. c must have no
// Read or Write in progress; it is unusable afterwards, its keys erased,
// its socket the caller's. A Conn that failed or was closed is refused.
func (c *Conn) Export(plain []byte) (net.Conn, *State, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.rerr != nil || c.werr != nil {
		return nil, nil, fmt.Errorf("export: %w: the connection has ended", ErrNotProven)
	}
	st := &State{
		Suite:       c.in.suite.id,
		ReadSecret:  append([]byte(nil), c.in.secret...),
		WriteSecret: append([]byte(nil), c.out.secret...),
		ReadSeq:     c.in.seq,
		WriteSeq:    c.out.seq,
		Unread:      append([]byte(nil), c.raw...),
		Plain:       append(append([]byte(nil), plain...), c.plain...),
		ServerName:  c.cs.ServerName, NegotiatedProtocol: c.cs.NegotiatedProtocol,
	}
	if len(st.Unread) > maxUnread || len(st.Plain) > maxUnread {
		st.Zero()
		return nil, nil, fmt.Errorf("export: %w: too much read ahead", ErrNotProven)
	}
	c.rerr, c.werr = errExported, errExported
	c.in.zero()
	c.out.zero()
	clear(c.raw)
	clear(c.plain)
	c.raw, c.plain = nil, nil
	c.closeOnce.Do(func() {}) // Close no longer closes the socket
	return c.conn, st, nil
}

var errExported = errors.New("tls session handed over")

// SyscallConn is the socket's.
func (c *Conn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}

// NetConn returns the socket under the record layer.
func (c *Conn) NetConn() net.Conn { return c.conn }

// LocalAddr returns the socket's local address.
func (c *Conn) LocalAddr() net.Addr { return c.conn.LocalAddr() }

// RemoteAddr returns the socket's peer address.
func (c *Conn) RemoteAddr() net.Addr { return c.conn.RemoteAddr() }

// SetDeadline sets the socket's deadlines.
func (c *Conn) SetDeadline(t time.Time) error { return c.conn.SetDeadline(t) }

// SetReadDeadline sets the socket's read deadline.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.conn.SetReadDeadline(t) }

// SetWriteDeadline sets the socket's write deadline.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.conn.SetWriteDeadline(t) }

var _ net.Conn = (*Conn)(nil)
