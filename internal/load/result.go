package load

import "time"

// Result is what a run measured. Latencies are in milliseconds and cover ok
// requests only; failures are counted by class. "Restart" fields cover the
// buckets around marks, "steady" ones all other buckets.
type Result struct {
	Start         time.Time       `json:"start"`
	DurationMS    float64         `json:"duration_ms"`
	Requests      int64           `json:"requests"`
	Failed        int64           `json:"failed"`
	FailedByClass map[Class]int64 `json:"failed_by_class"`
	P50MS         float64         `json:"p50_ms"`
	P99MS         float64         `json:"p99_ms"`
	MaxMS         float64         `json:"max_ms"`
	P50MSSteady   float64         `json:"p50_ms_steady"`
	P99MSSteady   float64         `json:"p99_ms_steady"`
	MaxMSSteady   float64         `json:"max_ms_steady"`
	P50MSRestart  float64         `json:"p50_ms_restart"`
	P99MSRestart  float64         `json:"p99_ms_restart"`
	MaxMSRestart  float64         `json:"max_ms_restart"`

	// Pool is Config.Pool: the clients of a pool run, 0 otherwise.
	Pool int `json:"pool,omitempty"`
	// Dials counts the connections the clients opened, failed ones
	// included. In a pool run every client dials once unless the server
	// closes its connection: Dials - Pool are reconnections.
	Dials int64 `json:"dials"`
	// ServerClosed counts the connections the server closed under a
	// client (a read failed, EOF or reset, before the client closed the
	// connection). Dials - Pool can exceed it: net/http's Transport closes
	// and redials connections itself, for example when its write goroutine
	// is starved of CPU.
	ServerClosed int64 `json:"server_closed"`
	// ClientClosed counts the connections the client closed first while
	// it was sending (Config.Duration): after a response that said Connection: close
	// (AskedClose counts those responses), or on its own (net/http's
	// Transport, when its write goroutine is starved of CPU). Dials -
	// Pool - (ClientClosed - AskedClose) are the pool's reconnections the
	// server caused.
	ClientClosed int64 `json:"client_closed"`
	AskedClose   int64 `json:"asked_close"`
	// Retried counts the requests net/http's Transport sent more than
	// once, on another connection (Config.Transport, HTTP2, Pool): for
	// example a stream above the last stream id of a GOAWAY. Each counts
	// once in Requests, ok or failed as its last try ended. The
	// hand-written client never retries.
	Retried int64 `json:"retried"`

	// Headers counts ok replies by the value of Config.Header.
	Headers map[string]int64 `json:"headers,omitempty"`

	// Errors holds the first error seen in each failure class.
	Errors map[Class]string `json:"errors,omitempty"`

	// Failures details the first MaxFailures failed requests, in the order
	// they ended: when each was sent and how long it took tell a reset at
	// connect from a close seconds later.
	Failures []Failure `json:"failures,omitempty"`

	Marks   []Event  `json:"marks"`
	Buckets []Bucket `json:"buckets"`
}

// MaxFailures bounds Result.Failures.
const MaxFailures = 100

// Failure is one failed request. Error names the client's local address when
// the connection was made (the raw client's errors end "(local ip:port)"), so
// that it can be found in a capture or a server's log.
type Failure struct {
	AtMS   float64 `json:"at_ms"` // sent, since the start
	TookMS float64 `json:"took_ms"`
	Class  Class   `json:"class"`
	Error  string  `json:"error"`
}

// Event is a mark made with [Generator.Mark], and what happened around it:
// the requests sent in the buckets around it, and how many of those failed. A
// bucket around two marks counts for both.
type Event struct {
	Name     string  `json:"name"`
	AtMS     float64 `json:"at_ms"`
	Requests int64   `json:"requests"`
	Failed   int64   `json:"failed"`
}

// Bucket summarises the requests sent during one slice of the run, starting
// StartMS after its start.
type Bucket struct {
	StartMS       float64          `json:"t_ms"`
	Requests      int64            `json:"requests"`
	Failed        int64            `json:"failed"`
	FailedByClass map[Class]int64  `json:"failed_by_class,omitempty"`
	P99MS         float64          `json:"p99_ms"`
	NearMark      bool             `json:"near_mark"`
	Headers       map[string]int64 `json:"headers,omitempty"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
