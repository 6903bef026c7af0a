#![forbid(unsafe_code)]
//! A byte relay for the proxy-cost benchmark (issue 16): the floor of what
//! any process sitting between an OPC UA client and a field server costs on
//! this host, with no OPC UA work at all.
//!
//! Each accepted connection gets its own connection to `--to`, and bytes are
//! copied both ways until either side closes. It runs on one thread (tokio's
//! current-thread runtime, the cheapest scheduling there is) with
//! TCP_NODELAY on both sockets, so its CPU per relayed Read is the kernel's
//! cost of receiving and sending each message twice plus the event loop.
//! `bench/run-field.sh` (target `relay`) measures it beside the direct and
//! gateway paths.
//!
//! Prints `READY opc.tcp=<url>` on stdout once listening, where `<url>` is
//! the `--to` server's URL with the relay's port; stops on SIGTERM or
//! Ctrl-C. Not a test and not part of the product.

use std::net::SocketAddr;

use anyhow::{Context, Result};
use clap::Parser;
use tokio::net::{TcpListener, TcpStream};

/// Command line of the relay.
#[derive(Parser)]
#[command(about = "TCP byte relay in front of an OPC UA server (benchmark floor, not a gateway)")]
struct Args {
    /// Address to listen on (port 0: an ephemeral port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Address of the server every connection is relayed to.
    #[arg(long)]
    to: SocketAddr,
}

fn main() -> Result<()> {
    let args = Args::parse();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("tokio runtime")?
        .block_on(run(args))
}

/// Accepts connections and relays each on its own task until stopped.
async fn run(args: Args) -> Result<()> {
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let port = listener.local_addr()?.port();
    println!("READY opc.tcp=opc.tcp://{}:{port}/", args.listen.ip());
    let to = args.to;
    let accept = async move {
        loop {
            let (north, _) = listener.accept().await.context("accept")?;
            tokio::spawn(async move {
                if let Err(e) = relay(north, to).await {
                    eprintln!("relay: {e:#}");
                }
            });
        }
    };
    tokio::select! {
        r = accept => r,
        r = uagate_bench::stop_signal() => r.context("waiting for a stop signal"),
    }
}

/// Copies bytes between one client connection and its own connection to
/// the server until either side closes.
async fn relay(mut north: TcpStream, to: SocketAddr) -> Result<()> {
    let mut south = TcpStream::connect(to)
        .await
        .with_context(|| format!("cannot connect to {to}"))?;
    north.set_nodelay(true)?;
    south.set_nodelay(true)?;
    // Either side closing (or resetting) ends the relay of this connection.
    let _ = tokio::io::copy_bidirectional(&mut north, &mut south).await;
    Ok(())
}
