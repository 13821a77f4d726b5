// Package tlsresume hands an idle TLS 1.3 connection to another process
// with its session, so that the client sees neither a close nor a new
// handshake: the predecessor proves the exact state of the record layer
// (Capture, Recorder), and the successor continues it (Conn). It is the
// machinery under drain.Server.TLSHandOver and zerodrop's
// Options.TLSHandoff; HTTP/1.1 only.
//
// This comment is longer than a screen: what is proven before a connection
// moves, and why each check is exact, is what a reviewer of this package
// must read first. The API itself fits one screen: go doc -short
// github.com/zerodrop/zerodrop/tlsresume.
//
// # Capture and proof
//
// crypto/tls keeps its traffic secrets and sequence numbers private, and
// kernel TLS is not available everywhere, so the state is reconstructed
// beside crypto/tls, never read out of it:
//
//   - Capture is the tls.Config's KeyLogWriter (chained before the one the
//     application set, which still receives every line). It keeps
//     CLIENT_TRAFFIC_SECRET_0 and SERVER_TRAFFIC_SECRET_0 per client random,
//     until the connection's Recorder claims them, and zeroes each line's
//     buffer once read.
//   - Recorder is the socket under the tls.Conn. It parses the record
//     headers in both directions, takes the client random from the
//     ClientHello, finds the first record under the application secret in
//     each direction by authenticating it at sequence number 0 (the few
//     handshake records before it fail), then counts every record: the next
//     sequence numbers. It opens every record the client sends (following
//     its KeyUpdates, and its application data as HTTP/1.1 requests), and
//     those of ours small enough to be a KeyUpdate (crypto/tls sends one only
//     when asked, unpadded); NewSessionTicket records are counted like data.
//   - ProveIdleHTTP freezes the connection only when net/http waits for the
//     next request (idle, one deadline since, crypto/tls blocked in Read, so
//     it holds no whole record and no plaintext), the data read ends exactly
//     where a request ends (followed through its head and its body, framed
//     by Content-Length or chunked: net/http then holds none of it), and the
//     last record in each direction authenticates under keys derived anew
//     (HKDF-Expand-Label, RFC 8446 §7.1 and §7.3) from the secret handed
//     over at the sequence number before the one handed over; a KeyUpdate
//     must be the record that moved the secret on. Anything else (TLS 1.2,
//     no request yet, a request whose framing net/http might read
//     otherwise, a record that did not authenticate where it had to, an
//     alert, an unknown handshake message, a KeyUpdate not followed) is
//     refused: the connection is closed as without this package.
//   - Take then wakes crypto/tls's Read, keeps the bytes that arrived
//     meanwhile (they, and any partial record, travel as State.Unread), and
//     returns the socket once net/http has closed the tls.Conn (its
//     close_notify never reaches the socket: writes are refused once frozen).
//
// # Record layer
//
// Conn protects application data with the standard AEADs: AES-128-GCM and
// AES-256-GCM (crypto/aes, crypto/cipher), and ChaCha20-Poly1305 once
// registered (RegisterChaCha20Poly1305; importing the module
// github.com/zerodrop/zerodrop/tlsresume/chacha registers
// golang.org/x/crypto/chacha20poly1305). The standard library keeps its
// ChaCha20-Poly1305 internal, and x/crypto's module would bring x/net,
// x/term and x/text into every user's module graph, so this module does not
// require it. Without a registration the suite is refused, fail-closed:
// the Recorder reads the suite from the ServerHello and ProveIdleHTTP
// returns an *UnsupportedSuiteError (wrapped with ErrNotProven), so the
// connection is closed as without this package; New refuses such a State
// (a successor that did not register it). A registered constructor must
// pass RFC 8439's test vector. Each record must authenticate at the next sequence
// number: a tampered, replayed, reordered or dropped record ends the
// connection with a bad_record_mac alert. A KeyUpdate from the peer moves its
// direction to the next secret, and one with update_requested makes Conn
// send its own (RFC 8446 §4.6.3); UpdateKeys sends one. Any other handshake
// message, a handshake message split across records, or a record of another
// outer type is answered with unexpected_message. close_notify reads as
// io.EOF; any other alert ends the connection (*AlertError). Conn never
// sends tickets, renegotiates or pads.
//
// # Security
//
// What crosses the handoff socket: for each connection, the marshalled
// State: cipher suite, the current client and server application traffic
// secrets, both sequence numbers, the bytes read ahead (ciphertext), SNI
// and ALPN; never the certificate's private key, the handshake secrets, the
// resumption secret or any earlier traffic secret. These secrets decrypt
// and forge the connection's traffic from then on (not what came before a
// KeyUpdate), so the State is as sensitive as the private key for that one
// connection.
//
// Who can read it: the handoff socket is a Unix socket that handoff
// authenticates (SO_PEERCRED, the allowed UIDs, a directory only we may
// write), the same channel the listening sockets and the session-ticket keys
// already cross; whoever may join it could take the listeners anyway. The
// State never touches disk or a log: no error or log line of this package,
// drain or handoff includes it.
//
// How secrets are erased: State.Zero, Conn.Close and the Recorder's
// forget clear every copy this package holds (secrets, derived IVs, the
// marshalled bytes once handed over, the key log line); key and IV byte
// slices are cleared right after the AEAD is built. What Go cannot erase:
// the AEADs' expanded key schedules inside crypto/aes and, when registered,
// x/crypto (no
// erase API; they become garbage when the Conn is dropped), copies the
// garbage collector made while moving stacks, crypto/tls's own copies inside
// the tls.Conn, and the handoff frame buffer's copy (garbage once sent).
//
// What is refused: TLS 1.2 and earlier (their key log line has no traffic
// secret; no Recorder starts), ChaCha20-Poly1305 unless registered, HTTP/2 (its HPACK and stream state cannot
// travel: the drain's two-step GOAWAY stays), connections with client
// certificates (the successor could not show them to handlers), connections
// not provably idle, and any state not proven exactly.
//
// # Handing over again
//
// A continued connection is handed over again without any proof: Conn
// knows its state exactly. Conn.Export returns the socket and a State
// whose Plain carries the application data already decrypted and not
// consumed (the drain takes it from net/http as it takes a plain
// connection, in the Read net/http makes between two requests).
//
// # Platform
//
// Linux only, as all of zerodrop.
package tlsresume
