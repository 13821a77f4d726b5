// Package tlstest holds the test helpers that the tests of tlsresume and of
// the tlsresume/chacha module share: an openssl s_client driver, a loopback
// TCP pair, an HTTPS server whose sockets pass through a wrapper (a
// tlsresume.Recorder) and the successor that serves the connections handed
// over.
//
// It does not import tlsresume (tlsresume's own tests, in package
// tlsresume, import it): what it needs of tlsresume's types, it takes as
// functions or through the Recorder interface. Helpers that need
// tlsresume's unexported names stay in tlsresume's _test files.
package tlstest
