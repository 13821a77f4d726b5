// Package sockets is the table of the named sockets one generation of a
// service holds: which name, where each came from (a predecessor, systemd's
// socket activation, or created fresh), the checks each origin gets, the
// reference kept to offer it to a successor, and the closing of what nobody
// claimed.
//
// Every origin goes through the same Listen: a TCP socket comes back as a
// *reuseport.Listener and a UDP one as a *reuseport.PacketConn whatever its
// origin; an inherited or activated socket's options are checked against
// Config.Listen the same way (*reuseport.OptionMismatchError, or a logged
// warning with Config.WarnOnMismatch); and the ownership fact drain's stop
// relies on is recorded for the socket the moment the table takes it: a
// socket received from a predecessor is marked as still served by it, one
// from systemd as held by systemd. A drain that did not know another process
// holds its socket could shut it down under that process.
//
// Package handoff moves a table between processes: it validates what a
// predecessor sends, hands the table its sockets (NewInherited), and offers
// Table.Offer to a successor. zerodrop.Open builds exactly one table, with
// or without handoff.
package sockets
