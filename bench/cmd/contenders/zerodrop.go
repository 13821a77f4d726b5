package main

// zerodropSpecs are the zerodrop strategies.
//
// TODO(issue 7): wire in, as their packages land:
//   - drain: reuseport + migration + package drain (close the listener first,
//     serve what was accepted, then shut down);
//   - handoff: package handoff, the listening sockets passed over its unix
//     socket to the new process;
//   - systemd: handoff/systemd, the fd-store restart;
//   - steer: reuseport/steer, eBPF steering away from a draining member.
func zerodropSpecs() []spec {
	return nil
}
