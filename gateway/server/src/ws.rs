//! opc.wss: UACP over WebSocket (OPC 10000-6 §7.5, subprotocol
//! `opcua+uacp`). After the HTTP upgrade the connection runs through the
//! same sans-IO UACP core and driver as opc.tcp; this adapter only moves
//! bytes: each binary message received is fed to the protocol as it comes
//! (a message normally holds one chunk; bytes split differently by a bridge
//! are reassembled by the same framer as on TCP), and each UACP message the
//! protocol sends goes out as exactly one binary message.
//!
//! Close codes: 1009 only when a message exceeds the limit; 1013 (Try Again
//! Later) when the connection is refused or closed for lack of capacity;
//! 1003 for a text message; 1000 otherwise.
//!
//! Keep-alive: pings from the client are answered. When the client has
//! sent nothing for `server.websocket_ping_interval` (30 s by default), the
//! server pings it; a client that still sends nothing (not even the pong)
//! for another such period is taken as gone: the server sends Close 1001
//! and the connection ends like a closed socket (a proxy in between may
//! have dropped it silently).

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use opcua_types::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::tungstenite::error::{CapacityError, Error as WsError};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::driver::Transport;

/// The subprotocol of UACP over WebSocket.
pub const SUBPROTOCOL: &str = "opcua+uacp";

/// Transport profile of opc.wss with UACP/UA Binary (OPC 10000-7).
pub const WSS_PROFILE: &str = "http://opcfoundation.org/UA-Profile/Transport/wss-uasc-uabinary";

/// The WebSocket close code for the reason a UACP connection ended.
pub fn close_code(status: Option<StatusCode>) -> CloseCode {
    match status {
        Some(
            StatusCode::BadTcpMessageTooLarge
            | StatusCode::BadRequestTooLarge
            | StatusCode::BadResponseTooLarge,
        ) => CloseCode::Size,
        Some(
            StatusCode::BadTcpNotEnoughResources
            | StatusCode::BadServerTooBusy
            | StatusCode::BadTcpServerTooBusy
            | StatusCode::BadTooManySessions,
        ) => CloseCode::Again,
        _ => CloseCode::Normal,
    }
}

/// A WebSocket as the byte transport of one UACP connection.
pub(crate) struct WsTransport<S> {
    ws: WebSocketStream<S>,
    /// The binary message being read, and how much of it was consumed.
    pending: Option<(Bytes, usize)>,
    /// Set when the peer broke a WebSocket rule and was sent a close frame.
    closed: bool,
    /// When the client last sent anything, and whether a ping is out.
    last_heard: tokio::time::Instant,
    pinged: bool,
    ping_after: std::time::Duration,
}

/// How long sending a Close frame may take before the connection is
/// dropped without it.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl<S> WsTransport<S> {
    /// Wraps an upgraded WebSocket; the client is pinged after `ping_after`
    /// of silence and dropped after as long again (see the module doc).
    /// Called by the TLS listener for each opc.wss upgrade.
    pub(crate) fn with_keepalive(ws: WebSocketStream<S>, ping_after: std::time::Duration) -> Self {
        WsTransport {
            ws,
            pending: None,
            closed: false,
            last_heard: tokio::time::Instant::now(),
            pinged: false,
            ping_after,
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> WsTransport<S> {
    /// Sends a close frame (best effort) and remembers it.
    async fn close_with(&mut self, code: CloseCode, reason: &str) {
        if !self.closed {
            self.closed = true;
            let frame = CloseFrame {
                code,
                reason: reason.into(),
            };
            // Bounded: a peer that does not read cannot hold the
            // connection open through a Close frame that never leaves.
            let _ = tokio::time::timeout(CLOSE_WAIT, self.ws.close(Some(frame))).await;
        }
    }

    /// Waits for the next binary message; `Ok(false)` at the end.
    async fn fill(&mut self) -> std::io::Result<bool> {
        loop {
            if self.pending.as_ref().is_some_and(|(b, at)| *at < b.len()) {
                return Ok(true);
            }
            self.pending = None;
            let deadline = self.last_heard + self.ping_after;
            let next = match tokio::time::timeout_at(deadline, self.ws.next()).await {
                Ok(next) => next,
                Err(_) if self.pinged => {
                    // Nothing since the ping either: the peer is gone.
                    self.close_with(CloseCode::Away, "no answer to ping").await;
                    return Ok(false);
                }
                Err(_) => {
                    self.pinged = true;
                    self.last_heard = tokio::time::Instant::now();
                    if self.ws.send(Message::Ping(Bytes::new())).await.is_err() {
                        return Ok(false);
                    }
                    continue;
                }
            };
            self.last_heard = tokio::time::Instant::now();
            self.pinged = false;
            match next {
                None | Some(Ok(Message::Close(_))) => return Ok(false),
                Some(Ok(Message::Binary(b))) => self.pending = Some((b, 0)),
                // Pings are answered by the library when we flush.
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {
                    let _ = self.ws.flush().await;
                }
                Some(Ok(Message::Text(_))) => {
                    self.close_with(CloseCode::Unsupported, "opcua+uacp carries binary messages")
                        .await;
                    return Err(std::io::Error::other("text message on opcua+uacp"));
                }
                Some(Err(WsError::Capacity(CapacityError::MessageTooLong { .. }))) => {
                    self.close_with(CloseCode::Size, "message too large").await;
                    return Err(std::io::Error::other("WebSocket message too large"));
                }
                Some(Err(e)) => return Err(std::io::Error::other(e)),
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> Transport for WsTransport<S> {
    const SCHEME: &'static str = "opc.wss";

    async fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if !self.fill().await? {
            return Ok(0);
        }
        let Some((b, at)) = self.pending.as_mut() else {
            return Ok(0);
        };
        let n = (b.len() - *at).min(buf.len());
        buf[..n].copy_from_slice(&b[*at..*at + n]);
        *at += n;
        Ok(n)
    }

    async fn send(&mut self, bytes: Vec<u8>) -> std::io::Result<()> {
        // One UACP message (8-byte header with its size) per binary message;
        // the messages share the buffer (no copy).
        let mut rest = Bytes::from(bytes);
        while !rest.is_empty() {
            let size = rest
                .get(4..8)
                .and_then(|s| s.try_into().ok())
                .map(|s: [u8; 4]| u32::from_le_bytes(s) as usize)
                .filter(|n| *n >= 8 && *n <= rest.len())
                .unwrap_or(rest.len());
            let msg = rest.split_to(size);
            self.ws
                .feed(Message::Binary(msg))
                .await
                .map_err(std::io::Error::other)?;
        }
        self.ws.flush().await.map_err(std::io::Error::other)
    }

    async fn close(&mut self, status: Option<StatusCode>) {
        let code = close_code(status);
        let reason = match code {
            CloseCode::Size => "message too large",
            CloseCode::Again => "try again later",
            _ => "",
        };
        self.close_with(code, reason).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_tungstenite::tungstenite::protocol::Role;

    /// A server transport and the raw client end of an in-memory WebSocket.
    async fn pair(
        ping_after: std::time::Duration,
    ) -> (
        WsTransport<tokio::io::DuplexStream>,
        WebSocketStream<tokio::io::DuplexStream>,
    ) {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let server = WebSocketStream::from_raw_socket(a, Role::Server, None).await;
        let client = WebSocketStream::from_raw_socket(b, Role::Client, None).await;
        (WsTransport::with_keepalive(server, ping_after), client)
    }

    #[tokio::test]
    async fn a_quiet_client_is_pinged_and_dropped_when_it_stays_silent() {
        let period = std::time::Duration::from_millis(100);
        let (mut server, mut client) = pair(period).await;
        let started = tokio::time::Instant::now();
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 16];
            let r = server
                .read(&mut buf)
                .await
                .map(|n| (Some(n), started.elapsed()));
            // Kept open so the client can read the close frame.
            (r, server)
        });
        // The client hears a ping after one quiet period...
        let first = tokio::time::timeout(std::time::Duration::from_secs(5), client.next())
            .await
            .ok()
            .flatten()
            .and_then(Result::ok);
        assert!(matches!(first, Some(Message::Ping(_))), "{first:?}");
        // ...and, answering nothing, is given up after another one.
        let (outcome, _server) = tokio::time::timeout(std::time::Duration::from_secs(5), reader)
            .await
            .ok()
            .and_then(Result::ok)
            .map_or((None, None), |(r, s)| (r.ok(), Some(s)));
        let Some((Some(0), waited)) = outcome else {
            panic!("expected the end of the connection, got {outcome:?}");
        };
        assert!(waited >= period * 2, "gave up after {waited:?}");
        let closing = tokio::time::timeout(std::time::Duration::from_secs(5), client.next())
            .await
            .ok()
            .flatten()
            .and_then(Result::ok);
        let Some(Message::Close(Some(frame))) = closing else {
            panic!("expected a close frame, got {closing:?}");
        };
        assert_eq!(frame.code, CloseCode::Away);
    }

    #[tokio::test]
    async fn a_client_that_answers_pings_stays_and_its_data_is_read() {
        let period = std::time::Duration::from_millis(100);
        let (mut server, mut client) = pair(period).await;
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 16];
            let n = server.read(&mut buf).await;
            (n.ok(), buf)
        });
        // Reading makes the client answer the ping (the pong goes out with
        // the next write); then, well after two periods, it sends data.
        let ping = tokio::time::timeout(std::time::Duration::from_secs(5), client.next()).await;
        assert!(matches!(ping, Ok(Some(Ok(Message::Ping(_))))), "{ping:?}");
        tokio::time::sleep(period / 2).await;
        client.flush().await.ok();
        tokio::time::sleep(period / 2).await;
        client
            .send(Message::Binary(Bytes::from_static(b"HELF")))
            .await
            .ok();
        let (n, buf) = tokio::time::timeout(std::time::Duration::from_secs(5), reader)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or((None, [0; 16]));
        assert_eq!(n, Some(4));
        assert_eq!(&buf[..4], b"HELF");
    }

    #[test]
    fn close_codes_follow_the_reason() {
        assert_eq!(
            close_code(Some(StatusCode::BadTcpMessageTooLarge)),
            CloseCode::Size
        );
        assert_eq!(
            close_code(Some(StatusCode::BadTcpNotEnoughResources)),
            CloseCode::Again
        );
        assert_eq!(close_code(Some(StatusCode::Good)), CloseCode::Normal);
        assert_eq!(close_code(None), CloseCode::Normal);
    }
}
