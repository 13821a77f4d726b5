package quicdrain

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"

	"github.com/quic-go/quic-go"
)

// CIDLen is the length of the connection IDs a generation issues: one byte
// of generation, 13 random bytes, and a 2-byte tag under the lineage key.
const CIDLen = 16

// CIDGenOffset is where, in a connection ID a generation issues, the low
// byte of its generation number is: what a router outside this package
// (package steer's QUIC program, in the kernel) reads to find the
// generation of a datagram (steer.QUIC{CIDLen: CIDLen, GenOffset:
// CIDGenOffset}).
const CIDGenOffset = 0

// KeyLen is the length of a lineage key.
const KeyLen = 16

// cidCodec issues and checks the connection IDs of one lineage: every
// generation of a lineage shares its key (the predecessor hands it over),
// so any generation can read which generation issued an ID, and a forged
// or random ID passes the tag only once in 65536.
type cidCodec struct {
	block cipher.Block
	key   []byte
	gen   byte
}

func newCIDCodec(key []byte, gen uint64) (*cidCodec, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return &cidCodec{block: b, key: append([]byte(nil), key...), gen: byte(gen)}, nil
}

// tag computes the 2-byte tag of id[:CIDLen-2] into out.
func (c *cidCodec) tag(id []byte, out []byte) {
	var blk [16]byte
	copy(blk[:], id[:CIDLen-2])
	c.block.Encrypt(blk[:], blk[:])
	out[0], out[1] = blk[0], blk[1]
}

// GenerateConnectionID implements quic.ConnectionIDGenerator.
func (c *cidCodec) GenerateConnectionID() (quic.ConnectionID, error) {
	var id [CIDLen]byte
	id[CIDGenOffset] = c.gen
	if _, err := rand.Read(id[1 : CIDLen-2]); err != nil {
		return quic.ConnectionID{}, err
	}
	c.tag(id[:], id[CIDLen-2:])
	return quic.ConnectionIDFromBytes(id[:]), nil
}

// ConnectionIDLen implements quic.ConnectionIDGenerator.
func (c *cidCodec) ConnectionIDLen() int { return CIDLen }

// generation returns the generation byte of id and whether id is one of
// the lineage's.
func (c *cidCodec) generation(id []byte) (byte, bool) {
	if len(id) != CIDLen {
		return 0, false
	}
	var t [2]byte
	c.tag(id, t[:])
	return id[CIDGenOffset], t[0] == id[CIDLen-2] && t[1] == id[CIDLen-1]
}
