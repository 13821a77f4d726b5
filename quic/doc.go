// Package quic restarts QUIC and HTTP/3 servers without losing a connection.
package quicdrain
