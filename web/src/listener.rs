//! The console's own HTTPS listener. It is separate from the data plane's
//! listeners and their admission control, so an administrator always gets
//! in, even while OPC UA clients saturate the gateway.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::{Extension, Router};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

/// A TLS handshake that takes longer than this is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Console connections served at once; further ones wait in the backlog.
const MAX_CONNECTIONS: usize = 256;

/// Serves `app` over TLS (`tls`) on `listener` until `cancel` fires. Each
/// connection gets its peer address as [`ConnectInfo`] (login throttling).
/// Called once by `uagate run` with the console address of `[listen]`.
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    app: Router,
    cancel: CancellationToken,
) {
    let acceptor = TlsAcceptor::from(tls);
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            _ = cancel.cancelled() => return,
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
        };
        let (tcp, peer) = tokio::select! {
            _ = cancel.cancelled() => return,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "console accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "console TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let service =
                TowerToHyperService::new(app.layer(Extension(ConnectInfo::<SocketAddr>(peer))));
            let builder = Builder::new(TokioExecutor::new());
            let conn = builder.serve_connection(TokioIo::new(tls), service);
            tokio::select! {
                r = conn => if let Err(e) = r {
                    tracing::debug!(%peer, error = %e, "console connection ended");
                },
                _ = cancel.cancelled() => {}
            }
        });
    }
}
