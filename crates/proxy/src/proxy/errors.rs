//! Turning a pingora error into how the transport ended (`TransportEnd`).
//!
//! Owns the mapping from pingora's `ErrorSource` / `ErrorType` (and the
//! `io::Error` underneath) to tokentap's bounded `ErrorType`. Pure: tested
//! with constructed errors.

use pingora::{Error, ErrorSource, ErrorType as P};
use std::io;
use tokentap_core::record::{ErrorType, TransportEnd};

/// How a request ended, given the error pingora handed to `logging`.
pub fn classify(e: Option<&Error>) -> TransportEnd {
    let Some(e) = e else {
        return TransportEnd::Complete;
    };
    match e.esource() {
        ErrorSource::Downstream => match e.etype() {
            P::ConnectionClosed
            | P::ReadError
            | P::WriteError
            | P::H2Error
            | P::ReadTimedout
            | P::WriteTimedout => TransportEnd::ClientGone,
            _ => TransportEnd::BadRequest,
        },
        ErrorSource::Upstream => TransportEnd::Upstream(upstream_kind(e)),
        ErrorSource::Internal | ErrorSource::Unset => match e.etype() {
            // Connect-phase errors may carry no source.
            P::ConnectTimedout | P::ConnectRefused | P::ConnectError | P::ConnectNoRoute => {
                TransportEnd::Upstream(upstream_kind(e))
            }
            _ => TransportEnd::Internal,
        },
    }
}

fn io_kind(e: &Error) -> Option<io::ErrorKind> {
    e.root_cause()
        .downcast_ref::<io::Error>()
        .map(io::Error::kind)
}

fn upstream_kind(e: &Error) -> ErrorType {
    match e.etype() {
        P::ConnectRefused => ErrorType::ConnectRefused,
        P::ConnectTimedout => ErrorType::ConnectTimeout,
        P::ConnectNoRoute
        | P::ConnectError
        | P::BindError
        | P::SocketError
        | P::ConnectProxyFailure => ErrorType::ConnectError,
        P::TLSWantX509Lookup
        | P::TLSHandshakeFailure
        | P::TLSHandshakeTimedout
        | P::InvalidCert
        | P::HandshakeError => ErrorType::Tls,
        P::ReadTimedout | P::WriteTimedout => ErrorType::ReadTimeout,
        P::InvalidHTTPHeader | P::H1Error => ErrorType::InvalidHttp,
        // pingora-core's body errors (and `raw_body`'s): broken framing.
        P::Custom("InvalidChunk" | "InvalidTrailerEnd" | "PrematureBodyEnd") => {
            ErrorType::InvalidHttp
        }
        P::H2Error | P::InvalidH2 | P::H2Downgrade => ErrorType::Http2,
        P::ConnectionClosed | P::ReadError | P::WriteError => match io_kind(e) {
            Some(io::ErrorKind::TimedOut) => ErrorType::ReadTimeout,
            Some(io::ErrorKind::ConnectionReset) | Some(io::ErrorKind::BrokenPipe) => {
                ErrorType::ConnectionReset
            }
            _ => ErrorType::ConnectionClosed,
        },
        _ => ErrorType::ConnectError,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(t: P, cause: Option<io::ErrorKind>) -> Box<Error> {
        let mut e = match cause {
            // Nested like pingora's own: an outer error caused by an inner one.
            Some(k) => Error::because(
                t.clone(),
                "outer",
                Error::because(t, "inner", io::Error::new(k, "x")),
            ),
            None => Error::new(t),
        };
        e.esource = ErrorSource::Upstream;
        e
    }

    #[test]
    fn classifies() {
        assert_eq!(classify(None), TransportEnd::Complete);
        let mut d = Error::new(P::ConnectionClosed);
        d.esource = ErrorSource::Downstream;
        assert_eq!(classify(Some(&d)), TransportEnd::ClientGone);
        let mut d = Error::new(P::InvalidHTTPHeader);
        d.esource = ErrorSource::Downstream;
        assert_eq!(classify(Some(&d)), TransportEnd::BadRequest);
        let cases = [
            (up(P::ConnectRefused, None), ErrorType::ConnectRefused),
            (up(P::ConnectTimedout, None), ErrorType::ConnectTimeout),
            (up(P::TLSHandshakeFailure, None), ErrorType::Tls),
            (
                up(P::ReadError, Some(io::ErrorKind::TimedOut)),
                ErrorType::ReadTimeout,
            ),
            (
                up(P::ReadError, Some(io::ErrorKind::ConnectionReset)),
                ErrorType::ConnectionReset,
            ),
            (up(P::ConnectionClosed, None), ErrorType::ConnectionClosed),
            (up(P::InvalidHTTPHeader, None), ErrorType::InvalidHttp),
            (up(P::new("InvalidChunk"), None), ErrorType::InvalidHttp),
        ];
        for (e, want) in cases {
            assert_eq!(classify(Some(&e)), TransportEnd::Upstream(want), "{e}");
        }
    }
}
