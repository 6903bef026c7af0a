#![forbid(unsafe_code)]
//! `opcua-ref-server`: the plain async-opcua-server the Read benchmark
//! compares uagate against.
//!
//! It is built like `uagate sim` (core namespace-0 node manager, anonymous
//! None and Basic256Sha256 SignAndEncrypt endpoints, client certificates
//! trusted automatically) but with a session limit high enough for 64
//! concurrent sessions (`uagate sim` keeps the async-opcua default of 20).
//! Prints `READY opc.tcp=<url>` on stdout once listening; stops on
//! SIGTERM / Ctrl-C. Used only by `bench/run.sh`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use opcua_crypto::SecurityPolicy;
use opcua_server::{
    node_manager::memory::{CoreNodeManagerBuilder, InMemoryNodeManagerBuilder},
    ServerBuilder, ServerEndpoint, ANONYMOUS_USER_TOKEN_ID,
};
use opcua_types::MessageSecurityMode;

/// Command line of the reference server.
#[derive(Parser)]
struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: std::net::SocketAddr,
    /// PKI directory (own certificate is created if missing).
    #[arg(long)]
    pki: PathBuf,
    /// Most concurrent sessions.
    #[arg(long, default_value_t = 200)]
    max_sessions: usize,
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot bind {}", args.listen))?;
    let addr = listener.local_addr()?;
    let host = addr.ip().to_string();
    let url = format!("opc.tcp://{host}:{}/", addr.port());
    let tokens = [ANONYMOUS_USER_TOKEN_ID];
    let builder = ServerBuilder::new()
        .without_node_managers()
        .with_node_manager(InMemoryNodeManagerBuilder::new(CoreNodeManagerBuilder))
        .application_name("async-opcua reference server")
        .application_uri("urn:uagate:bench:ref-server")
        .product_uri("urn:uagate:bench:ref-server")
        .pki_dir(args.pki)
        .create_sample_keypair(true)
        .trust_client_certs(true)
        .host(host)
        .port(addr.port())
        .discovery_urls(vec![url.clone()])
        .max_sessions(args.max_sessions)
        .add_endpoint(
            "none",
            ServerEndpoint::new_none("/", &[ANONYMOUS_USER_TOKEN_ID.to_owned()]),
        )
        .add_endpoint(
            "basic256sha256_sign_encrypt",
            (
                "/",
                SecurityPolicy::Basic256Sha256,
                MessageSecurityMode::SignAndEncrypt,
                &tokens as &[&str],
            ),
        )
        .default_endpoint("none");
    // Building may generate an RSA key pair; nothing else runs yet, so
    // blocking this thread briefly is harmless.
    let (server, handle) = builder
        .build()
        .map_err(|e| anyhow::anyhow!("cannot build server: {e}"))?;
    let task = tokio::spawn(server.run_with(listener));
    println!("READY opc.tcp={url}");

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
    handle.cancel();
    match task.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(anyhow::anyhow!("server failed: {e}")),
        Err(e) => Err(anyhow::anyhow!("server task: {e}")),
    }
}
