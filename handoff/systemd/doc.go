// Package systemd is the systemd side of a zero-downtime restart: socket
// activation as a source of listeners, the sd_notify lifecycle, and the file
// descriptor store that keeps listening sockets (and their accept queues) alive
// across "systemctl restart".
//
// # Socket activation
//
// Activated reads LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES once, checks every
// fd (open, a socket, close-on-exec set) and unsets the variables. Take hands
// out one fd at a time, by FileDescriptorName= or by local address.
package systemd
