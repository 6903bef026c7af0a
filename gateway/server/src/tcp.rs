//! The opc.tcp transport adapter: accepts sockets and drives one
//! connection per socket (see `driver.rs`). I/O only; all protocol
//! decisions are in `uagate-proto` and the services.

use std::sync::Arc;
use std::time::Instant;

use opcua_core::comms::tcp_types::ErrorMessage;
use opcua_types::{SimpleBinaryEncodable, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::admission::ConnectionAdmission;
use crate::driver::{drive_transport, Transport};
use crate::Engine;

/// Accepts connections until `cancel`; one task per connection.
pub async fn accept_loop(engine: Arc<Engine>, listener: TcpListener, cancel: CancellationToken) {
    loop {
        let accepted = tokio::select! {
            _ = cancel.cancelled() => break,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, peer)) => {
                // Admission comes before any protocol or crypto state exists.
                match engine
                    .pipeline
                    .admission()
                    .admit_connection(peer.ip(), Instant::now())
                {
                    Ok(admitted) => {
                        let _ = stream.set_nodelay(true);
                        let engine = engine.clone();
                        let cancel = cancel.clone();
                        tokio::spawn(async move {
                            tracing::debug!(%peer, "connection accepted");
                            drive(engine, stream, cancel, admitted).await;
                            tracing::debug!(%peer, "connection closed");
                        });
                    }
                    Err(refusal) if refusal.is_connection_capacity() => {
                        // Full: an unused channel may make room (the rate
                        // limiter has already approved this caller).
                        let engine = engine.clone();
                        let cancel = cancel.clone();
                        tokio::spawn(async move {
                            match reclaim_for(&engine, peer.ip()).await {
                                Some(admitted) => {
                                    let _ = stream.set_nodelay(true);
                                    drive(engine, stream, cancel, admitted).await;
                                }
                                None => {
                                    tracing::debug!(%peer, %refusal, "connection refused");
                                    refuse(stream).await;
                                }
                            }
                        });
                    }
                    Err(refusal) => {
                        tracing::debug!(%peer, %refusal, "connection refused");
                        tokio::spawn(refuse(stream));
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

/// Closes the longest-unused channel and retries the caller's Connection
/// and Handshake charges for a short while; `None` when nothing could be
/// reclaimed or the room went to someone else.
async fn reclaim_for(engine: &Engine, ip: std::net::IpAddr) -> Option<ConnectionAdmission> {
    if !engine.channels.reclaimer().reclaim_one() {
        return None;
    }
    let admission = engine.pipeline.admission();
    let caller = admission.classify(ip);
    for _ in 0..20 {
        // The reclaimed driver releases its lease when it ends.
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        if let Ok(admitted) = admission.admit_stages(caller.clone(), ip) {
            tracing::info!("unused channel reclaimed for a new connection");
            return Some(admitted);
        }
    }
    None
}

/// Answers a connection that was not admitted with an Error message
/// (BadTcpNotEnoughResources) and closes it, spending at most one second.
async fn refuse(mut stream: TcpStream) {
    let msg = ErrorMessage::new(
        StatusCode::BadTcpNotEnoughResources,
        "BadTcpNotEnoughResources",
    );
    let mut out = Vec::with_capacity(msg.byte_len());
    if msg.encode(&mut out).is_ok() {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
            let _ = stream.write_all(&out).await;
            let _ = stream.shutdown().await;
        })
        .await;
    }
}

/// opc.tcp: the socket itself.
struct TcpTransport(TcpStream);

impl Transport for TcpTransport {
    const SCHEME: &'static str = "opc.tcp";

    async fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf).await
    }

    async fn send(&mut self, bytes: Vec<u8>) -> std::io::Result<()> {
        self.0.write_all(&bytes).await
    }

    async fn close(&mut self, _status: Option<StatusCode>) {
        let _ = self.0.shutdown().await;
    }
}

/// Drives one admitted opc.tcp connection (see [`drive_transport`]).
async fn drive(
    engine: Arc<Engine>,
    stream: TcpStream,
    cancel: CancellationToken,
    admitted: ConnectionAdmission,
) {
    drive_transport(engine, TcpTransport(stream), cancel, admitted).await
}
