// Package httpserver copies the configuration of an http.Server: what
// zerodrop.Serve gives each address after the first, and what quicdrain.Serve
// gives each TCP listener beside its UDP socket.
package httpserver

import "net/http"

// Copy returns a new http.Server with every exported field of s that
// configures serving (all but Addr, which the listener replaces). The copy
// shares s's Handler, TLSConfig and hooks (ConnState, BaseContext,
// ConnContext, TLSNextProto), not its state: RegisterOnShutdown functions,
// connections and listeners stay with s. Make it before anything wraps s's
// hooks (drain.Server does as it starts serving), or the copy shares the
// wrappers.
func Copy(s *http.Server) *http.Server {
	return &http.Server{
		Handler: s.Handler, DisableGeneralOptionsHandler: s.DisableGeneralOptionsHandler, TLSConfig: s.TLSConfig,
		ReadTimeout: s.ReadTimeout, ReadHeaderTimeout: s.ReadHeaderTimeout, WriteTimeout: s.WriteTimeout,
		IdleTimeout: s.IdleTimeout, MaxHeaderBytes: s.MaxHeaderBytes, TLSNextProto: s.TLSNextProto,
		ConnState: s.ConnState, ErrorLog: s.ErrorLog, BaseContext: s.BaseContext, ConnContext: s.ConnContext,
		HTTP2: s.HTTP2, Protocols: s.Protocols,
	}
}
