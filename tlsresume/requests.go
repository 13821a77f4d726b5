package tlsresume

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// requests follows the HTTP/1.1 requests a client sends, as they are read,
// to tell whether the data read so far ends exactly where a request ends
// (RFC 9112 §6: a request's body is framed by Transfer-Encoding: chunked,
// else by Content-Length, else it has none). Only what net/http accepts the
// same way is followed; anything else (a Transfer-Encoding other than
// chunked, both headers, two Content-Lengths, a folded header line, an
// empty line before a request, a chunk-size line net/http might read
// otherwise) loses the framing for good: the connection is never proven.
//
// It keeps at most maxLine bytes of the line being read (cleared once
// followed: a header line may hold a cookie): a longer line is followed,
// and only lost if it is one of the two framing headers or a chunk-size
// line. Its zero value is at the start of a request.
type requests struct {
	state   reqState
	seen    int64  // bytes of the current request so far: 0 at its start
	line    []byte // the line being read, its first maxLine bytes
	long    bool   // the line was longer than line keeps
	started bool   // the request line was read
	length  int64  // the Content-Length given (hasLen)
	hasLen  bool
	chunked bool  // Transfer-Encoding: chunked given
	left    int64 // body or chunk bytes still to come
}

type reqState uint8

const (
	reqHead      reqState = iota // request line and header lines, to the empty line
	reqBody                      // left bytes of a Content-Length body
	reqChunkSize                 // a chunk-size line
	reqChunkData                 // left bytes of a chunk
	reqChunkEnd                  // the CRLF after a chunk's data
	reqTrailer                   // trailer lines, to the empty line
)

// maxLine is how many bytes of a line requests keeps: enough for any
// Content-Length, Transfer-Encoding or chunk-size line net/http reads.
const maxLine = 256

// errFraming is the reason a request's framing was not followed.
var errFraming = errors.New("request framing not followed")

// atStart tells whether the data followed ends exactly where a request ends
// (or none was read yet).
func (q *requests) atStart() bool { return q.state == reqHead && q.seen == 0 }

// feed follows application data read from the client. It returns an error
// wrapping errFraming when the framing cannot be followed any further.
func (q *requests) feed(p []byte) error {
	for len(p) > 0 {
		switch q.state {
		case reqBody, reqChunkData:
			n := int(min(q.left, int64(len(p))))
			q.left -= int64(n)
			q.seen += int64(n)
			p = p[n:]
			if q.left > 0 {
				continue
			}
			if q.state == reqBody {
				q.end()
			} else {
				q.state = reqChunkEnd
			}
		default:
			i := bytes.IndexByte(p, '\n')
			piece := p
			if i >= 0 {
				piece = p[:i]
			}
			if room := maxLine - len(q.line); room < len(piece) {
				q.line = append(q.line, piece[:max(room, 0)]...)
				q.long = true
			} else {
				q.line = append(q.line, piece...)
			}
			if i < 0 {
				q.seen += int64(len(p))
				return nil
			}
			q.seen += int64(i + 1)
			p = p[i+1:]
			line := bytes.TrimSuffix(q.line, []byte("\r"))
			err := q.endLine(line, q.long)
			clear(q.line)
			q.line, q.long = q.line[:0], false
			if err != nil {
				return fmt.Errorf("%w: %w", errFraming, err)
			}
		}
	}
	return nil
}

// endLine follows one whole line (without its CRLF; only its first maxLine
// bytes when long).
func (q *requests) endLine(line []byte, long bool) error {
	switch q.state {
	case reqHead:
		switch {
		case !q.started && len(line) == 0:
			return errors.New("empty line before a request")
		case !q.started:
			q.started = true
			return nil
		case len(line) == 0:
			return q.bodyStarts()
		case line[0] == ' ' || line[0] == '\t':
			return errors.New("folded header line")
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return nil // net/http refuses it, and closes
		}
		switch {
		case equalFold(name, "content-length"):
			value = bytes.Trim(value, " \t")
			if long || q.hasLen || !isDigits(value) {
				return errors.New("Content-Length not followed")
			}
			n, err := strconv.ParseInt(string(value), 10, 63)
			if err != nil {
				return errors.New("Content-Length out of range")
			}
			q.length, q.hasLen = n, true
		case equalFold(name, "transfer-encoding"):
			if long || q.chunked || !equalFold(bytes.Trim(value, " \t"), "chunked") {
				return errors.New("Transfer-Encoding other than chunked")
			}
			q.chunked = true
		}
		return nil
	case reqChunkSize:
		size, _, _ := bytes.Cut(line, []byte(";"))
		size = bytes.Trim(size, " \t")
		if long || len(size) > 15 || !isHex(size) {
			return errors.New("chunk-size line not followed")
		}
		n, _ := strconv.ParseInt(string(size), 16, 64) // 15 hex digits fit
		if n == 0 {
			q.state = reqTrailer
			return nil
		}
		q.state, q.left = reqChunkData, n
		return nil
	case reqChunkEnd:
		if len(line) != 0 {
			return errors.New("chunk data longer than its size")
		}
		q.state = reqChunkSize
		return nil
	case reqTrailer:
		if len(line) == 0 {
			q.end()
		}
		return nil
	}
	return nil
}

// bodyStarts follows the empty line that ends a request's head.
func (q *requests) bodyStarts() error {
	switch {
	case q.chunked && q.hasLen:
		return errors.New("both Transfer-Encoding and Content-Length")
	case q.chunked:
		q.state = reqChunkSize
	case q.length > 0:
		q.state, q.left = reqBody, q.length
	default:
		q.end()
	}
	return nil
}

// end: a request ended with the last byte followed.
func (q *requests) end() {
	line := q.line[:0]
	*q = requests{line: line}
}

// equalFold compares b with the lower-case ASCII s, ignoring ASCII case.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// isDigits tells whether b is one or more ASCII digits.
func isDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}

// isHex tells whether b is one or more ASCII hexadecimal digits.
func isHex(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return len(b) > 0
}
