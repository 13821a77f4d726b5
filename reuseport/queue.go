package reuseport

import (
	"fmt"
	"syscall"

	"github.com/zerodrop/zerodrop/internal/linux"
)

// Queue is a listener's accept queue as TCP_INFO reports it.
type Queue struct {
	Len     uint32 `json:"len"`     // connections waiting for accept (tcpi_unacked)
	Backlog uint32 `json:"backlog"` // effective backlog (tcpi_sacked); the queue holds Backlog+1
}

// ReadQueue reads the accept queue of a listening TCP socket. It does not take
// ownership of the socket. A socket that is not listening gives EINVAL.
func ReadQueue(c syscall.Conn) (Queue, error) {
	var q Queue
	err := linux.Control(c, func(fd int) error {
		var err error
		q.Len, q.Backlog, err = linux.ListenQueue(fd)
		return err
	})
	if err != nil {
		return Queue{}, fmt.Errorf("read queue: %w", err)
	}
	return q, nil
}
