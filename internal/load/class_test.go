package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
)

func TestClassify(t *testing.T) {
	op := func(op string, err error) error {
		return &net.OpError{Op: op, Net: "tcp", Err: os.NewSyscallError(op, err)}
	}
	for _, tt := range []struct {
		err  error
		want Class
	}{
		{nil, OK},
		{&statusError{503}, Status},
		{fmt.Errorf("x: %w", &statusError{404}), Status},
		{op("dial", syscall.ECONNREFUSED), Refused},
		{op("read", syscall.ECONNRESET), Reset},
		{op("write", syscall.EPIPE), Reset},
		{op("read", syscall.ECONNABORTED), Reset},
		{&url.Error{Op: "Get", URL: "http://x/", Err: op("read", syscall.ECONNRESET)}, Reset},
		{io.EOF, EOF},
		{io.ErrUnexpectedEOF, EOF},
		{fmt.Errorf("net/http: HTTP/1.x transport connection broken: %w", io.ErrUnexpectedEOF), EOF},
		{errors.New("http: server closed idle connection"), EOF},
		{context.DeadlineExceeded, Timeout},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, Timeout},
		{&url.Error{Op: "Get", URL: "http://x/", Err: context.DeadlineExceeded}, Timeout},
		{context.Canceled, Other},
		{errors.New("something else"), Other},
	} {
		if got := Classify(tt.err); got != tt.want {
			t.Errorf("Classify(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}
