package tlsresume

import (
	"crypto/tls"
	"errors"
	"fmt"
)

// ErrNotProven is what Prove returns (wrapped, with the reason) for a
// connection whose record-layer state it cannot pin down: it must be closed,
// never handed over.
var ErrNotProven = errors.New("tls state not proven")

// ErrBusy is the reason ProveIdleHTTP gives (wrapped with ErrNotProven) when
// net/http is not waiting for the next request now: it may be later. Every
// other reason is for good.
var ErrBusy = errors.New("net/http is not waiting for the next request")

// UnsupportedSuiteError is a cipher suite this process cannot continue: not
// one of TLS 1.3's three (TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384,
// TLS_CHACHA20_POLY1305_SHA256), or TLS_CHACHA20_POLY1305_SHA256 without a
// registered AEAD (see RegisterChaCha20Poly1305). A connection of such a
// suite is never handed over.
type UnsupportedSuiteError struct{ Suite uint16 }

func (e *UnsupportedSuiteError) Error() string {
	if e.Suite == tls.TLS_CHACHA20_POLY1305_SHA256 {
		return fmt.Sprintf("cipher suite %#04x (%s) not registered: import github.com/zerodrop/zerodrop/tlsresume/chacha", e.Suite, tls.CipherSuiteName(e.Suite))
	}
	return fmt.Sprintf("cipher suite %#04x is not a TLS 1.3 suite", e.Suite)
}

// AlertError is a TLS alert: received from the peer (Remote), or sent to it
// because of what it sent. Either ends the connection; close_notify from the
// peer is io.EOF instead.
type AlertError struct {
	Alert  uint8
	Remote bool
	Err    error // the cause of an alert we sent, if any
}

// TLS alert descriptions (RFC 8446 §6) the record layer sends or names.
const (
	alertCloseNotify       uint8 = 0
	alertUnexpectedMessage uint8 = 10
	alertBadRecordMAC      uint8 = 20
	alertRecordOverflow    uint8 = 22
	alertDecodeError       uint8 = 50
	alertInternalError     uint8 = 80
	alertUserCanceled      uint8 = 90
	alertIllegalParameter  uint8 = 47
)

func (e *AlertError) Error() string {
	who := "sent"
	if e.Remote {
		who = "received"
	}
	s := fmt.Sprintf("tls alert %d %s", e.Alert, who)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *AlertError) Unwrap() error { return e.Err }
