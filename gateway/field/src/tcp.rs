//! The TCP connection of a field link: TCP_NODELAY on, and quick ACKs
//! after every read.
//!
//! Requests to one field server are pipelined (the merged Reads of many
//! clients, up to four in flight; the mounts of one request served at
//! once). A field server that keeps Nagle's algorithm on (async-opcua's
//! server does, and so do some PLCs) holds a reply while the previous one
//! is unacknowledged; when the gateway has no next request for that socket
//! to carry the ACK, only the kernel's delayed-ACK timer (40 ms on Linux)
//! ends the wait. Quick ACKs make the gateway acknowledge at once
//! (BENCHMARKS.md, "One Read over 4 mounts (issue 16)"). The option is not
//! sticky, so it is set again after every read.

use std::pin::Pin;
use std::task::{Context, Poll};

use opcua_client::transport::StreamConnection;
use opcua_core::comms::tcp_codec::TcpCodec;
use opcua_types::{DecodingOptions, Error, StatusCode};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// The transport of a field link.
pub type FieldTransport = opcua_client::transport::StreamTransport<QuickAckRead, OwnedWriteHalf>;

/// The read half of a field link's socket; re-arms quick ACKs after each
/// read that returned data.
pub struct QuickAckRead(OwnedReadHalf);

impl AsyncRead for QuickAckRead {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.0).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            quick_ack(self.0.as_ref());
        }
        polled
    }
}

/// Asks the kernel to acknowledge received data at once (Linux); elsewhere
/// nothing.
fn quick_ack(socket: &TcpStream) {
    #[cfg(target_os = "linux")]
    if let Err(e) = socket2::SockRef::from(socket).set_tcp_quickack(true) {
        tracing::trace!(error = %e, "TCP_QUICKACK not set on a field link");
    }
    #[cfg(not(target_os = "linux"))]
    let _ = socket;
}

/// How long a field link's connect attempt waits for the name of its
/// server to resolve. The system resolver retries a lost DNS answer after
/// 5 s; this leaves room for one retry and still says that the lookup, not
/// the server, was slow.
pub const NAME_LOOKUP_BOUND: std::time::Duration = std::time::Duration::from_secs(12);

/// The words a failed name lookup's detail starts with when it did not
/// finish within its bound; the console tells it apart from a server that
/// did not answer by them.
pub const NAME_LOOKUP_SLOW: &str = "the name lookup of";

/// Resolves the host of `url` to its first address within `bound`. Called
/// before every connect attempt and by Test connection, so that a name
/// that is not found (BadTcpEndpointUrlInvalid, "does not resolve") and
/// a lookup that takes too long (BadTimeout, [`NAME_LOOKUP_SLOW`]) are
/// reported as such rather than as a server that did not answer.
pub async fn resolve(
    url: &str,
    host: &str,
    port: u16,
    bound: std::time::Duration,
) -> Result<std::net::SocketAddr, Error> {
    resolve_with(url, host, bound, tokio::net::lookup_host((host, port))).await
}

/// [`resolve`] with the system's lookup passed in, so that the answers are
/// tested without a resolver.
async fn resolve_with<A: Iterator<Item = std::net::SocketAddr>>(
    url: &str,
    host: &str,
    bound: std::time::Duration,
    lookup: impl std::future::Future<Output = std::io::Result<A>>,
) -> Result<std::net::SocketAddr, Error> {
    match tokio::time::timeout(bound, lookup).await {
        Ok(Ok(mut found)) => found.next().ok_or_else(|| {
            Error::new(
                StatusCode::BadTcpEndpointUrlInvalid,
                format!("{url} does not resolve to an address"),
            )
        }),
        Ok(Err(e)) => Err(Error::new(
            StatusCode::BadTcpEndpointUrlInvalid,
            format!("{url} does not resolve to an address: {e}"),
        )),
        Err(_) => Err(Error::new(
            StatusCode::BadTimeout,
            format!(
                "{NAME_LOOKUP_SLOW} {host} did not finish within {} ms",
                bound.as_millis()
            ),
        )),
    }
}

/// Opens a field link's TCP connection to `url` (`opc.tcp://host:port/...`).
/// Called by the session for every (re)connect, through the link's
/// connector.
pub async fn connect(
    url: String,
    decoding: DecodingOptions,
) -> Result<StreamConnection<QuickAckRead, OwnedWriteHalf>, Error> {
    let (host, port) = opcua_core::comms::url::hostname_port_from_url(
        &url,
        opcua_core::constants::DEFAULT_OPC_UA_SERVER_PORT,
    )
    .map_err(|st| Error::new(st, format!("no host and port in {url}")))?;
    let addr = resolve(&url, &host, port, NAME_LOOKUP_BOUND).await?;
    let socket = TcpStream::connect(addr).await.map_err(|e| {
        Error::new(
            StatusCode::BadCommunicationError,
            format!("cannot connect to {addr}: {e}"),
        )
    })?;
    if let Err(e) = socket.set_nodelay(true) {
        tracing::debug!(%addr, error = %e, "TCP_NODELAY not set on a field link");
    }
    quick_ack(&socket);
    let (reader, writer) = socket.into_split();
    Ok(StreamConnection::new(
        tokio_util::codec::FramedRead::new(QuickAckRead(reader), TcpCodec::new(decoding)),
        writer,
        url,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use std::time::Duration;

    /// A lookup that does not finish within its bound says so (BadTimeout
    /// with the words the console recognises); one that fails says the
    /// name does not resolve; an address needs no lookup at all.
    #[tokio::test]
    async fn a_slow_lookup_is_reported_as_one() {
        let url = "opc.tcp://plc-7.invalid:4840";
        let never = std::future::pending::<std::io::Result<std::vec::IntoIter<SocketAddr>>>();
        let e = resolve_with(url, "plc-7.invalid", Duration::from_millis(20), never)
            .await
            .unwrap_err();
        assert_eq!(e.status(), StatusCode::BadTimeout);
        assert!(
            e.to_string()
                .contains("the name lookup of plc-7.invalid did not finish within 20 ms"),
            "{e}"
        );
        let failed = std::future::ready(std::io::Result::<std::vec::IntoIter<SocketAddr>>::Err(
            std::io::Error::other(
                "failed to lookup address information: Name or service not known",
            ),
        ));
        let e = resolve_with(url, "plc-7.invalid", Duration::from_secs(5), failed)
            .await
            .unwrap_err();
        assert_eq!(e.status(), StatusCode::BadTcpEndpointUrlInvalid);
        assert!(
            e.to_string().contains("does not resolve to an address"),
            "{e}"
        );
        let addr = resolve(
            "opc.tcp://127.0.0.1:4840",
            "127.0.0.1",
            4840,
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        assert_eq!(addr, "127.0.0.1:4840".parse().unwrap());
    }
}
