#![forbid(unsafe_code)]
//! Shared pieces of the uagate benchmark clients.
//!
//! - [`service`]: binary encoding and decoding of the few service messages
//!   the hand-made clients use, the [`service::Call`] trait of a session
//!   that can send them, session setup and the benchmark Read.
//! - [`uacp`]: a hand-made UA-TCP (UACP) client for SecurityPolicy None
//!   over any frame transport: Hello, OpenSecureChannel, CreateSession,
//!   anonymous ActivateSession, requests, CloseSession and CLO.
//! - [`stats`]: the measuring loop, percentiles and process CPU time.
//!
//! These are measuring tools, not tests: nothing here asserts timing.

use std::time::Duration;

use opcua_types::{NodeId, ReadValueId, VariableId};

pub mod service;
pub mod stats;
pub mod uacp;

/// Resolves on SIGTERM or Ctrl-C: how the benchmark's servers (the
/// reference server, the relay) learn that `bench/lib.sh` stops them.
pub async fn stop_signal() -> std::io::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r,
        _ = term.recv() => Ok(()),
    }
}

/// Logs to standard error at `RUST_LOG`, or at `default` (e.g. `"error"`)
/// when it is not set. Called first by each benchmark binary.
pub fn init_logging(default: &str) {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| default.into()),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// The ten Value attributes read by every benchmark request: namespace-0
/// Server nodes that both uagate and async-opcua-server implement.
pub const NODES: [VariableId; 10] = [
    VariableId::Server_ServerArray,
    VariableId::Server_NamespaceArray,
    VariableId::Server_ServerStatus,
    VariableId::Server_ServerStatus_StartTime,
    VariableId::Server_ServerStatus_CurrentTime,
    VariableId::Server_ServerStatus_State,
    VariableId::Server_ServerStatus_BuildInfo_ProductName,
    VariableId::Server_ServerStatus_BuildInfo_ProductUri,
    VariableId::Server_ServerStatus_BuildInfo_ManufacturerName,
    VariableId::Server_ServiceLevel,
];

/// Timeout for connecting and for any single request.
pub const STEP: Duration = Duration::from_secs(30);

/// The Value attributes of [`NODES`] as Read operands.
pub fn nodes_to_read() -> Vec<ReadValueId> {
    NODES
        .iter()
        .map(|v| ReadValueId::from(NodeId::from(*v)))
        .collect()
}

/// Resolve `nsu=<uri>;<id>` through the NamespaceArray, or parse `ns=..;..` directly.
///
/// Shared by the bench binaries' `--node` option; `step` bounds the read.
pub async fn resolve_node(
    session: &opcua_client::Session,
    spec: &str,
    step: Duration,
) -> anyhow::Result<NodeId> {
    use anyhow::{bail, Context};
    use opcua_types::TimestampsToReturn;
    use std::str::FromStr;
    let Some(rest) = spec.strip_prefix("nsu=") else {
        return NodeId::from_str(spec).map_err(|e| anyhow::anyhow!("bad --node {spec:?}: {e:?}"));
    };
    let Some((uri, id)) = rest.split_once(';') else {
        bail!("bad --node {spec:?}: expected nsu=<uri>;<i|s|g|b>=<id>");
    };
    let values = tokio::time::timeout(
        step,
        session.read(
            &[ReadValueId::from(NodeId::from(
                VariableId::Server_NamespaceArray,
            ))],
            TimestampsToReturn::Neither,
            0.0,
        ),
    )
    .await
    .context("NamespaceArray read timed out")?
    .context("NamespaceArray read failed")?;
    node_in_namespace_array(
        values.into_iter().next().and_then(|dv| dv.value),
        uri,
        id,
        spec,
    )
}

/// The NodeId of `id` (`i=..`, `s=..`, ...) in the namespace `uri`, whose
/// index is looked up in `array`, the server's NamespaceArray value as read.
/// Called by the bench binaries that resolve `nsu=<uri>;<id>` node specs
/// (`spec`, for the error messages) after reading the NamespaceArray their
/// own way.
pub fn node_in_namespace_array(
    array: Option<opcua_types::Variant>,
    uri: &str,
    id: &str,
    spec: &str,
) -> anyhow::Result<NodeId> {
    use anyhow::{bail, Context};
    use opcua_types::Variant;
    use std::str::FromStr;
    let Some(Variant::Array(arr)) = array else {
        bail!("NamespaceArray is not an array");
    };
    let index = arr
        .values
        .iter()
        .position(|v| matches!(v, Variant::String(s) if s.as_ref() == uri))
        .with_context(|| format!("namespace {uri:?} not in the server's NamespaceArray"))?;
    NodeId::from_str(&format!("ns={index};{id}"))
        .map_err(|e| anyhow::anyhow!("bad node {spec:?}: {e:?}"))
}
