package chacha

import (
	"github.com/zerodrop/zerodrop/tlsresume"
	"golang.org/x/crypto/chacha20poly1305"
)

func init() {
	// It fails only if x/crypto's ChaCha20-Poly1305 did not compute RFC
	// 8439's test vector: a broken build, not a condition to handle.
	if err := tlsresume.RegisterChaCha20Poly1305(chacha20poly1305.New); err != nil {
		panic(err)
	}
}
